"""Calibration curve (issue #18): leave one model out, calibrate on the held-out model's first
0/50/200/1000 requests of one run, predict its other runs.

For every held-out model: fit the hierarchy on the other models' runs (as `bayesblis
validate --holdout model`), then for each request budget N calibrate that population
posterior (`bayesblis.calibrate`) on the first N requests after the warm-up
(`client_windows.WARMUP_S`) of the model's first run (by name) and simulate the model's
other runs with the calibrated draws (`validate`'s replay, comparison and summary). N = 0 is the population-level prediction (the plain
leave-one-model-out answer). Coverage is reported three times: with the posterior's own
intervals; widened by the simulator discrepancy as `bayesblis validate` does
(`validate.cross_fold_discrepancy`: per budget, each held-out model's discrepancy is
calibrated on the other models' calibrated-prediction errors); and widened by the
discrepancy `simulate` and `plan` give a new run of a fitted (here: calibrated)
configuration, measured held out by experiment on the other models' runs only
(`--experiment-report`, `new_run_discrepancy`).

Targets: held-out E2E-mean |error| <= 4% (median over normal-load stages), TTFT <= 8%,
90% interval coverage 80-95%, calibration wall <= 60 s.

Usage:
    python3 benchmarks/calibration_curve.py [--data DIR] [--budgets 0,50,200,1000,60s,300s,all]
        [--models llama-2-7b,...] [--out benchmarks/results/calibration_curve.json]
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(argv=None):
    from bayesblis.calibrate import calibrate, calibration_data
    from bayesblis.io.dataset import Dataset
    from bayesblis.model.data import ModelData
    from bayesblis.model.hierarchy import LatencyModel
    from bayesblis.model.store import Posterior
    from bayesblis.validate import (DEFAULT_DRAWS, _thin_per_run, compare, cross_fold_discrepancy,
                                    expand_dirs, load_runs, predict_experiment, source_model,
                                    summarize)

    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=str(ROOT.parent / "shared/data/real/h100-inference-perf"))
    ap.add_argument("--hardware", default="H100")
    ap.add_argument("--budgets", default="0,50,200,1000",
                    help="requests after the warm-up (N), seconds of traffic (Ns), or 'all'")
    ap.add_argument("--models", default=None, help="held-out models (default: all)")
    ap.add_argument("--fit-draws", type=int, default=300)
    ap.add_argument("--fit-tune", type=int, default=300)
    ap.add_argument("--max-obs-per-run", type=int, default=200)
    ap.add_argument("--draws", type=int, default=None,
                    help="posterior draws simulated per run (default: validate.DEFAULT_DRAWS, "
                         "150 for the population-level N = 0, 30 once calibrated)")
    ap.add_argument("--max-duration-s", type=float, default=None)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--experiment-report",
                    default=str(ROOT / "benchmarks/results/validate-experiment.json"),
                    help="`validate_real.sh experiment` report: the new-run discrepancy")
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/calibration_curve.json"))
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    budgets = [b.strip() for b in args.budgets.split(",")]

    dataset, data = load_runs(expand_dirs([args.data]), args.hardware)
    data = _thin_per_run(data, args.max_obs_per_run, args.seed)
    sources = list(dataset.sources)
    models = sorted(data.configs["model"].unique())
    if args.models:
        models = [m for m in models if m in args.models.split(",")]
    rows, records = [], {b: [] for b in budgets}
    predictions = {b: [] for b in budgets}  # {"fold", "source", "result", "records"} per target
    for held in models:
        keep = data.configs[data.configs["model"] != held]
        train = ModelData(keep, data.obs[data.obs["config"].isin(keep["config"])])
        print(f"fit without {held} ({len(train.obs)} windows) ...", flush=True)
        model = LatencyModel(sampler_config={"draws": args.fit_draws, "tune": args.fit_tune,
                                             "chains": 2, "seed": args.seed,
                                             "nuts_backend": "jax", "max_treedepth": 7,
                                             "target_accept": 0.95})
        model.build_model(train)
        model.fit(progressbar=False)
        parent = Posterior.of_fit(model)
        held_sources = sorted((s for s in sources if source_model(s, args.hardware) == held),
                              key=lambda s: s.name)
        calib_source, targets = held_sources[0], held_sources[1:]
        for budget in budgets:
            started = time.perf_counter()
            configs, _ = calibration_data(Dataset(sources=held_sources), hardware=args.hardware,
                                          max_requests=0)
            _, obs = calibration_data(Dataset(sources=[calib_source]), hardware=args.hardware,
                                      **budget_kwargs(budget))
            cal = calibrate(parent, configs, obs, seed=args.seed,
                            sampler_config={"seed": args.seed})
            wall = time.perf_counter() - started
            view = cal.view()
            n_draws = args.draws or DEFAULT_DRAWS["model" if budget == "0" else "experiment"]
            fold_records = []
            for src in targets:
                result = predict_experiment(src, view, hardware=args.hardware,
                                            n_draws=n_draws, seed=args.seed,
                                            allow_unseen=False,
                                            max_duration_s=args.max_duration_s, keep_draws=True)
                posterior_only = compare(src, result, fold=held, holdout="model")
                predictions[budget].append({"fold": held, "source": src, "result": result,
                                            "records": posterior_only})
                fold_records += posterior_only
            records[budget] += fold_records
            s = summarize(fold_records, "model")
            row = {"model": held, "calibration_run": calib_source.name, "requests": budget,
                   "n_requests": int(len(calib_requests(calib_source, budget))),
                   "n_obs": int(len(obs)), "calibration_wall_s": wall,
                   "diagnostics_passed": cal.fit_info["diagnostics"].get("passed"),
                   # coefficients the bound report flags (model/bounds.py): below the
                   # datasheet, at a floor, or implausibly slow ("above")
                   "physical_bounds": [f"{b['feature']} {b['side']} (median {b['median']:.3g})"
                                       for b in cal.fit_info["physical_bounds"]],
                   **{k: s.get(k) for k in ("median_abs_pct_error_e2e_mean",
                                            "median_abs_pct_error_ttft_mean",
                                            "median_abs_pct_error_itl_mean", "coverage_90",
                                            "n_normal_stages")}}
            rows.append(row)
            print(json.dumps(row), flush=True)
    model_of = {s.name: source_model(s, args.hardware) for s in sources}
    new_run_sd = new_run_discrepancy(args.experiment_report, models, model_of)
    overall = []
    for budget in budgets:
        if not records[budget]:
            continue
        s = summarize(records[budget], "model")
        widened_coverage = None
        if len({p["fold"] for p in predictions[budget]}) > 1:  # needs other folds' errors
            calibrated = cross_fold_discrepancy(predictions[budget])
            widened = [r for p in predictions[budget]
                       for r in compare(p["source"], p["result"], fold=p["fold"], holdout="model",
                                        discrepancy=calibrated[p["fold"]], seed=args.seed)]
            widened_coverage = summarize(widened, "model").get("coverage_90")
        new_run = [r for p in predictions[budget]
                   for r in compare(p["source"], p["result"], fold=p["fold"], holdout="model",
                                    discrepancy=new_run_sd[p["fold"]], seed=args.seed)]
        new_run_coverage = summarize(new_run, "model").get("coverage_90")
        walls = [r["calibration_wall_s"] for r in rows if r["requests"] == budget]
        overall.append({"requests": budget, "e2e_mean_err": s.get("median_abs_pct_error_e2e_mean"),
                        "ttft_mean_err": s.get("median_abs_pct_error_ttft_mean"),
                        "itl_mean_err": s.get("median_abs_pct_error_itl_mean"),
                        "coverage_90": s.get("coverage_90"),
                        "coverage_90_widened": widened_coverage,
                        "coverage_90_new_run_discrepancy": new_run_coverage,
                        "calibration_wall_s_max": max(walls),
                        "calibration_wall_s_median": float(np.median(walls)),
                        "n_normal_stages": s["n_normal_stages"]})
    print(format_table(overall))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"per_fold": rows, "overall": overall,
                                          "args": vars(args)}, indent=1, default=str))
    print(f"wrote {args.out}")


def new_run_discrepancy(report_path, models, model_of: dict) -> dict:
    """{model: {metric: {"sd", "extrapolation_slope", ...}}}: the discrepancy `simulate` gives a
    new run of a fitted configuration (a calibrated one is fitted; beyond the load of its
    calibration windows the slope widens it), measured held out by experiment
    (`validate_real.sh experiment`'s report) on the *other* models' runs only (`model_of`:
    experiment name -> model)."""
    from bayesblis.validate import METRICS, discrepancy_entries

    records = json.loads(Path(report_path).read_text())["records"]
    posterior_only = []
    for r in records:   # the posterior's own intervals, as the discrepancy is computed on
        rec = dict(r)
        for m in METRICS.values():
            if f"model_pred_{m}_lo" in r:
                rec[f"pred_{m}_lo"], rec[f"pred_{m}_hi"] = r[f"model_pred_{m}_lo"], r[f"model_pred_{m}_hi"]
        posterior_only.append(rec)
    return {held: discrepancy_entries([r for r in posterior_only
                                       if model_of[r["experiment"]] != held]) for held in models}


def budget_kwargs(budget: str) -> dict:
    """`calibration_data` keywords of a budget: "200" requests, "300s" of traffic, or "all"
    (the whole run after the warm-up: every load level it has)."""
    if budget == "all":
        return {}
    if budget.endswith("s"):
        return {"first_seconds": float(budget[:-1])}
    return {"max_requests": int(budget)}


def calib_requests(source, budget: str):
    """The calibration run's requests a budget keeps after the warm-up (for the table)."""
    from bayesblis.calibrate import WARMUP_S, truncate_source

    req = truncate_source(source, warmup_s=WARMUP_S, **budget_kwargs(budget)).tables["requests"]
    arrival = req["arrival_s"].to_numpy(float)
    return req[arrival >= arrival.min() + WARMUP_S] if len(req) else req


def format_table(overall) -> str:
    pct = lambda v: f"{v * 100:.0f}%" if v is not None else "n/a"  # noqa: E731
    lines = ["requests  E2E-mean err  TTFT err  ITL err  coverage90  widened  new-run sd  calib wall (median, max)",
             "--------  ------------  --------  -------  ----------  -------  ----------  ------------------------"]
    for r in overall:
        lines.append(f"{r['requests']:>8}  {r['e2e_mean_err']:>11.1f}%  {r['ttft_mean_err']:>7.1f}%"
                     f"  {r['itl_mean_err']:>6.1f}%  {pct(r['coverage_90']):>10}"
                     f"  {pct(r.get('coverage_90_widened')):>7}"
                     f"  {pct(r.get('coverage_90_new_run_discrepancy')):>10}"
                     f"  {r.get('calibration_wall_s_median', float('nan')):>9.1f} s, "
                     f"{r['calibration_wall_s_max']:.1f} s")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
