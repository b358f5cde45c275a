"""Predictions on GPUs never traced: the new-model runs' load profiles served on A100, L40S,
H200 (kernel-db measured) and A40 (not), with a posterior of the 16 traced H100 runs.

No GPU here has measurements of these runs, so this records what a planner is told: the
predictive median per stage and the width of its 90% interval (E2E, TTFT, ITL means, as a
share of the median), and the rule the simulator discrepancy applied
(`Discrepancy.for_configuration`). The H100 row of each run, and its measured value, are
the reference. Writes benchmarks/results/new_gpu_intervals.json.

    python benchmarks/new_gpu_intervals.py --posterior POSTERIOR.nc [--draws 100]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from bayesblis.discrepancy import load_discrepancy
from bayesblis.external_check import predict_run, read_run, score, write_report

SHARED = Path(__file__).resolve().parents[1].parent / "shared/data"
OUT = Path(__file__).resolve().parent / "results/new_gpu_intervals.json"
RUNS = ("60-llama-3-1-70b-tp4-general-lite-4-1", "65-01-ai-yi-34b-tp2-general-lite-2-1",
        "63-mistral-nemo-12b-tp1-codegen-1-1", "64-qwen2-5-7b-instruct-tp1-roleplay-1-1")
"""Unsaturated dense runs of `h100-new-models`: a seen family at TP 4 and TP 2, two new
families at TP 1."""
GPUS = ("H100-SXM", "A100-SXM-80GB", "L40S", "H200-SXM", "A40")
METRICS = ("e2e_mean_s", "ttft_mean_s", "itl_mean_s")


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--posterior", required=True)
    ap.add_argument("--draws", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    discrepancy = load_discrepancy()
    rows = []
    for name in RUNS:
        for gpu in GPUS:
            run = read_run(SHARED / "real/h100-new-models" / name)
            measured_on = run.hardware
            run.hardware = gpu
            result = predict_run(run, args.posterior, n_draws=args.draws, seed=args.seed,
                                 discrepancy=discrepancy, model_configs=[SHARED / "model_configs"])
            stage = score(run, result)[0]
            row = {"run": name, "gpu": gpu, "stage": stage["stage"],
                   "rule": (result["metadata"].get("discrepancy") or {}).get("applies"),
                   "unseen_levels": result["unseen_levels"]}
            for m in METRICS:
                row[f"pred_{m}"] = stage.get(f"pred_{m}")
                row[f"width_pct_{m}"] = stage.get(f"width_pct_{m}")
                if gpu == measured_on:
                    row[f"measured_{m}"] = stage.get(f"measured_{m}")
            rows.append(row)
            print(f"{name[:40]:<40} {gpu:<14} E2E {1e3 * row['pred_e2e_mean_s']:8.0f} ms, "
                  f"90% width {row['width_pct_e2e_mean_s']:6.1f}%")
    summary = {gpu: {f"median_width_pct_{m}": float(np.median(
        [r[f"width_pct_{m}"] for r in rows if r["gpu"] == gpu and r[f"width_pct_{m}"] is not None]))
        for m in METRICS} for gpu in GPUS}
    report = {"benchmark": "new_gpu_intervals", "posterior": str(args.posterior),
              "draws": args.draws, "seed": args.seed, "discrepancy": discrepancy.to_dict(),
              "rows": rows, "summary": summary, "wall_s": round(time.perf_counter() - t0, 1)}
    write_report(args.out, report)
    for gpu, s in summary.items():
        print(gpu, {m: round(v, 1) for m, v in s.items()})
    print(f"wrote {args.out}")
    return report


if __name__ == "__main__":
    main()
