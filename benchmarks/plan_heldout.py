"""Capacity plans for runs a fit never saw, checked against what was measured (issue #19:
predictions an SLO can rest on).

For each model's `general` run (8 and 20 req/s, the shared runs' highest load): fit the
hierarchy without that run (as `bayesblis validate --holdout experiment`, same settings),
then `bayesblis plan` its request mix (replayed, Poisson arrivals) under one SLO, twice: with
the posterior draws alone and with the simulator discrepancy calibrated on the *other*
experiments' held-out errors (the fold's own `folds[F].discrepancy` of a leave-one-experiment-
out report, so the held-out run never informs its own widening). Printed per run: the
capacity of each, and at each measured stage's rate the stated P(all SLOs hold) beside
whether the measured stage held them (ITL per generated token, as `validate` compares it).

The statistical version of the same check (every stage and metric, not one SLO) is the PIT
calibration `bayesblis validate` reports; this one shows what a planner reads.

Usage:
    python3 benchmarks/plan_heldout.py [--data DIR] [--report REPORT.json]
        [--slo "ttft_p90<0.2,itl_mean<20ms"] [--prob 0.9] [--draws 30]
        [--out benchmarks/results/plan_heldout.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(argv=None):
    from bayesblis.atomic import write_json
    from bayesblis.discrepancy import Discrepancy
    from bayesblis.model.data import ModelData
    from bayesblis.model.hierarchy import LatencyModel
    from bayesblis.model.store import Posterior
    from bayesblis.plan import (SearchSettings, option_tasks, parse_slos, probability_curve,
                                run_plan)
    from bayesblis.simulate.scenario import Scenario
    from bayesblis.validate import _thin_per_run, expand_dirs, load_runs

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, default=ROOT.parent / "shared/data/real/h100-inference-perf")
    p.add_argument("--report", type=Path, default=ROOT / "benchmarks/results/validate-experiment.json",
                   help="leave-one-experiment-out REPORT.json: each fold's discrepancy")
    p.add_argument("--slo", default="ttft_p90<0.2,itl_mean<20ms")
    p.add_argument("--prob", type=float, default=0.9)
    p.add_argument("--draws", type=int, default=30)
    p.add_argument("--duration-s", type=float, default=300.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/plan_heldout.json")
    args = p.parse_args(argv)

    report = json.loads(args.report.read_text())
    fold_sd = {f["fold"]: f["discrepancy"] for f in report["folds"]}
    sampler = dict(report["sampler"], seed=args.seed)
    slos = parse_slos(args.slo)
    dataset, data = load_runs(expand_dirs([args.data]), "H100")
    data = _thin_per_run(data, report["max_obs_per_run"], args.seed)
    rows = []
    for source in sorted((s for s in dataset.sources if s.name.endswith("-general")),
                         key=lambda s: s.name):
        t0 = time.perf_counter()
        train = ModelData(data.configs, data.obs[data.obs["run"].astype(str) != source.name])
        model = LatencyModel(sampler_config=sampler)
        model.build_model(train)
        model.fit(progressbar=False)
        posterior = Posterior.of_fit(model)
        diag = model.fit_info["diagnostics"]
        sc = Scenario.from_inference_perf(source.meta["path"], "H100", replay=True, seed=args.seed)
        measured = measured_per_generated_token(source)
        disc = Discrepancy.from_entries(fold_sd[source.name], holdout="experiment",
                                        source=f"{args.report} fold {source.name}")
        row = {"experiment": source.name, "fit_wall_s": round(time.perf_counter() - t0, 1),
               "r_hat_max": diag.get("r_hat_max"), "divergences": diag.get("divergences"),
               "discrepancy_sd": disc.sd, "extrapolation_slope": disc.slope, "stages": []}
        search = SearchSettings(prob=args.prob, duration_s=args.duration_s,
                                start_rate=float(measured["rate_rps"].max()), seed=args.seed)
        for label, d in (("posterior_only", None), ("with_discrepancy", disc)):
            plan = run_plan(sc, posterior, slos, [{}], search=search, n_draws=args.draws,
                            posterior_source="fold fit", discrepancy=d)
            row[f"capacity_{label}"] = plan["options"][0]["capacity_rate_per_s"]
            task = option_tasks(sc, posterior, [{}], slos, search, n_draws=args.draws,
                                discrepancy=d)[0]
            for i, rec in enumerate(probability_curve(task, list(measured["rate_rps"]))):
                if len(row["stages"]) <= i:
                    st = measured.iloc[i]
                    held = all(s.passes([float(st[s.result_metric])])[0] for s in slos)
                    row["stages"].append({"rate_rps": float(st["rate_rps"]), "measured_holds": bool(held),
                                          "measured": {s.result_metric: float(st[s.result_metric])
                                                       for s in slos}})
                row["stages"][i][f"p_all_{label}"] = rec["p_all"]
                row["stages"][i][f"median_{label}"] = {
                    s.result_metric: rec["metrics"][s.result_metric]["median"] for s in slos}
        rows.append(row)
        print(_row_text(row), flush=True)
    doc = {"slo": args.slo, "prob": args.prob, "draws": args.draws,
           "duration_s": args.duration_s, "seed": args.seed, "report": str(args.report),
           "sampler": sampler, "runs": rows}
    write_json(args.out, doc)
    print(f"wrote {args.out}")


def measured_per_generated_token(source):
    """The run's stage measurements with ITL per *generated* token: the simulator replays
    corrected output counts (`io.inference_perf.correct_output_counts`), and inference-perf's
    recorded counts are short for some requests, which inflates the measured per-token ITL
    (`validate` scales the prediction instead; the same ratio)."""
    from bayesblis.io.inference_perf import correct_output_counts
    from bayesblis.validate import _itl_count_scale

    measured = source.tables["stage_measurements"].reset_index(drop=True).copy()
    corrected = correct_output_counts(source.tables["requests"])
    scale = [_itl_count_scale(corrected, int(st)) for st in measured["stage"]]
    measured["itl_mean_s"] = measured["itl_mean_s"] / scale
    return measured


def _row_text(row) -> str:
    name = row["experiment"][16:]
    cap = (f"capacity {row['capacity_posterior_only'] or float('nan'):.1f} req/s posterior-only, "
           f"{row['capacity_with_discrepancy'] or float('nan'):.1f} with discrepancy")
    lines = [f"{name:<32} {cap}  (fit r_hat {row['r_hat_max']:.3f}, {row['fit_wall_s']:.0f} s)"]
    for st in row["stages"]:
        meas = ", ".join(f"{k[:-2]} {v * 1e3:.1f} ms" for k, v in st["measured"].items())
        pred = ", ".join(f"{k[:-2]} {v * 1e3:.1f}" for k, v in st["median_posterior_only"].items())
        lines.append(f"    {st['rate_rps']:>5.1f} req/s: measured {meas} -> "
                     f"{'holds' if st['measured_holds'] else 'fails'}; predicted median {pred}; "
                     f"P(holds) {st['p_all_posterior_only']:.2f} posterior-only, "
                     f"{st['p_all_with_discrepancy']:.2f} with discrepancy")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
