"""Achieved fraction of the datasheet per GPU, from vLLM's measured GEMMs (kernel-db).

Weight-bound GEMMs (a decode step's matmuls: few tokens, a large weight) are priced by the
bytes they move; compute-bound ones (a long prefill chunk) by their FLOPs:

- weight-bound: ``m <= 64`` tokens; bytes = (n k + m k + m n) x element bytes; achieved
  bandwidth = bytes / latency, as a fraction of `hbm_bandwidth_bytes_per_s`;
- compute-bound: ``m >= 4096``; FLOPs = 2 m n k; achieved FLOP/s as a fraction of
  `peak_dense_flops_per_s[dtype]`.

Two views per GPU, dtype and vLLM version: the square ``n = k = 8192`` shape (a 70B-class
layer's projection: 128 MiB of bf16 weight, past every GPU's L2), and all shapes whose
weight is at least `MIN_WEIGHT_BYTES` (weight-bound) or whose ``n, k >= 4096``
(compute-bound), summarised by median and quartiles. bf16 on every GPU; fp8 (per-tensor)
where the GPU has FP8 tensor cores.

Usage: python3 benchmarks/kernel_db_efficiency.py [--kernel-db DIR] [--out JSON]
Writes benchmarks/results/kernel_db_efficiency.json (docs/kernel-db.md).
"""

from __future__ import annotations

import argparse
import datetime as dt
import time
from pathlib import Path

import numpy as np
import pandas as pd
from provenance import git_commit

REPO = Path(__file__).resolve().parents[1]
RESULT = REPO / "benchmarks" / "results" / "kernel_db_efficiency.json"
DEFAULT_DB = REPO.parent / "shared" / "data" / "kernel-db"
WEIGHT_BOUND_MAX_M = 64
COMPUTE_BOUND_MIN_M = 4096
SQUARE = 8192
MIN_WEIGHT_BYTES = 128 * 2**20
"""Weight-bound shapes kept in the 'all shapes' view: at least 128 MiB of weight, past the
largest L2 of these GPUs (L40S, 96 MB), so the kernel streams from device memory."""
ELEMENT_BYTES = {"bf16": 2, "fp8": 1}


def efficiencies(gemm: pd.DataFrame, gpu) -> pd.DataFrame:
    """Per row: achieved bandwidth and FLOP/s and their fractions of `gpu`'s datasheet."""
    g = gemm[gemm["dtype"].isin(list(ELEMENT_BYTES))].copy()
    g["dtype"] = g["dtype"].astype(str)
    m, n, k = (g[c].to_numpy(float) for c in ("m", "n", "k"))
    width = g["dtype"].map(ELEMENT_BYTES).to_numpy(float)
    latency_s = g["latency_us"].to_numpy(float) * 1e-6
    g["weight_bytes"] = n * k * width
    g["bytes"] = (n * k + m * k) * width + m * n * 2  # output in bf16
    g["flops"] = 2 * m * n * k
    g["bandwidth_fraction"] = g["bytes"] / latency_s / gpu.hbm_bandwidth_bytes_per_s
    peak = g["dtype"].map(lambda d: gpu.peak_flops_per_s.get(d, 0.0)).to_numpy(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        g["flops_fraction"] = np.where(peak > 0, g["flops"] / latency_s / peak, np.nan)
    return g


def _stats(values) -> dict:
    v = np.asarray(values, float)
    v = v[np.isfinite(v)]
    if not len(v):
        return {"n": 0}
    q = np.percentile(v, [25, 50, 75])
    return {"n": int(len(v)), "median": round(float(q[1]), 4), "q25": round(float(q[0]), 4),
            "q75": round(float(q[2]), 4), "min": round(float(v.min()), 4), "max": round(float(v.max()), 4)}


def summarise(g: pd.DataFrame) -> dict:
    """Weight- and compute-bound fractions of one GPU x dtype x version."""
    weight = g[g["m"] <= WEIGHT_BOUND_MAX_M]
    compute = g[g["m"] >= COMPUTE_BOUND_MIN_M]
    sq_w = weight[(weight["n"] == SQUARE) & (weight["k"] == SQUARE)].sort_values("m")
    sq_c = compute[(compute["n"] == SQUARE) & (compute["k"] == SQUARE)].sort_values("m")
    return {
        "weight_bound_square": {
            "shape": f"m <= {WEIGHT_BOUND_MAX_M}, n = k = {SQUARE}",
            **_stats(sq_w["bandwidth_fraction"]),
            "by_m": {int(r.m): round(float(r.bandwidth_fraction), 4) for r in sq_w.itertuples()},
        },
        "weight_bound_all": {
            "shape": f"m <= {WEIGHT_BOUND_MAX_M}, weight >= {MIN_WEIGHT_BYTES // 2**20} MiB",
            **_stats(weight.loc[weight["weight_bytes"] >= MIN_WEIGHT_BYTES, "bandwidth_fraction"]),
        },
        "compute_bound_square": {
            "shape": f"m >= {COMPUTE_BOUND_MIN_M}, n = k = {SQUARE}",
            **_stats(sq_c["flops_fraction"]),
            "by_m": {int(r.m): round(float(r.flops_fraction), 4) for r in sq_c.itertuples()},
        },
        "compute_bound_all": {
            "shape": f"m >= {COMPUTE_BOUND_MIN_M}, n, k >= 4096",
            **_stats(compute.loc[(compute["n"] >= 4096) & (compute["k"] >= 4096), "flops_fraction"]),
        },
    }



def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kernel-db", type=Path, default=DEFAULT_DB)
    ap.add_argument("--out", type=Path, default=RESULT)
    args = ap.parse_args(argv)
    from bayesblis import __version__
    from bayesblis.atomic import write_json
    from bayesblis.catalog.gpus import load_gpu
    from bayesblis.io.kernel_db import read_kernel_db

    started = time.perf_counter()
    db = read_kernel_db(args.kernel_db)
    gemm = db["gemm"]
    results, table = {}, []
    for gpu_name, per_gpu in gemm.groupby("gpu", observed=True):
        gpu = load_gpu(str(gpu_name))
        eff = efficiencies(per_gpu, gpu)
        results[gpu.name] = {"datasheet": {
            "hbm_bandwidth_bytes_per_s": gpu.hbm_bandwidth_bytes_per_s,
            "peak_dense_flops_per_s": {d: gpu.peak_flops_per_s.get(d, 0.0) for d in ELEMENT_BYTES},
            "source": Path(gpu.source).name}, "versions": {}}
        for (version, dtype), g in eff.groupby(["framework_version", "dtype"], observed=True):
            if dtype != "bf16" and not gpu.supports(dtype):
                continue
            s = summarise(g)
            results[gpu.name]["versions"].setdefault(str(version), {})[dtype] = s
            table.append((gpu.name, str(version), dtype, s))
    print(f"{'GPU':<14} {'vLLM':<7} {'dtype':<5} {'weight-bound BW':>16} {'(all shapes)':>13} "
          f"{'compute-bound':>14} {'(all shapes)':>13}")
    for gpu, version, dtype, s in table:
        wb, wa = s["weight_bound_square"], s["weight_bound_all"]
        cb, ca = s["compute_bound_square"], s["compute_bound_all"]
        fmt = lambda x: f"{x['median']:.3f}" if x.get("n") else "-"  # noqa: E731
        print(f"{gpu:<14} {version:<7} {dtype:<5} {fmt(wb):>16} {fmt(wa):>13} {fmt(cb):>14} {fmt(ca):>13}")
    h100 = results.get("H100-SXM", {}).get("versions", {}).get("0.14.0", {}).get("bf16")
    ratios = {}
    if h100:
        for gpu, r in results.items():
            other = r["versions"].get("0.14.0", {}).get("bf16")
            if other and gpu != "H100-SXM":
                ratios[gpu] = {
                    "weight_bound": round(h100["weight_bound_square"]["median"]
                                          / other["weight_bound_square"]["median"], 4),
                    "compute_bound": round(h100["compute_bound_square"]["median"]
                                           / other["compute_bound_square"]["median"], 4)}
        print("H100's fraction over another GPU's (bf16, vLLM 0.14.0, n = k = 8192): "
              + ", ".join(f"{g} weight {v['weight_bound']:.2f} compute {v['compute_bound']:.2f}"
                          for g, v in ratios.items()))
    write_json(args.out, {
        "benchmark": "kernel_db_efficiency",
        "created_at": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "package_version": __version__, "git_commit": git_commit(),
        "inputs": {"kernel_db": str(args.kernel_db.resolve()), "gemm_rows": int(len(gemm)),
                   "gemm_files": sorted(db.files.loc[db.files["operator"] == "gemm", "file"])},
        "definitions": {
            "bandwidth_fraction": "(n k + m k) x element bytes + m n x 2, over latency, over the "
                                  "datasheet device-memory bandwidth",
            "flops_fraction": "2 m n k over latency over the datasheet dense peak of the dtype",
            "weight_bound": f"m <= {WEIGHT_BOUND_MAX_M}", "compute_bound": f"m >= {COMPUTE_BOUND_MIN_M}"},
        "gpus": results,
        "h100_over_gpu_bf16_0.14.0": ratios,
        "wall_s": round(time.perf_counter() - started, 1),
    })
    print(f"-> {args.out}")


if __name__ == "__main__":
    main()
