"""Fresh prefill steps: the step time a posterior predicts against the sum of vLLM's
measured kernels for the same step (kernel-db).

The shared traces barely measure prefill (their prompts are prefix-cache hits), so a fresh
prompt's price rests on the prefill compute coefficient's prior and on the features. This
checks both against kernel-db (vLLM 0.14.0, H100 or `--gpu`: the GEMMs from the package's grid of
its times, `kernel_prices.dense_gemm_times`; prefill attention read from kernel-db itself, of
which the features take only one ratio per GPU): one prompt of T tokens and no decodes, for
dense models on the configurations the shared runs and the new-model check serve, and two
more.

- kernels: per layer the dense GEMMs at m = T (`kernel_prices.layer_gemms`: fused QKV,
  output projection, gate+up, down; the lm_head at m = 8, the table's smallest), prefill
  attention of one prompt of T tokens (the table's nearest head and KV-head count per GPU,
  scaled by heads), and at TP > 1 two all-reduces of T x hidden x 2 bytes (the deployment's
  measured all-reduce curve). Norms, rotary, activations, sampling and the scheduler are
  not in it: serving takes somewhat longer.
- predicted: the posterior's coefficient draws for the deployment
  (`coefficients.posterior_draws`, a new family's effects drawn where the fit lacks it)
  times the step's features; median and 90% interval over draws, without step noise.

Ratio = predicted median / kernels.

Usage: python3 benchmarks/prefill_kernels.py --posterior P.nc [--gpu A100-SXM-80GB] [--draws 200]
       [--out JSON]
Writes benchmarks/results/prefill_kernels.json (H100; another GPU: prefill_kernels_<gpu>.json;
docs/kernel-db.md). On a GPU the posterior never saw, its effects are drawn
(as `coefficients --allow-unseen` does).
"""

from __future__ import annotations

import argparse
import datetime as dt
import time
from pathlib import Path

import numpy as np
from provenance import REPO, git_commit, shared_data_dir

RESULT = REPO / "benchmarks" / "results" / "prefill_kernels.json"
GPU_FOLDERS = {"H100-SXM": "h100_sxm", "A100-SXM-80GB": "a100_sxm", "L40S": "l40s", "H200-SXM": "h200_sxm"}
"""kernel-db's folder of each GPU the check runs on."""
VERSION = "0.14.0"
TOKENS = (1024, 2048, 4096)
"""Prompt lengths: token counts kernel-db's GEMM tables have at prefill sizes."""
LM_HEAD_TOKENS = 8
"""The lm_head runs once per prompt: the GEMM table's smallest token count prices it."""
DEPLOYMENTS = (("llama-2-7b", 1), ("llama-2-70b", 4), ("codellama-34b", 2), ("llama-3.1-70b", 4),
               ("mistral-nemo-12b", 1), ("mistral-nemo-12b", 2), ("qwen2.5-7b", 1), ("yi-34b", 2),
               ("llama-3.1-8b", 1), ("qwen3-14b", 1))
"""(catalog model, TP): the dense configurations of the shared runs and the new-model check,
and two more served often."""
PROB = 0.9


def attention_table(kernel_db: Path, gpu: str):
    """Prefill attention points of kernel-db on `gpu` (bf16 KV, one prompt per call)."""
    from bayesblis.io.kernel_db import read_kernel_db

    table = read_kernel_db(kernel_db, gpus=[GPU_FOLDERS[gpu]], versions=[VERSION])["prefill_attention"]
    return table[(table["kv_cache_dtype"] == "bf16") & (table["batch_size"] == 1)
                 & (table["framework_version"].astype(str) == VERSION)]


def attention_us(table, heads: int, kv_heads: int, tokens: int) -> float:
    """One layer's prefill attention of `tokens` tokens (µs): the nearest measured head
    count scaled to `heads`, the nearest KV-head count, log-log interpolation in length."""
    head_counts = np.sort(table["num_heads"].unique())
    near = int(head_counts[np.argmin(np.abs(np.log(head_counts / heads)))])
    rows = table[table["num_heads"] == near]
    kv_counts = np.sort(rows["num_kv_heads"].unique())
    kv = int(kv_counts[np.argmin(np.abs(np.log(kv_counts / kv_heads)))])
    by_length = rows[rows["num_kv_heads"] == kv].groupby("prompt_tokens")["latency_us"].median()
    log_us = np.interp(np.log(tokens), np.log(by_length.index.to_numpy(float)), np.log(by_length.to_numpy(float)))
    return float(np.exp(log_us)) * heads / near


def kernel_parts_ms(deployment, table, tokens: int) -> dict:
    """The step's GEMM, attention and all-reduce time from kernel-db (ms)."""
    from bayesblis.catalog import kernel_prices

    model, tp = deployment.model, deployment.tp
    # the layers' GEMMs at the prompt's tokens, the lm_head (`layer_gemms`' last shape) once
    _, _, count, times_us, _ = kernel_prices.dense_gemm_times(
        model, deployment.gpu.name, tp, deployment.compute_dtype, (tokens, LM_HEAD_TOKENS))
    gemm_us = float(count[:-1] @ times_us[0, :-1] + count[-1] * times_us[1, -1])
    heads, kv_heads = model.n_heads // tp, max(1, model.n_kv_heads // tp)
    attention = model.n_layers * attention_us(table, heads, kv_heads, tokens)
    allreduce = 0.0
    if deployment.allreduce_curve is not None:
        message_bytes, seconds = deployment.allreduce_curve
        allreduce = 2 * model.n_layers * float(np.interp(tokens * model.hidden_size * 2, message_bytes, seconds)) * 1e6
    return {"gemm_ms": gemm_us / 1e3, "attention_ms": attention / 1e3, "allreduce_ms": allreduce / 1e3}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--posterior", required=True, type=Path)
    parser.add_argument("--gpu", default="H100-SXM", choices=sorted(GPU_FOLDERS))
    parser.add_argument("--draws", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    out = args.out or (RESULT if args.gpu == "H100-SXM" else RESULT.with_name(f"prefill_kernels_{GPU_FOLDERS[args.gpu]}.json"))

    from bayesblis.atomic import write_json
    from bayesblis.catalog.models import load_model
    from bayesblis.coefficients import posterior_draws
    from bayesblis.constants import MODEL_VERSION
    from bayesblis.features.beta import BETA_FEATURES, beta_features
    from bayesblis.features.physics import Deployment

    started = time.perf_counter()
    kernel_db = shared_data_dir() / "kernel-db"
    table = attention_table(kernel_db, args.gpu)
    rows = []
    for name, tp in DEPLOYMENTS:
        deployment = Deployment(load_model(name), args.gpu, tp=tp, dtype="auto")
        draws = posterior_draws(args.posterior, deployment, args.draws, allow_unseen=True, seed=args.seed)
        for tokens in TOKENS:
            kernels = kernel_parts_ms(deployment, table, tokens)
            kernels["kernels_ms"] = sum(kernels.values())
            features = beta_features(deployment, prefill_tokens=tokens, prefill_context_tokens=0,
                                     prefill_attention_pairs=tokens * (tokens + 1) / 2, num_prefill_reqs=1,
                                     num_decode_reqs=0, decode_context_tokens=0)[0]
            step_ms = draws.beta @ features * 1e3
            lo, mid, hi = np.quantile(step_ms, [(1 - PROB) / 2, 0.5, (1 + PROB) / 2])
            compute = BETA_FEATURES.index("prefill_compute_s")
            rows.append({"model": name, "tp": tp, "prompt_tokens": tokens,
                         **{k: round(v, 3) for k, v in kernels.items()},
                         "predicted_ms": round(float(mid), 3), "predicted_lo_ms": round(float(lo), 3),
                         "predicted_hi_ms": round(float(hi), 3),
                         "prefill_compute_coefficient": round(float(np.median(draws.beta[:, compute])), 3),
                         "ratio": round(float(mid / kernels["kernels_ms"]), 3)})
            print(f"{name:18s} TP{tp} {tokens:5d} tokens: kernels {kernels['kernels_ms']:7.2f} ms, "
                  f"predicted {mid:7.2f} ms [{lo:.2f}, {hi:.2f}], ratio {mid / kernels['kernels_ms']:.2f}")
    ratios = {str(t): round(float(np.median([r["ratio"] for r in rows if r["prompt_tokens"] == t])), 3)
              for t in TOKENS}
    summary = {"median_ratio_by_prompt_tokens": ratios,
               "median_ratio": round(float(np.median([r["ratio"] for r in rows])), 3),
               "ratio_range": [min(r["ratio"] for r in rows), max(r["ratio"] for r in rows)],
               "share_with_kernels_inside_interval": round(float(np.mean(
                   [r["predicted_lo_ms"] <= r["kernels_ms"] <= r["predicted_hi_ms"] for r in rows])), 3)}
    print("median predicted / kernels by prompt length:", ratios)
    write_json(out, {
        "benchmark": "prefill_kernels", "created_at": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "git_commit": git_commit(), "model_version": MODEL_VERSION, "posterior": str(args.posterior),
        "draws": args.draws, "seed": args.seed, "hardware": args.gpu,
        "kernel_db": f"{GPU_FOLDERS[args.gpu]}, vLLM {VERSION} (GEMM tables through the package's catalog, prefill attention read directly)",
        "method": __doc__.split("\n\n")[1].replace("\n", " "), "summary": summary, "rows": rows,
        "wall_s": round(time.perf_counter() - started, 1)})
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
