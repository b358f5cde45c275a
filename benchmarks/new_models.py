"""The new-model check: the 12 measured runs of `h100-new-models` (six models the traces never
saw) predicted from their load profiles with a posterior of the 16 traced runs.

Without --posterior, the 16 shared runs are ingested and fitted first (the README's quick
tour). Writes benchmarks/results/new_models.json: the `validate --external` report plus the
summary over the eight non-Scout runs (the issue's targets) and the BLIS trained-physics
figures published beside the measurements (in sample for BLIS).

    python benchmarks/new_models.py [--posterior POSTERIOR.nc] [--draws 200] [--discrepancy none]
        [--plot docs/new-models-check.png]

200 draws, the published figures' (about a minute): with 40, a never-traced model's median
sat up to 6 points from the 200-draw one (Mistral-Nemo TP 2, one posterior: +1.2% against +7.0%).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bayesblis.discrepancy import load_discrepancy
from bayesblis.external_check import (METRICS, expand_runs, format_table, run_check,
                                      summary_block, write_report)

SHARED = Path(__file__).resolve().parents[1].parent / "shared/data"
OUT = Path(__file__).resolve().parent / "results/new_models.json"


def fit_traced_runs(workdir: Path) -> Path:
    """Ingest and fit the 16 traced runs with the CLI defaults; the posterior's path."""
    ds, post = workdir / "ds", workdir / "posterior.nc"
    for args in (["ingest", str(SHARED / "real/h100-inference-perf"), "--hardware", "H100",
                  "--out", str(ds), "--quiet"], ["fit", str(ds), "--out", str(post), "--quiet"]):
        subprocess.run([sys.executable, "-m", "bayesblis", *args], check=True)
    return post


def subset_summary(records: list[dict], keep) -> dict:
    """`external_check.summary_block` of the records keep(record) selects, and their runs."""
    rows = [r for r in records if keep(r)]
    return {"n_runs": len({r["run"] for r in rows}), **summary_block(rows)}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--posterior", default=None)
    ap.add_argument("--draws", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--discrepancy", default=None,
                    help="a discrepancy file; 'none': posterior-only intervals (default: packaged)")
    ap.add_argument("--plot", default=None, help="a PNG of every stage's error and interval")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        posterior = args.posterior or fit_traced_runs(Path(tmp))
        discrepancy = None if args.discrepancy == "none" else load_discrepancy(args.discrepancy)
        report = run_check(expand_runs([SHARED / "real/h100-new-models"]), posterior,
                           n_draws=args.draws, seed=args.seed, discrepancy=discrepancy,
                           model_configs=[SHARED / "model_configs"], echo=print)
    report["wall_s"] = round(time.perf_counter() - t0, 1)
    records = report["records"]
    report["summary"]["non_scout"] = subset_summary(records, lambda r: "scout" not in r["run"])
    report["summary"]["scout"] = subset_summary(records, lambda r: "scout" in r["run"])
    blis = report["reference"].get("blis_trained_physics_in_sample", {})
    report["summary"]["blis_trained_physics_in_sample"] = {
        m: {"median_abs_pct_error_non_scout": float(np.median(
                [abs(v) for run, v in per_run.items() if "scout" not in run])),
            "median_abs_pct_error_scout": float(np.median(
                [abs(v) for run, v in per_run.items() if "scout" in run]))}
        for m, per_run in blis.items()}
    write_report(args.out, report)
    print(format_table(report))
    for name in ("non_scout", "scout"):
        s = report["summary"][name]
        print(name, {m: (round(s[m]["median_abs_pct_error"], 1),
                         round(s[m]["median_signed_pct_error"], 1), round(s[m]["coverage"], 2))
                     for m in METRICS if m in s})
    print("BLIS trained-physics (in sample):", report["summary"]["blis_trained_physics_in_sample"])
    print(f"wrote {args.out}")
    if args.plot:
        from bayesblis.report.figures import fig_external_check, save_png

        save_png(fig_external_check(report), args.plot)
        print(f"wrote {args.plot}")
    return report


if __name__ == "__main__":
    main()
