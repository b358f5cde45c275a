"""Load response with long prompts (issue #19): fit the `long_prompt` synthetic fleet and
check that the posterior tracks how latency rises with the arrival rate.

The fleet (`bayesblis.synth`, preset `long_prompt`): six configurations (3 GPUs, dense and
MoE, TP 1/2, chunk 512/2048/8192) plus one held out, each served 1-4k-token prompts at 20,
40, 60 and 80% of its burst capacity (30 s per rate), traced with OTEL journeys and step
samples. The script generates it, ingests it, fits it (NUTS, the demo's observation kinds),
then replays every run's four stages with posterior draws and with the true coefficients
(`bayesblis.load_response`) and prints, per run and stage, the ITL measured in the run's own
traces, the true-coefficient replay and the predictive median [90% interval], the rise from
the lowest to the highest rate, and the same figures for TTFT and E2E; plus the fit's diagnostics and the share of true coefficients inside
their 90% intervals. Results: benchmarks/results/long_prompt_fleet.json.

Usage:
    python3 benchmarks/long_prompt_fleet.py [--draws 400] [--seed 0] [--sim-draws 40]
        [--work DIR] [--out benchmarks/results/long_prompt_fleet.json]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draws", type=int, default=400, help="NUTS draws (and tuning steps) per chain")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sim-draws", type=int, default=40, help="posterior draws simulated per run")
    ap.add_argument("--work", type=Path, default=None, help="folder for the fleet (default: temporary)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/long_prompt_fleet.json")
    args = ap.parse_args(argv)

    from bayesblis.atomic import write_json
    from bayesblis.load_response import (CURVE_METRICS, curve_errors, fit_fleet, format_curves,
                                         stage_curve)
    from bayesblis.model.diagnostics import format_diagnostics
    from bayesblis.model.synthetic_steps import FEATURES, truth_coverage
    from bayesblis.model.store import Posterior
    from bayesblis.synth import generate_fleet

    work = args.work or Path(tempfile.mkdtemp(prefix="long_prompt_"))
    t0 = time.perf_counter()
    fleet = generate_fleet("long_prompt", work / "fleet", seed=args.seed, progress=False)
    t_gen = time.perf_counter() - t0
    model, md = fit_fleet(fleet, draws=args.draws, seed=args.seed)
    t_fit = time.perf_counter() - t0 - t_gen
    diag = model.fit_info["diagnostics"]
    print(f"long_prompt fleet (seed {args.seed}): {len(fleet.configs)} runs, "
          f"{int(fleet.configs['n_requests'].sum())} requests, {len(md.obs)} observations; "
          f"generated in {t_gen:.0f} s, fitted in {t_fit:.0f} s")
    print(format_diagnostics(diag))
    truth = {k: [fleet.truth["configs"][k]["beta"][f] for f in FEATURES] for k in fleet.train_configs}
    coverage = truth_coverage(model.idata.posterior, truth, identified_in=md)
    print(f"true beta coefficients inside their 90% intervals (identified ones): {coverage:.1%}")

    posterior = Posterior.of_fit(model)
    curves = [stage_curve(fleet, name, posterior, n_draws=args.sim_draws, seed=args.seed)
              for name in fleet.configs["name"]]
    summary = {}
    for metric in CURVE_METRICS:
        print(f"\n{metric.replace('_mean_s', '').upper()} mean per stage (ms): measured in the run's "
              f"traces, true coefficients, posterior")
        print(format_curves(curves, metric))
        summary[metric] = {f"{side}_vs_{against}": curve_errors([c for c in curves if c["seen"] == seen],
                                                               metric, against)
                           for side, seen in (("seen", True), ("held_out", False))
                           for against in ("measured", "true")}
    print(f"\n{'metric':<7}{'configs':<10}{'scored vs':<10}{'stages':>7}{'median err':>12}{'90% cover':>11}"
          f"{'rise: measured':>16}{'true':>9}{'predicted':>11}")
    for metric, rows in summary.items():
        for key, r in rows.items():
            print(f"{metric.replace('_mean_s', ''):<7}{key.split('_vs_')[0]:<10}{r['against']:<10}"
                  f"{r['n_stages']:>7}{r['median_abs_error']:>12.1%}{r['coverage']:>11.0%}"
                  f"{r['median_rise_measured']:>+16.1%}{r['median_rise_true']:>+9.1%}"
                  f"{r['median_rise_pred']:>+11.1%}")
    write_json(args.out, {"fleet": "long_prompt", "seed": args.seed, "draws": args.draws,
                          "sim_draws": args.sim_draws, "n_obs": int(len(md.obs)),
                          "diagnostics": diag, "truth_coverage": coverage,
                          "wall_s": {"generate": round(t_gen, 1), "fit": round(t_fit, 1)},
                          "summary": summary, "curves": curves})
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
