"""Step physics priced from vLLM's measured kernels (kernel-db), per deployment.

The step features price bytes over the datasheet bandwidth and messages over the datasheet
link; how close vLLM's kernels get depends on the GPU, the dtype and the shapes. kernel-db
(vLLM 0.14.0, AIConfigurator) times bf16 decode GEMMs of 8192 x 8192 at 0.86 of H100's
bandwidth but 0.64 of A100's, 4096 x 4096 at 0.64 on H100, and FP8 GEMMs (per-tensor
scaled) at only 0.25-0.53 on H100: at decode sizes barely faster than bf16, although they
read half the bytes. Per deployment, relative to the reference (H100-SXM bf16, the traced
runs' hardware) so the fitted coefficients keep their meaning:

- `factor`: a step's dense GEMMs (`layer_gemms`: attention projections, MLP or shared
  expert per GPU of the TP group, the lm_head once, each from its `gemm_tables` dtype: bf16
  where a quantized checkpoint leaves the module unquantized) at `DECODE_TOKENS`,
  measured, over their weight bytes at datasheet bandwidth. Routed experts (fused-MoE
  kernels) are not priced here. A100 about 1.2, FP8 on H100 about 2.4 where every GEMM is
  FP8 (Llama-4-Scout at TP 2: 1.6, its attention and lm_head are bf16);
- `moe_factor`: a fused-MoE layer at decode token counts that touch every local expert,
  measured, over its experts' bytes at datasheet bandwidth, from the table's shape nearest
  the model's (per GPU, dtype and expert TP/EP): Mixtral-8x7B on H100 bf16 TP 2 0.93, FP8
  fused MoE about 1.0-1.1 on H100; measured and reported, not applied (`PRICE_MOE`);
- `kv_factor`: decode attention's KV streaming past L2 (A100 1.16, H200 1.13, L40S 0.98);
- `prefill_attention_factor`: prefill (context) attention's measured time over its FLOPs at
  the bf16 peak, at prompts of `PREFILL_ATTENTION_TOKENS` or more, relative to the
  reference's dense GEMMs at prefill sizes (H100 1.50, A100 1.46, H200 1.49, L40S 1.77):
  FlashAttention reaches about 0.53 of H100's peak where the GEMMs reach 0.79;
- `allreduce_curve`: the time of the all-reduce vLLM runs at the TP (its custom kernel
  over NVLink, with its one-shot/two-shot switch; NCCL over PCIe) by message size, which
  prices a step's all-reduces whole (its per-byte and per-call summaries feed
  `benchmarks/kernel_db_logo.py`);
- `gpu_compute_factor`: the dense GEMMs' bf16 FLOP time at `PREFILL_TOKENS` on the GPU over
  H100's at the same shapes (A100 about 0.9, L40S about 1.1, H100 1), and `gpu_compute_rate`,
  its median over the catalog's dense deployments, one value per GPU, which deployments
  carry (`PRICE_COMPUTE_ACROSS_GPUS`, model version 14);
- `compute_factor`: the dense GEMMs' FLOP rate at `PREFILL_TOKENS` and the deployment's
  dtype relative to the H100 reference; applied to FP8 deployments
  (`PRICE_LOW_PRECISION_COMPUTE`), measured and reported for the others (`PRICE_COMPUTE`).

Without tables for the GPU (and dtype) a factor is None. A GPU kernel-db lacks altogether
takes each factor pooled over the GPUs it measures (`pooled`: their geometric mean, the
population a new GPU is drawn from; `catalog.kernel_spread` gives its spread): a GPU of
unknown kernels streams at the measured GPUs' typical fraction of their datasheets, not at
H100's, the best of them.

The tables live in ``kernel_prices.json`` beside this module (log GEMM latency over the
(n, k) grid at each token count per GPU and GEMM dtype; the decode-attention ratio and the
all-reduce curves per GPU), built from a kernel-db folder by ``python3 -m
bayesblis.catalog.kernel_prices KERNEL_DB_DIR``; nothing reads kernel-db at run time.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import numpy as np

CATALOG_FILE = Path(__file__).with_name("kernel_prices.json")
FRAMEWORK_VERSION = "0.14.0"
"""The vLLM version whose GEMM tables are read: the one kernel-db has for every GPU, and
the closest to the traced runs' v0.15.1."""
DECODE_TOKENS = (8, 16, 32, 64)
"""Token counts of a decode step's GEMMs (weight-bound on every GPU here): a layer's time
is the mean over them."""
PREFILL_TOKENS = (1024, 2048, 4096)
"""Token counts of prefill chunks' GEMMs (compute-bound): the achieved FLOP rate is the
median over them."""
TOKENS = DECODE_TOKENS + PREFILL_TOKENS
GEMM_DTYPES = {"bf16": "bf16", "fp16": "bf16", "fp8": "fp8"}
"""Compute dtype -> the GEMM table that prices it (fp16 runs the bf16 kernels' shapes)."""
TABLE_BYTES = {"bf16": 2.0, "fp8": 1.0}
PRICE_COMPUTE = False
"""Whether every deployment carries `compute_factor` (its dense GEMMs' measured FLOP rate;
FP8 deployments do anyway, `PRICE_LOW_PRECISION_COMPUTE`). Off:
measured on the new-model check (docs/kernel-db.md), it priced Llama-4-Scout's FP8 GEMMs at
2.6x the reference's FLOP time and moved its E2E from 2% to 8% too slow (median, seed 1);
applied to bf16 and fp16 only (model version 8 features), E2E and ITL held out stayed
within 0.1 point and TTFT held out by model went from 1.33 / 1.33% to 1.40 / 2.35% (seeds
1 / 2; benchmarks/results/experiments/model-v8-*-compute-bf16-*)."""
PRICE_LOW_PRECISION_COMPUTE = True
"""Whether FP8 deployments carry `compute_factor` when `PRICE_COMPUTE` is off: their dense
GEMMs' measured FLOP time at the FP8 datasheet peak relative to H100 bf16 (vLLM's FP8 GEMMs
reach 0.24-0.46 of the FP8 peak: Llama-4-Scout TP2 2.28, Llama-3.1-8B TP1 2.17). On, with
a roofline per kernel group, Llama-4-Scout's long-prompt TTFT on the new-model check went
from -40% to -28% and no other run moved (docs/kernel-db.md); no traced run is FP8."""
PRICE_COMPUTE_ACROSS_GPUS = True
"""Whether deployments carry `gpu_compute_rate` as their compute factor (when
`PRICE_COMPUTE` is off and the dtype is not FP8): the median over the catalog's dense
deployments of their bf16 GEMMs' measured FLOP time on the GPU over H100's at the same
shapes, each over its own peak (model version 14): A100 0.915, L40S 1.10, H200 1.00; 1 on
H100, so no H100 figure moves. Per GPU, not per deployment: the per-shape ratio
(`gpu_compute_factor`, A100 0.72-1.2, L40S 0.82-1.28) carries kernel-db's out-of-line rows
(H100's 2,560 x 8,192 GEMM at 4,096 tokens, the QKV projection of Llama-2-70B at TP 4, puts
that deployment at 0.77 on A100). With the prefill compute prior centred on H100's GEMMs
(model version 13) a GPU's own rate is the complement: without it L40S prefill was priced
about 10% fast, A100's about 9% slow."""
PRICE_MOE = False
"""Whether deployments carry `moe_factor` (routed experts at vLLM's measured fused-MoE
time). Off: measured on the new-model check (docs/kernel-db.md), it moved Llama-4-Scout
from +1.9% to +5.7% too slow (median signed E2E error, 1,000 draws, seed 1) without
improving the other models; Mixtral, the one traced MoE, is where the fit absorbs it. On
model version 9 it helped Scout on one check seed, not the other, and moved Mixtral held out
by model from -1..-4% to -7.5..-10% (docs/kernel-db.md)."""
REFERENCE = ("H100-SXM", "bf16")
"""The GPU and dtype every factor is relative to: the traced runs'."""
L2_BYTES = {"H100-SXM": 50e6, "A100-SXM-80GB": 40e6, "L40S": 96e6, "H200-SXM": 50e6}
"""L2 cache per GPU (datasheets, as kernel-db's README lists them)."""
L2_MULTIPLE = 4
"""Decode-attention points whose KV working set exceeds this many L2s price KV streaming."""
ALLREDUCE_BYTES = (256 * 2**10, 32 * 2**20)
"""Message sizes the all-reduce line is fitted over: 16 to 2,048 tokens of an 8192-wide model."""
SMALL_ALLREDUCE_BYTES = 64 * 2**10
"""Messages up to this size (4 tokens of an 8192-wide model) are latency-bound."""
PREFILL_ATTENTION_TOKENS = 4096
"""Prompts of at least this many tokens price prefill attention: there its FLOPs outweigh
the kernel's per-token work (1.7-1.9x the FLOP time on the SXM GPUs; at 1,024 tokens
2-6x, a few per cent of a prefill step)."""
PRICE_PREFILL_ATTENTION = True
"""Whether prefill attention's FLOPs carry `prefill_attention_factor` (model version 13)."""
MOE_DISTRIBUTION = "balanced"
"""The routing of the fused-MoE points read (tokens spread round-robin over the experts)."""
MOE_FALLBACK_DISTRIBUTION = "power_law_1.01"
"""The routing read where a GPU lacks MOE_DISTRIBUTION points (mapped to it, `measure_moe`)."""
MOE_TOKENS = (16, 32, 48, 64, 80, 96, 128, 160, 192, 256)
"""Decode token counts a fused-MoE ratio may come from: the two smallest at which the
balanced routing touches every expert (tokens x top-k >= experts) are used."""
NCCL_VERSION = "2.27.3"
"""The NCCL version read where vLLM's custom all-reduce does not run (kernel-db has it for
A100 and L40S; another where a GPU lacks it)."""


def layer_gemms(model, tp: int) -> list[tuple[int, int, float]]:
    """(n, k, count per step) of the dense GEMMs one GPU of a `tp` group runs in a step:
    per layer the fused QKV and output projections, the MLP (gate+up fused, down) or an
    MoE layer's shared expert, and the lm_head once. MLA attention is one [hidden x
    params/hidden] GEMM, a shape approximation."""
    h = model.hidden_size
    out = []
    if model.is_mla:
        out.append((max(1, model.attention_matmul_params_per_layer // h // tp), h, model.n_layers))
    else:
        kv_heads = max(1, model.n_kv_heads // tp) if model.n_kv_heads >= tp else 1
        q = model.n_heads // tp * model.head_dim
        out.append((q + 2 * kv_heads * model.head_dim, h, model.n_layers))
        out.append((h, q, model.n_layers))
    up = 2 if model.gated_mlp else 1
    if model.n_dense_layers and model.intermediate_size:
        inter = model.intermediate_size // tp
        out += [(up * inter, h, model.n_dense_layers), (h, inter, model.n_dense_layers)]
    if model.n_moe_layers and model.shared_expert_intermediate_size:
        inter = max(1, model.shared_expert_intermediate_size // tp)
        out += [(up * inter, h, model.n_moe_layers), (h, inter, model.n_moe_layers)]
    out.append((max(1, model.vocab_size // tp), h, 1))
    return [(int(n), int(k), float(c)) for n, k, c in out]


def measure(db) -> dict:
    """The catalog document's tables from a `KernelDb` (FRAMEWORK_VERSION): ``gemm``
    {gpu: {dtype: grid}}, ``decode_attention`` {gpu: ratio}, ``allreduce`` {gpu: {tp: fit}},
    ``moe`` {gpu: [shape ratios]}, ``prefill_attention`` {gpu: ratio}."""
    return {"gemm": measure_gemm(db), "decode_attention": measure_decode_attention(db),
            "prefill_attention": measure_prefill_attention(db) if "prefill_attention" in db.tables else {},
            "allreduce": measure_allreduce(db), "moe": measure_moe(db) if "moe" in db.tables else {}}


def _version(table):
    return table[table["framework_version"].astype(str) == FRAMEWORK_VERSION]


def measure_gemm(db) -> dict:
    """{gpu: {gemm dtype: grid}}: per grid the sorted n and k values and log(latency in µs)
    at each of TOKENS."""
    gemm = _version(db["gemm"])
    out: dict = {}
    for (gpu, dtype), rows in gemm.groupby(["gpu", "dtype"], observed=True, sort=True):
        if dtype not in TABLE_BYTES:
            continue
        rows = rows[rows["m"].isin(TOKENS)]
        if rows.empty:
            continue
        n_values = np.sort(rows["n"].unique())
        k_values = np.sort(rows["k"].unique())
        grids = []
        for m in TOKENS:
            table = (rows[rows["m"] == m].groupby(["n", "k"])["latency_us"].median().unstack("k")
                     .reindex(index=n_values, columns=k_values))
            grids.append(_fill_nearest(np.log(table.to_numpy(float))).round(3).tolist())
        out.setdefault(str(gpu), {})[str(dtype)] = {
            "n": n_values.astype(int).tolist(), "k": k_values.astype(int).tolist(),
            "m": list(TOKENS), "log_us": grids}
    return out


def measure_decode_attention(db) -> dict:
    """{gpu: ratio}: median of bf16 decode attention's measured time over its KV bytes at
    datasheet bandwidth, over the points whose KV working set exceeds L2_MULTIPLE x the
    GPU's L2 (the benchmark replays one layer's KV, which stays in L2 below that)."""
    from bayesblis.catalog.gpus import load_gpu

    table = _version(db["decode_attention"])
    out = {}
    for gpu, rows in table.groupby("gpu", observed=True, sort=True):
        if gpu not in L2_BYTES:
            continue
        rows = rows[rows["kv_cache_dtype"] == "bf16"]
        kv_bytes = (rows["batch_size"] * rows["kv_len_tokens"] * rows["num_kv_heads"]
                    * rows["head_dim"] * 2 * 2).to_numpy(float)
        past = kv_bytes > L2_MULTIPLE * L2_BYTES[gpu]
        if past.sum() < 10:
            continue
        time_s = rows["latency_us"].to_numpy(float)[past] * 1e-6
        bytes_s = kv_bytes[past] / load_gpu(gpu).hbm_bandwidth_bytes_per_s
        out[str(gpu)] = round(float(np.median(time_s / bytes_s)), 4)
    return out


def measure_prefill_attention(db) -> dict:
    """{gpu: ratio}: median of bf16 prefill attention's measured time over its causal FLOPs
    (4 x batch x heads x head_dim x prompt (prompt + 1) / 2) at the GPU's bf16 peak, over the
    points of at least PREFILL_ATTENTION_TOKENS prompt tokens."""
    from bayesblis.catalog.gpus import load_gpu

    table = _version(db["prefill_attention"])
    out = {}
    for gpu, rows in table.groupby("gpu", observed=True, sort=True):
        rows = rows[(rows["kv_cache_dtype"] == "bf16") & (rows["prompt_tokens"] >= PREFILL_ATTENTION_TOKENS)]
        if len(rows) < 10:
            continue
        prompt = rows["prompt_tokens"].to_numpy(float)
        flops = (4.0 * rows["batch_size"] * rows["num_heads"] * rows["head_dim"]).to_numpy(float) * prompt * (prompt + 1) / 2
        time_s = rows["latency_us"].to_numpy(float) * 1e-6
        out[str(gpu)] = round(float(np.median(time_s / (flops / load_gpu(str(gpu)).peak_flops("bf16")))), 4)
    return out


def measure_allreduce(db) -> dict:
    """{gpu: {tp: {"bytes", "us", "latency_us", "per_byte_ratio"}}}: the all-reduce vLLM runs
    (its custom kernel in CUDA-graph mode on NVLink GPUs, NCCL without NVLink): its measured
    time (µs, median per message size) over message bytes; latency_us = median time of
    messages up to SMALL_ALLREDUCE_BYTES (latency-bound), per_byte_ratio = the slope of a
    line over messages of ALLREDUCE_BYTES over the ring formula's seconds per byte at the
    catalog's link bandwidth (summaries for `benchmarks/kernel_db_logo.py`)."""
    from bayesblis.catalog.gpus import load_gpu
    from bayesblis.features.beta import allreduce_link_s

    out: dict = {}
    for gpu in sorted(set(db.files["gpu"])):
        spec = load_gpu(gpu)
        if spec.has_nvlink and "custom_allreduce" in db.tables:
            rows = _version(db["custom_allreduce"])
            rows = rows[(rows["gpu"] == gpu) & (rows["backend"] == "vllm_graph")]
        else:
            rows = db["nccl"]
            rows = rows[(rows["gpu"] == gpu) & (rows["collective"] == "all_reduce") & (rows["dtype"] == "fp16")]
            versions = set(rows["framework_version"].astype(str))
            rows = rows[rows["framework_version"].astype(str) == (NCCL_VERSION if NCCL_VERSION in versions
                                                                   else min(versions, default=""))]
        for tp, by_tp in rows.groupby("num_gpus", observed=True, sort=True):
            size = by_tp["message_bytes"].to_numpy(float)
            keep = (size >= ALLREDUCE_BYTES[0]) & (size <= ALLREDUCE_BYTES[1])
            if keep.sum() < 3 or tp < 2:
                continue
            latency_us = by_tp["latency_us"].to_numpy(float)
            small = size <= SMALL_ALLREDUCE_BYTES
            if not small.any():
                continue
            slope = np.polyfit(size[keep], latency_us[keep], 1)[0]
            formula = float(allreduce_link_s(1.0, int(tp), spec.interconnect_bandwidth_bytes_per_s)) * 1e6
            curve = by_tp.groupby("message_bytes", observed=True)["latency_us"].median().sort_index()
            out.setdefault(str(gpu), {})[str(int(tp))] = {
                "bytes": curve.index.astype(float).tolist(), "us": curve.round(3).tolist(),
                "latency_us": round(float(np.median(latency_us[small])), 3),
                "per_byte_ratio": round(float(slope / formula), 4)}
    return out


def measure_moe(db) -> dict:
    """{gpu: [{"dtype", "tp", "ep", "hidden", "inter", "experts", "topk", "ratio"}]}: per
    fused-MoE shape (bf16 and fp8 per-tensor), the measured layer time under MOE_DISTRIBUTION
    routing over its local experts' weight bytes (experts / ep x 3 x hidden x inter / tp) at
    datasheet bandwidth, median over the two smallest MOE_TOKENS that touch every expert.
    Where a GPU has only MOE_FALLBACK_DISTRIBUTION points (A100 and L40S at 0.14.0), their
    times are brought to balanced routing by the reference GPU's balanced / power-law time
    ratio at the same shape and token count (routing sets which experts are read, not how
    fast)."""
    from bayesblis.catalog.gpus import load_gpu

    table = _version(db["moe"])
    table = table[table["dtype"].isin(TABLE_BYTES)
                  & table["distribution"].isin([MOE_DISTRIBUTION, MOE_FALLBACK_DISTRIBUTION])]
    shape = ["dtype", "tp", "ep", "hidden_size", "inter_size", "num_experts", "topk", "num_tokens"]
    times = table.groupby(["gpu", "distribution", *shape], observed=True)["latency_us"].median()
    reference = times.get(REFERENCE[0])
    routing = (None if reference is None or MOE_DISTRIBUTION not in reference.index.get_level_values(0)
               or MOE_FALLBACK_DISTRIBUTION not in reference.index.get_level_values(0)
               else (reference.xs(MOE_DISTRIBUTION) / reference.xs(MOE_FALLBACK_DISTRIBUTION)).dropna())
    out: dict = {}
    for gpu in times.index.get_level_values("gpu").unique():
        by_routing = times.xs(gpu)
        if MOE_DISTRIBUTION in by_routing.index.get_level_values(0):
            balanced = by_routing.xs(MOE_DISTRIBUTION)
        elif routing is not None:
            balanced = (by_routing.xs(MOE_FALLBACK_DISTRIBUTION) * routing).dropna()
        else:
            continue
        bandwidth = load_gpu(str(gpu)).hbm_bandwidth_bytes_per_s
        for key, micros in balanced.groupby(level=shape[:-1]):
            dtype, tp, ep, hidden, inter, experts, topk = key
            tokens = [t for t in MOE_TOKENS if t * topk >= experts][:2]
            micros = micros[micros.index.get_level_values("num_tokens").isin(tokens)]
            if micros.empty or experts % ep:
                continue
            bytes_s = experts / ep * 3 * hidden * inter / tp * TABLE_BYTES[str(dtype)] / bandwidth
            out.setdefault(str(gpu), []).append({
                "dtype": str(dtype), "tp": int(tp), "ep": int(ep), "hidden": int(hidden), "inter": int(inter),
                "experts": int(experts), "topk": int(topk),
                "ratio": round(float(np.median(micros.to_numpy(float) * 1e-6 / bytes_s)), 4)})
    return out


def _fill_nearest(grid: np.ndarray) -> np.ndarray:
    """Missing grid points take their nearest measured neighbour's value (rows, then columns)."""
    grid = grid.copy()
    for axis in (1, 0):
        for i in range(grid.shape[1 - axis]):
            line = grid[i] if axis == 1 else grid[:, i]
            ok = np.isfinite(line)
            if ok.any() and not ok.all():
                idx = np.arange(len(line))
                line[~ok] = line[ok][np.abs(idx[~ok, None] - idx[None, ok]).argmin(axis=1)]
    return grid


@lru_cache(maxsize=1)
def catalog() -> dict:
    """The built-in tables (``kernel_prices.json``): "gemm", "decode_attention", "allreduce",
    "moe" (`measure`) and "source"."""
    if not CATALOG_FILE.is_file():
        return {"gemm": {}, "decode_attention": {}, "allreduce": {}, "moe": {}}
    return json.loads(CATALOG_FILE.read_text())


def gemm_time_us(gpu: str, table_dtype: str, n, k, tokens) -> np.ndarray | None:
    """GEMM times (µs) of [n x k] weights at each of `tokens` (values of TOKENS), one row per
    token count, interpolated linearly in log n, log k and log time; past the largest
    measured n or k (e.g. a 152k-token vocabulary's lm_head) the time of the largest grows
    in proportion, below the smallest it is the smallest's. None without a table for this
    GPU and dtype."""
    grid = catalog()["gemm"].get(gpu, {}).get(table_dtype)
    if grid is None:
        return None
    from scipy.interpolate import RegularGridInterpolator

    ln, lk = np.log(grid["n"]), np.log(grid["k"])
    log_n, log_k = np.log(np.atleast_1d(n).astype(float)), np.log(np.atleast_1d(k).astype(float))
    points = np.column_stack([np.clip(log_n, ln[0], ln[-1]), np.clip(log_k, lk[0], lk[-1])])
    beyond = np.exp(np.maximum(log_n - ln[-1], 0.0) + np.maximum(log_k - lk[-1], 0.0))
    rows = [grid["m"].index(m) for m in tokens]
    return np.array([np.exp(RegularGridInterpolator((ln, lk), np.asarray(grid["log_us"][i]))(points)) * beyond
                     for i in rows])


def gemm_tables(model, tp: int, compute_dtype: str) -> list[str] | None:
    """The GEMM table (dtype) of each of `layer_gemms`: the compute dtype's, but bf16 for
    the attention projections and the lm_head a quantized checkpoint leaves unquantized
    (`ModelArch.unquantized_attention`, `unquantized_lm_head`); None without a table."""
    table = GEMM_DTYPES.get(compute_dtype)
    if table is None:
        return None
    gemms = layer_gemms(model, tp)
    tables = [table] * len(gemms)
    if table != REFERENCE[1]:
        if model.unquantized_attention:
            tables[:1 if model.is_mla else 2] = [REFERENCE[1]] * (1 if model.is_mla else 2)
        if model.unquantized_lm_head:
            tables[-1] = REFERENCE[1]
    return tables


def dense_gemm_times(model, gpu: str, tp: int, compute_dtype: str, tokens):
    """(n, k, count per step, µs [len(tokens), n shapes], table dtype per shape) of the
    deployment's dense GEMMs (`layer_gemms`, each at its `gemm_tables` dtype) at `tokens`;
    None without a table."""
    tables = gemm_tables(model, tp, compute_dtype)
    if tables is None:
        return None
    n, k, count = (np.array(c, dtype=float) for c in zip(*layer_gemms(model, tp)))
    tables = np.array(tables)
    times_us = np.zeros((len(tokens), len(n)))
    for table in set(tables):
        own = tables == table
        times = gemm_time_us(gpu, table, n[own], k[own], tokens)
        if times is None:
            return None
        times_us[:, own] = times
    return n, k, count, times_us, tables


TINY_GEMM_STREAM_US = 1.0
"""A GEMM whose weights stream in under this many µs at datasheet bandwidth takes only a
kernel's fixed time (`kernel_fixed_us`)."""

PRICE_FIXED_TIME = True
"""Whether a GEMM's fixed time (`kernel_fixed_us`) is priced apart from its weight
streaming: `ratio` then streams only the time beyond it, and `gemm_fixed_us` is a step
feature of its own (model version 17)."""


@lru_cache(maxsize=64)
def kernel_fixed_us(gpu: str, table_dtype: str) -> float | None:
    """A GEMM kernel's fixed time on `gpu` (µs): the median of the table's decode-size GEMMs
    whose weights stream in under TINY_GEMM_STREAM_US (H100 bf16 3.35 µs, A100 5.1, L40S 2.8,
    H200 3.5; H100 fp8 12.4); None without a table."""
    from bayesblis.catalog.gpus import load_gpu

    grid = catalog()["gemm"].get(gpu, {}).get(table_dtype)
    if grid is None:
        return None
    n, k = np.array(grid["n"], float), np.array(grid["k"], float)
    stream_us = (n[:, None] * k[None, :] * TABLE_BYTES[table_dtype]
                 / load_gpu(gpu).hbm_bandwidth_bytes_per_s * 1e6)
    times = np.exp(np.array(grid["log_us"], float))
    rows = [i for i, m in enumerate(grid["m"]) if m in DECODE_TOKENS]
    tiny = times[rows][:, stream_us < TINY_GEMM_STREAM_US]
    tiny = tiny[np.isfinite(tiny)]
    return float(np.median(tiny)) if tiny.size else None


def _fixed_us(gpu: str, tables) -> np.ndarray | None:
    """`kernel_fixed_us` of each GEMM's table (0 everywhere unless PRICE_FIXED_TIME)."""
    if not PRICE_FIXED_TIME:
        return np.zeros(len(tables))
    fixed = [kernel_fixed_us(gpu, str(t)) for t in tables]
    return None if any(f is None for f in fixed) else np.array(fixed)


def gemm_fixed_us(model, gpu: str, tp: int, compute_dtype: str) -> float | None:
    """The fixed time of a step's dense GEMMs (`layer_gemms`, each at its table's
    `kernel_fixed_us`), µs; 0 unless PRICE_FIXED_TIME; None without the GPU's tables."""
    tables = gemm_tables(model, tp, compute_dtype)
    fixed = None if tables is None else _fixed_us(gpu, tables)
    if fixed is None:
        return None
    count = np.array([c for _, _, c in layer_gemms(model, tp)])
    return float(np.sum(count * fixed))


def ratio(model, gpu: str, tp: int, compute_dtype: str, hbm_bandwidth_bytes_per_s: float) -> float | None:
    """A step's dense GEMM time (`layer_gemms`, mean over DECODE_TOKENS, measured) beyond each
    kernel's fixed time (`gemm_fixed_us` prices that) over the same weights' bytes at
    datasheet bandwidth; None when kernel-db has no table for it."""
    measured = dense_gemm_times(model, gpu, tp, compute_dtype, DECODE_TOKENS)
    if measured is None:
        return None
    n, k, count, times_us, tables = measured
    fixed = _fixed_us(gpu, tables)
    if fixed is None:
        return None
    bytes_s = n * k * np.array([TABLE_BYTES[t] for t in tables]) / hbm_bandwidth_bytes_per_s
    beyond_us = np.maximum(times_us.mean(axis=0) - fixed, 0.0)
    return float(np.sum(count * beyond_us * 1e-6) / np.sum(count * bytes_s))


def compute_ratio(model, gpu: str, tp: int, compute_dtype: str, peak_flops_per_s: float) -> float | None:
    """The dense GEMMs' measured time at PREFILL_TOKENS over their FLOPs at the datasheet
    peak of `compute_dtype` (median over the token counts: one outlier GEMM does not move
    it); None without a table."""
    measured = dense_gemm_times(model, gpu, tp, compute_dtype, PREFILL_TOKENS)
    if measured is None:
        return None
    n, k, count, times_us, _ = measured
    tokens = np.asarray(PREFILL_TOKENS, dtype=float)[:, None]
    flops_s = 2 * tokens * n * k / peak_flops_per_s
    return float(np.median(np.sum(count * times_us * 1e-6, axis=1) / np.sum(count * flops_s, axis=1)))


def catalog_dense_deployments():
    """(model, tp) of every dense catalog model at TP 1, 2 and 4 (where the TP divides its
    heads): the deployments the per-GPU summaries (`reference_ratios`, `gpu_compute_rate`)
    are medians over."""
    from bayesblis.catalog.models import list_models, load_model

    for name in list_models():
        model = load_model(name)
        if not model.is_moe:
            yield from ((model, tp) for tp in (1, 2, 4) if model.n_heads % tp == 0)


@lru_cache(maxsize=None)
def reference_ratios() -> tuple[float, float] | None:
    """The median `ratio` and `compute_ratio` of H100-SXM bf16 over the catalog's dense
    models at TP 1, 2, 4 (the scale the factors are relative to); None without its grid."""
    from bayesblis.catalog.gpus import load_gpu

    gpu = load_gpu(REFERENCE[0])
    weight, compute = [], []
    for model, tp in catalog_dense_deployments():
        w = ratio(model, gpu.name, tp, REFERENCE[1], gpu.hbm_bandwidth_bytes_per_s)
        c = compute_ratio(model, gpu.name, tp, REFERENCE[1], gpu.peak_flops(REFERENCE[1]))
        if w is not None and c is not None:
            weight.append(w)
            compute.append(c)
    return (float(np.median(weight)), float(np.median(compute))) if weight else None


@lru_cache(maxsize=4096)
def factor(model, gpu, tp: int, compute_dtype: str) -> float | None:
    """The deployment's measured dense-weight streaming time relative to the reference
    (`ratio` over the reference's); None where kernel-db has no table for its GPU and dtype."""
    r, ref = ratio(model, gpu.name, tp, compute_dtype, gpu.hbm_bandwidth_bytes_per_s), reference_ratios()
    return None if r is None or ref is None else r / ref[0]


@lru_cache(maxsize=4096)
def compute_factor(model, gpu, tp: int, compute_dtype: str) -> float | None:
    """The deployment's measured dense-GEMM FLOP time at its dtype's datasheet peak relative
    to the reference (`compute_ratio` over the reference's); None without a table."""
    r = compute_ratio(model, gpu.name, tp, compute_dtype, gpu.peak_flops(compute_dtype))
    ref = reference_ratios()
    return None if r is None or ref is None else r / ref[1]


@lru_cache(maxsize=4096)
def gpu_compute_factor(model, gpu, tp: int) -> float | None:
    """The deployment's dense GEMMs' measured time on `gpu` over the reference GPU's at the
    same shapes, both bf16 and each over its GPU's bf16 peak: how much less of its datasheet
    the GPU achieves than H100 (1 on H100). The dtype's own effect (FP8's) stays at the
    datasheet. None without both tables."""
    from bayesblis.catalog.gpus import load_gpu

    reference = load_gpu(REFERENCE[0])
    own = compute_ratio(model, gpu.name, tp, REFERENCE[1], gpu.peak_flops(REFERENCE[1]))
    ref = compute_ratio(model, reference.name, tp, REFERENCE[1], reference.peak_flops(REFERENCE[1]))
    return None if own is None or ref is None else own / ref


@lru_cache(maxsize=64)
def gpu_compute_rate(gpu) -> float | None:
    """The median `gpu_compute_factor` over the catalog's dense models at TP 1, 2 and 4 (the
    GPU's dense-GEMM FLOP rate against its peak, relative to H100's): one value per GPU; None
    without its tables."""
    values = [value for model, tp in catalog_dense_deployments()
              if (value := gpu_compute_factor(model, gpu, tp)) is not None]
    return float(np.median(values)) if values else None


@lru_cache(maxsize=4096)
def moe_ratio(model, gpu: str, tp: int, ep: int, compute_dtype: str) -> float | None:
    """The `measure_moe` ratio of the table shape nearest `model`'s routed experts on `gpu`
    at the deployment's expert split (TP without EP, else EP over `ep` GPUs) and dtype:
    nearest in log(hidden x expert width per GPU), then in log(local experts). None without
    a point for this GPU, dtype and split."""
    table = GEMM_DTYPES.get(compute_dtype)
    if not model.is_moe or table is None:
        return None
    moe_tp, moe_ep = (1, ep) if ep > 1 else (tp, 1)
    entries = [e for e in catalog().get("moe", {}).get(gpu, [])
               if e["dtype"] == table and e["tp"] == moe_tp and e["ep"] == moe_ep]
    if not entries:
        return None
    inter = model.expert_params / (3 * model.hidden_size)

    def distance(e):
        width = abs(np.log(e["hidden"] * e["inter"] / e["tp"]) - np.log(model.hidden_size * inter / moe_tp))
        return width + 0.5 * abs(np.log(e["experts"] / e["ep"]) - np.log(model.n_experts / moe_ep))

    return float(min(entries, key=distance)["ratio"])


@lru_cache(maxsize=4096)
def moe_factor(model, gpu, tp: int, ep: int, compute_dtype: str) -> float | None:
    """The deployment's measured routed-expert streaming time (`moe_ratio`) relative to the
    reference's dense weight streaming (the scale of `factor`); None without a table."""
    r, ref = moe_ratio(model, gpu.name, tp, ep, compute_dtype), reference_ratios()
    return None if r is None or ref is None else r / ref[0]


@lru_cache(maxsize=64)
def kv_factor(gpu) -> float | None:
    """Decode attention's measured KV streaming time on `gpu` relative to the reference
    GPU's (`measure_decode_attention`); None without a table."""
    ratios = catalog()["decode_attention"]
    if gpu.name not in ratios or REFERENCE[0] not in ratios:
        return None
    return ratios[gpu.name] / ratios[REFERENCE[0]]


@lru_cache(maxsize=64)
def prefill_attention_factor(gpu) -> float | None:
    """Prefill attention's measured FLOP time on `gpu` (`measure_prefill_attention`) over
    the reference's dense GEMMs at prefill sizes (`reference_ratios`), so that the prefill
    compute coefficient, which carries the GEMMs' ratio, prices attention at its own. A GPU
    without the table takes the reference GPU's (the kernel's efficiency against the GEMMs,
    not a datasheet); None without either."""
    ratios, ref = catalog().get("prefill_attention", {}), reference_ratios()
    own = ratios.get(gpu.name, ratios.get(REFERENCE[0]))
    return None if own is None or ref is None else own / ref[1]


@lru_cache(maxsize=64)
def allreduce_curve(gpu, tp: int) -> tuple[np.ndarray, np.ndarray] | None:
    """(message bytes, seconds) of one all-reduce vLLM runs over `tp` GPUs of `gpu`, as
    measured (increasing bytes), made non-decreasing (a larger message is never faster: the
    few smaller points timed above a larger one, e.g. NCCL on L40S at 256 B, take the
    running maximum); None without a table for this GPU and TP."""
    entry = catalog()["allreduce"].get(gpu.name, {}).get(str(tp))
    if entry is None or "bytes" not in entry:
        return None
    return np.asarray(entry["bytes"], float), np.maximum.accumulate(np.asarray(entry["us"], float)) * 1e-6


MEASURED_KINDS = ("gemm", "decode_attention", "allreduce")
"""Tables whose presence for a GPU makes it one kernel-db measures (`measures`)."""


def measures(gpu_name: str) -> bool:
    """Whether kernel-db's tables (as the catalog file ships them) measure the GPU."""
    tables = catalog()
    return any(gpu_name in tables.get(kind, {}) for kind in MEASURED_KINDS)


def pooled(price) -> float | None:
    """The geometric mean of `price(gpu)` (a factor above, of a `GpuSpec`) over the GPUs
    kernel-db measures, those where it is None left out: what a GPU kernel-db lacks takes.
    None where no GPU has a price."""
    from bayesblis.catalog.gpus import load_gpu

    values = [value for name in sorted(catalog().get("gemm", {}))
              if (value := price(load_gpu(name))) is not None]
    return float(np.exp(np.mean(np.log(values)))) if values else None


def build(kernel_db_dir, out=CATALOG_FILE) -> dict:
    """Read a kernel-db folder and write the catalog file (atomically)."""
    from bayesblis.atomic import write_json
    from bayesblis.io.kernel_db import read_kernel_db

    nccl = {p.name for p in Path(kernel_db_dir).glob("*/comm/nccl/*") if p.is_dir()}
    db = read_kernel_db(kernel_db_dir, versions=[FRAMEWORK_VERSION, *sorted(nccl)])
    doc = {"source": f"kernel-db, vLLM {FRAMEWORK_VERSION} GEMM (m in {list(TOKENS)}), decode attention, "
                     f"prefill attention, fused-MoE ({MOE_DISTRIBUTION}) and custom all-reduce tables, NCCL {NCCL_VERSION} all-reduce without NVLink "
                     f"(built from {Path(kernel_db_dir).name}/ by python3 -m bayesblis.catalog.kernel_prices)",
           **measure(db)}
    write_json(out, doc)
    clear_caches()
    return doc


def clear_caches() -> None:
    """Forget what was read or priced from the catalog file (after it was rewritten, or
    pointed elsewhere)."""
    for cached in (catalog, reference_ratios, factor, compute_factor, gpu_compute_factor, gpu_compute_rate,
                   moe_ratio, moe_factor, kv_factor, prefill_attention_factor, allreduce_curve,
                   kernel_fixed_us):
        cached.cache_clear()


def format_table() -> str:
    """Every catalog model x GPU x TP x dtype's weight and compute factors, as text."""
    from bayesblis.catalog.gpus import load_gpu
    from bayesblis.catalog.models import list_models, load_model

    weight, compute = reference_ratios()
    lines = [f"reference ratios (H100-SXM bf16): weight {weight:.3f}, compute {compute:.3f}",
             f"{'model':<18}{'gpu':<16}{'dtype':<6}" + "".join(f"{'tp' + str(t):>13}" for t in (1, 2, 4, 8))]
    for gpu_name, dtypes in catalog()["gemm"].items():
        gpu = load_gpu(gpu_name)
        for dtype in dtypes:
            if not gpu.supports(dtype):
                continue
            for name in list_models():
                model = load_model(name)
                cells = [f"{factor(model, gpu, tp, dtype):>6.2f} {compute_factor(model, gpu, tp, dtype):>5.2f}"
                         if model.n_heads % tp == 0 else "" for tp in (1, 2, 4, 8)]
                lines.append(f"{name:<18}{gpu_name:<16}{dtype:<6}" + "".join(f"{c:>13}" for c in cells))
    return "\n".join(lines)


if __name__ == "__main__":
    import sys

    if len(sys.argv) != 2:
        sys.exit("usage: python3 -m bayesblis.catalog.kernel_prices KERNEL_DB_DIR")
    build(sys.argv[1])
    print(format_table())
