"""TTFT in decode steps (issues #18, #19): how many step times does a measured TTFT span?

For every measured run and normal-load stage it prints the mean TTFT, the per-token decode
time (ITL: (mean E2E - mean TTFT) / (mean output - 1)) and their ratio, after each run's
warm-up (client_windows.WARMUP_S); and, for runs with two normal-load stages, the slope
dTTFT / dITL between them: how much a TTFT grows per millisecond the steps grow.

What the simulator predicts without prefill cost and API delay: a request that arrives
while the engine is busy waits for the rest of the step in flight (0.5 step on average),
then its prefill step (about 1 step for these ~500-token prompts) -> 1.5 steps; with async
scheduling one more step (the one scheduled ahead) -> 2.5 steps. A per-request constant
(API delay) adds to the ratio but not to the slope.

Usage:
    python3 benchmarks/ttft_in_steps.py [DATA] [--out benchmarks/results/ttft_in_steps.json]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def stage_rows(folder: Path) -> list[dict]:
    """Per normal-load stage of one run: rate, TTFT mean, ITL, ratio (after warm-up)."""
    from bayesblis.client_windows import (WARMUP_S, queueing_requests,
                                          requests_in_error_stages)
    from bayesblis.io.inference_perf import read_inference_perf

    exp = read_inference_perf(folder)
    req = exp.requests
    left_out = set(queueing_requests(req.dropna(subset=["ttft_s", "e2e_s"]))) | \
        set(requests_in_error_stages(req))
    rows = []
    for st in exp.stages.itertuples():
        sub = req[(req["stage"] == st.stage) & ~req["has_error"]
                  & (req["arrival_s"] >= req["arrival_s"].min() + WARMUP_S)]
        sub = sub[~sub.index.isin(left_out)]
        if len(sub) < 50:
            continue
        ttft = float(sub["ttft_s"].mean())
        itl = float((sub["e2e_s"].mean() - ttft) / (sub["output_tokens"].mean() - 1))
        rows.append({"run": folder.name, "stage": int(st.stage), "rate_rps": float(st.rate_rps),
                     "n_requests": int(len(sub)), "prompt_tokens": float(sub["prompt_tokens"].mean()),
                     "ttft_mean_ms": ttft * 1e3, "itl_ms": itl * 1e3, "ttft_in_steps": ttft / itl})
    return rows


def slopes(rows: list[dict]) -> list[dict]:
    """dTTFT / dITL between the lowest and highest normal-load stage of each run."""
    out = []
    for run in sorted({r["run"] for r in rows}):
        rs = sorted((r for r in rows if r["run"] == run), key=lambda r: r["rate_rps"])
        if len(rs) < 2 or rs[-1]["itl_ms"] - rs[0]["itl_ms"] < 0.5:
            continue
        out.append({"run": run, "rates": [rs[0]["rate_rps"], rs[-1]["rate_rps"]],
                    "slope": (rs[-1]["ttft_mean_ms"] - rs[0]["ttft_mean_ms"])
                    / (rs[-1]["itl_ms"] - rs[0]["itl_ms"])})
    return out


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("data", nargs="?", type=Path,
                    default=ROOT.parent / "shared/data/real/h100-inference-perf")
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/ttft_in_steps.json"))
    args = ap.parse_args(argv)
    from bayesblis.atomic import write_json

    rows = []
    for folder in sorted(p for p in args.data.iterdir() if p.is_dir()):
        rows += stage_rows(folder)
    print(f"{'run':<48} {'rate':>5} {'prompt':>6} {'TTFT ms':>8} {'ITL ms':>7} {'TTFT/ITL':>8}")
    for r in rows:
        print(f"{r['run']:<48} {r['rate_rps']:>5g} {r['prompt_tokens']:>6.0f} "
              f"{r['ttft_mean_ms']:>8.1f} {r['itl_ms']:>7.2f} {r['ttft_in_steps']:>8.2f}")
    ratio = np.array([r["ttft_in_steps"] for r in rows])
    sl = slopes(rows)
    print(f"\nTTFT / ITL over {len(rows)} normal-load stages: median {np.median(ratio):.2f}, "
          f"range {ratio.min():.2f}-{ratio.max():.2f}")
    for s in sl:
        print(f"  dTTFT/dITL {s['run']:<48} {s['rates'][0]:g} -> {s['rates'][1]:g} req/s: "
              f"{s['slope']:.2f}")
    if sl:
        print(f"slope median {np.median([s['slope'] for s in sl]):.2f} over {len(sl)} runs "
              "(1.5 steps without async scheduling, 2.5 with it, before queueing)")
    write_json(args.out, {"stages": rows, "slopes": sl})
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
