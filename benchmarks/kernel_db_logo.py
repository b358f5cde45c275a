"""Leave one GPU out of kernel-db: a GPU's kernel times predicted from the other three.

For a GPU kernel-db lacks, step physics rests on its datasheet times an achieved fraction
measured elsewhere. This measures how far that carries, per operator group, on the kernel
prices bayesblis ships (`bayesblis.catalog.kernel_prices`, built from kernel-db vLLM 0.14.0):

- ``gemm_decode``: every GEMM shape with n, k in [1024, 16384] at the decode token counts,
  time over weight bytes at datasheet bandwidth;
- ``gemm_prefill``: the same shapes at the prefill token counts, time over FLOPs at the
  datasheet bf16 peak;
- ``decode_attention``: KV streaming past L2, time over KV bytes at datasheet bandwidth;
- ``allreduce_per_byte`` / ``allreduce_latency``: the all-reduce vLLM runs, per byte over
  the ring formula at the GPU's link, and the time of a small message, at TP 2, 4 and 8.

Predictions of the held-out GPU's ratios: ``pooled``, the geometric mean of the other three
GPUs' ratio at the same point (a hierarchy's population mean with three members); and
``h100``, the reference GPU's ratio (what a deployment on a GPU without tables gets: every
kernel factor 1). Error = predicted time / measured time - 1; median |error| per group.

Usage: python3 benchmarks/kernel_db_logo.py [--out JSON]
Writes benchmarks/results/kernel_db_logo.json (docs/kernel-db.md).
"""

from __future__ import annotations

import argparse
import datetime as dt
import time
from pathlib import Path

import numpy as np
from provenance import git_commit

REPO = Path(__file__).resolve().parents[1]
RESULT = REPO / "benchmarks" / "results" / "kernel_db_logo.json"
SHAPE_RANGE = (1024, 16384)
TARGET_ABS_ERROR_PCT = 10.0


def gemm_ratios(catalog: dict) -> dict:
    """{group: {gpu: log ratio per (n, k) point}} of the bf16 GEMM grids (shared shapes)."""
    from bayesblis.catalog import kernel_prices
    from bayesblis.catalog.gpus import load_gpu

    out = {"gemm_decode": {}, "gemm_prefill": {}}
    for gpu_name, grids in catalog["gemm"].items():
        grid = grids.get("bf16")
        if grid is None:
            continue
        gpu = load_gpu(gpu_name)
        n = np.asarray(grid["n"], float)[:, None]
        k = np.asarray(grid["k"], float)[None, :]
        keep = ((n >= SHAPE_RANGE[0]) & (n <= SHAPE_RANGE[1]) & (k >= SHAPE_RANGE[0]) & (k <= SHAPE_RANGE[1]))
        log_us = {m: np.asarray(g) for m, g in zip(grid["m"], grid["log_us"])}
        decode = np.mean([log_us[m] - np.log(n * k * 2 / gpu.hbm_bandwidth_bytes_per_s * 1e6)
                          for m in kernel_prices.DECODE_TOKENS], axis=0)
        prefill = np.median([log_us[m] - np.log(2 * m * n * k / gpu.peak_flops("bf16") * 1e6)
                             for m in kernel_prices.PREFILL_TOKENS], axis=0)
        out["gemm_decode"][gpu_name] = decode[keep]
        out["gemm_prefill"][gpu_name] = prefill[keep]
    return out


def scalar_ratios(catalog: dict) -> dict:
    """{group: {gpu: log ratio per point}} of decode attention and the all-reduce (TP 2, 4, 8)."""
    out = {"decode_attention": {g: np.log([r]) for g, r in catalog["decode_attention"].items()},
           "allreduce_per_byte": {}, "allreduce_latency": {}}
    for gpu, by_tp in catalog["allreduce"].items():
        tps = [tp for tp in ("2", "4", "8") if tp in by_tp]
        out["allreduce_per_byte"][gpu] = np.log([by_tp[tp]["per_byte_ratio"] for tp in tps])
        out["allreduce_latency"][gpu] = np.log([by_tp[tp]["latency_us"] for tp in tps])
    return out


def leave_one_out(by_gpu: dict, reference: str) -> dict:
    """Per held-out GPU: median |error| (%) of the pooled and the reference predictions."""
    gpus = sorted(g for g, v in by_gpu.items() if len(v) == len(next(iter(by_gpu.values()))))
    out = {}
    for held in gpus:
        others = [g for g in gpus if g != held]
        pooled = np.mean([by_gpu[g] for g in others], axis=0)
        row = {"points": int(by_gpu[held].size),
               "pooled_median_abs_error_pct": round(float(np.median(np.abs(np.expm1(pooled - by_gpu[held])))) * 100, 1),
               "pooled_median_signed_error_pct": round(float(np.median(np.expm1(pooled - by_gpu[held]))) * 100, 1)}
        if held != reference and reference in by_gpu:
            ref = by_gpu[reference]
            row["h100_median_abs_error_pct"] = round(float(np.median(np.abs(np.expm1(ref - by_gpu[held])))) * 100, 1)
            row["h100_median_signed_error_pct"] = round(float(np.median(np.expm1(ref - by_gpu[held]))) * 100, 1)
        out[held] = row
    return out


def main(argv=None):
    from bayesblis import __version__
    from bayesblis.catalog import kernel_prices

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=RESULT)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    catalog = kernel_prices.catalog()
    groups = {**gemm_ratios(catalog), **scalar_ratios(catalog)}
    results = {group: leave_one_out(by_gpu, kernel_prices.REFERENCE[0]) for group, by_gpu in groups.items()}
    within = {group: {gpu: row["pooled_median_abs_error_pct"] <= TARGET_ABS_ERROR_PCT for gpu, row in rows.items()}
              for group, rows in results.items()}
    report = {
        "benchmark": "kernel_db_logo", "created_at": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "package_version": __version__, "git_commit": git_commit(),
        "inputs": {"catalog": "bayesblis/catalog/kernel_prices.json", "source": catalog.get("source")},
        "method": __doc__.split("\n\n")[1].replace("\n", " "),
        "target_abs_error_pct": TARGET_ABS_ERROR_PCT, "groups": results, "within_target": within,
        "wall_s": round(time.perf_counter() - t0, 2)}
    from bayesblis.atomic import write_json

    write_json(args.out, report)
    print(f"{'group':<20}{'held-out GPU':<16}{'pooled':>8}{'signed':>8}{'H100':>8}")
    for group, rows in results.items():
        for gpu, row in rows.items():
            h = row.get("h100_median_signed_error_pct")
            print(f"{group:<20}{gpu:<16}{row['pooled_median_abs_error_pct']:>7.1f}%"
                  f"{row['pooled_median_signed_error_pct']:>+7.1f}%" + (f"{h:>+7.1f}%" if h is not None else ""))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
