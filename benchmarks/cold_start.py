"""A fresh server's start-up on the traced runs: the stall at a run's start that its first
requests' extra waiting equals, per run and per layer.

For each run of the 16 traced H100 runs whose first stage is below capacity (steady TTFT
under 1 s): the steady TTFT is the median over the requests sent 60-300 s into the run; the
excess is the sum, over the requests of its first 30 s, of their TTFT beyond it
(request-seconds); a stall of S seconds at the start, arrivals at rate r, adds r S^2 / 2,
so S = sqrt(2 excess / r). Per layer: S over the model's layers, and its median per
architecture. A scenario's `vllm.cold_start_s` simulates such a stall (`EngineConfig.cold_start_s`);
no default applies one, because the traced runs' start-up does not carry to other
configurations (docs/limits.md; benchmarks/results/experiments/model-v16-cold-start-default.json).

Usage:
    python3 benchmarks/cold_start.py [DATA] [--out benchmarks/results/cold_start.json]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

FIRST_S = 30.0
STEADY_S = (60.0, 300.0)
BELOW_CAPACITY_TTFT_S = 1.0
STAGE_S = 600.0
"""The first stage's length in these runs: the start-up's share of its mean TTFT."""


def stall_equivalent_s(excess_request_s: float, rate_rps: float) -> float:
    """The stall at a run's start whose queueing adds `excess_request_s` request-seconds of
    waiting at `rate_rps` arrivals a second: sqrt(2 E / r)."""
    if excess_request_s <= 0 or rate_rps <= 0:
        return 0.0
    return (2.0 * excess_request_s / rate_rps) ** 0.5


def run_row(folder: Path) -> dict | None:
    """The start-up measure of one inference-perf run folder (None if overloaded)."""
    from bayesblis.catalog.models import load_model
    from bayesblis.io.inference_perf import read_inference_perf

    exp = read_inference_perf(folder)
    req = exp.requests[~exp.requests["has_error"]].dropna(subset=["ttft_s"])
    t, ttft = req["arrival_s"].to_numpy(float), req["ttft_s"].to_numpy(float)
    t = t - t.min()
    steady = float(np.median(ttft[(t >= STEADY_S[0]) & (t < STEADY_S[1])]))
    if steady > BELOW_CAPACITY_TTFT_S:
        return None
    first = t < FIRST_S
    excess = float(np.clip(ttft[first] - steady, 0.0, None).sum())
    rate = float(first.sum() / FIRST_S)
    stall = stall_equivalent_s(excess, rate)
    model = load_model(exp.model_name)
    n0 = int((t < STAGE_S).sum())
    return {"run": folder.name, "model": model.name, "arch": model.arch,
            "n_layers": int(model.n_layers), "rate_rps": rate, "steady_ttft_ms": 1e3 * steady,
            "first_10s_ttft_ms": 1e3 * float(ttft[t < 10.0].mean()),
            "excess_request_s": excess, "stall_equivalent_s": stall,
            "stall_per_layer_s": stall / model.n_layers,
            "stage_mean_ttft_added_ms": 1e3 * excess / max(n0, 1)}


def main(argv=None):
    from benchmarks.provenance import git_commit, shared_data_dir

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", nargs="?", type=Path, default=None)
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/cold_start.json"))
    args = ap.parse_args(argv)
    from bayesblis.atomic import write_json

    data = args.data or shared_data_dir() / "real/h100-inference-perf"
    rows = [r for r in (run_row(f) for f in sorted(p for p in data.iterdir() if p.is_dir())) if r]
    print(f"{'run':<46} {'layers':>6} {'steady':>7} {'0-10 s':>7} {'stall s':>7} {'per layer':>9}")
    for r in rows:
        print(f"{r['run']:<46} {r['n_layers']:>6} {r['steady_ttft_ms']:>6.0f}ms "
              f"{r['first_10s_ttft_ms']:>6.0f}ms {r['stall_equivalent_s']:>7.2f} "
              f"{1e3 * r['stall_per_layer_s']:>7.1f}ms")
    per_arch = {a: float(np.median([r["stall_per_layer_s"] for r in rows if r["arch"] == a]))
                for a in sorted({r["arch"] for r in rows})}
    for a, v in per_arch.items():
        print(f"{a}: median {1e3 * v:.1f} ms a layer")
    write_json(args.out, {"benchmark": "cold_start", "git_commit": git_commit(),
                          "data": str(data), "first_s": FIRST_S, "steady_window_s": STEADY_S,
                          "runs": rows, "median_stall_per_layer_s": per_arch})
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
