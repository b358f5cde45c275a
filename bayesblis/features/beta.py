"""Step (beta) features: seconds of physics per engine step from batch aggregates.

Every feature is in seconds; the step-time model is linear in the coefficients:
``step_time_s = beta_features(...) @ beta``. Traffic features are bytes over bandwidth
(coefficient ~ 1/achieved-fraction), overhead features counts x 1e-6 (coefficient in µs;
per (KV token, layer): x 1e-9, coefficient in ns).

Compute is priced on a roofline: a step's GEMMs overlap its weight and KV streaming, so
the compute features are the FLOP time *beyond* the memory time (`roofline_excess`),
``max(0, C - ROOFLINE_MFU x M)`` with C the FLOPs over peak FLOP/s and M the weight and
KV bytes over peak bandwidth, split between prefill and decode by their FLOPs; each
kernel group is on a roofline of its own (dense GEMMs against the weights, attention
against the KV bytes, an MoE model's routed experts against their bytes). A decode step
of a few dozen requests is then priced by its bytes alone, a long prefill chunk by its
FLOPs, and every coefficient keeps a physical floor: with all of them >= 1 a step takes
at least max(C, M), its datasheet roofline. Formulas and priors: data_specs/features.md.

All features are affine in the aggregates but `weight_traffic_s` of an MoE model and
the two compute features (the roofline); `FeatureMap` exposes that structure (matrix +
bias, then the MoE term and the roofline) for compiled simulators.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from bayesblis.constants import NS, US
from bayesblis.features.physics import ACTIVATION_BYTES, Deployment

AGGREGATES = (
    "prefill_tokens",
    "prefill_context_tokens",
    "prefill_attention_pairs",
    "num_prefill_reqs",
    "num_decode_reqs",
    "decode_context_tokens",
    "offload_blocks",
)
"""Per-step batch aggregates (ARCHITECTURE.md 'Batch aggregates'), in this order."""

BETA_FEATURES = (
    "prefill_compute_s",
    "decode_compute_s",
    "weight_traffic_s",
    "kv_traffic_s",
    "kv_token_layer_s",
    "tp_comm_s",
    "tp_sync_s",
    "ep_comm_s",
    "offload_s",
    "layer_overhead_s",
    "request_overhead_s",
    "step_overhead_s",
    "sampling_s",
    "gemm_fixed_s",
)
"""Step features, in the column order of `beta_features`."""

BLIS_BETA_ORDER = ("beta1a_prefill_compute", "beta2a_decode_compute", "beta3_weight_loading",
                   "beta4_tp_allreduce_comm", "beta5_per_layer_us", "beta6_per_request_us",
                   "beta7_per_step_us", "beta8_per_moe_layer_us", "beta1b_prefill_kv_memory",
                   "beta2b_decode_kv_memory", "beta_ep_alltoall_comm")
"""BLIS trained-physics `beta_coeffs` order (11 entries)."""

LATE_FEATURES = ("sampling_s", "gemm_fixed_s")
"""The last features of BETA_FEATURES, added after coefficient files were first written: a
file may omit them, or the last of them (written earlier, or by hand with the sampler inside
the per-request cost and the GEMMs' fixed time inside the per-layer one), and they count 0."""

NO_BLIS_SLOT = ("kv_token_layer_s", "tp_sync_s", "offload_s")
"""Our features BLIS's `beta_coeffs` has no place of their own: `to_blis_beta` folds
tp_sync_s into the per-layer β5 and drops the others."""

_A = {name: i for i, name in enumerate(AGGREGATES)}
_F = {name: i for i, name in enumerate(BETA_FEATURES)}
WEIGHT_TRAFFIC_INDEX = _F["weight_traffic_s"]
TP_COMM_INDEX = _F["tp_comm_s"]
COMPUTE_INDICES = (_F["prefill_compute_s"], _F["decode_compute_s"])
MEMORY_INDICES = (_F["weight_traffic_s"], _F["kv_traffic_s"])

ROOFLINE_MFU = 1.0
"""Where the roofline bends: compute starts to cost once its FLOP time at this multiple of
the peak exceeds the memory time at peak bandwidth, i.e. at the datasheet ridge point.
The compute coefficients (~ 1/MFU, >= 1) price what lies beyond. (0.5 was tried first:
it charged the ~500-token prefill chunks of the shared runs 3 ms more per step than their
TTFTs show, docs/accuracy.md.)"""


def roofline_excess(features: np.ndarray, routed_compute_s=0.0, routed_memory_s=0.0,
                    attention_compute_s=0.0) -> np.ndarray:
    """Turn the raw FLOP-time columns of `features` [n, len(BETA_FEATURES)] (in place,
    also returned) into their excess over the memory time, one roofline per kernel group,
    since a step's kernels run one after the other and one group's FLOPs cannot hide
    under another's bytes:

    - attention: its FLOPs Ca (`attention_compute_s`) against the KV bytes (`kv_traffic_s`);
    - an MoE model's fused-MoE kernels: the routed experts' FLOPs Cr (`routed_compute_s`)
      against the experts they read, Mr (`routed_memory_s`, part of `weight_traffic_s`);
    - the dense GEMMs: the rest of the FLOPs against the rest of the weight bytes.

    With C = prefill + decode FLOPs / peak and ROOFLINE_MFU = m the excess is
    ``max(0, C - Ca - Cr - m (W - Mr)) + max(0, Cr - m Mr) + max(0, Ca - m KV)``
    (W = `weight_traffic_s`), shared by prefill and decode as their FLOPs."""
    p, d = COMPUTE_INDICES
    compute = features[:, p] + features[:, d]
    weights, kv = features[:, MEMORY_INDICES[0]], features[:, MEMORY_INDICES[1]]
    routed_c, routed_m, attention_c = (np.broadcast_to(np.asarray(x, dtype=float), compute.shape)
                                       for x in (routed_compute_s, routed_memory_s, attention_compute_s))
    excess = (np.maximum(compute - attention_c - routed_c - ROOFLINE_MFU * (weights - routed_m), 0.0)
              + np.maximum(routed_c - ROOFLINE_MFU * routed_m, 0.0)
              + np.maximum(attention_c - ROOFLINE_MFU * kv, 0.0))
    share = np.divide(excess, compute, out=np.zeros_like(compute), where=compute > 0)
    features[:, p] *= share
    features[:, d] *= share
    return features


PAD_MOE_TOKENS = True
"""Whether an MoE step's routed experts are those its CUDA-graph padded batch touches
(`cuda_graph_tokens`) rather than its own tokens' (data_specs/features.md)."""
CUDA_GRAPH_MAX_TOKENS = 512
"""vLLM V1's largest CUDA-graph batch by default (min(2 x max_num_seqs, 512); vLLM
0.15.1 `CompilationConfig.max_cudagraph_capture_size`): a step of at most this many tokens
runs padded up to a captured size (`cuda_graph_tokens`)."""


def cuda_graph_tokens(tokens, max_tokens: int = CUDA_GRAPH_MAX_TOKENS) -> np.ndarray:
    """Tokens a step's layers run on in vLLM V1 with CUDA graphs: `tokens` padded up to the
    next captured size (1, 2, 4, then multiples of 8 to 256 and of 16 to `max_tokens`, its
    default capture list); larger steps and `max_tokens` 0 run unpadded. The padded rows
    hold stale inputs and pass through the router like tokens, so an MoE step reads the
    experts they touch too (vLLM 0.15.1 `gpu_model_runner`: the CUDA-graph dispatcher's
    padded batch is what the model runs)."""
    t = np.asarray(tokens, dtype=float)
    if max_tokens <= 0:
        return t
    padded = np.where(t <= 2, np.ceil(t), np.where(t <= 4, 4.0, np.where(
        t <= 256, np.ceil(t / 8) * 8, np.ceil(t / 16) * 16)))
    return np.where(t > max_tokens, t, padded)


@dataclass(frozen=True)
class FeatureMap:
    """features = roofline_excess(A @ weights + bias + moe_term(T) e_weight_traffic
    + allreduce_term(T) e_tp_comm, routed_compute_s_per_token T, moe_term(T),
    A @ attention_compute), where A is [n_steps, len(AGGREGATES)], T =
    prefill_tokens + num_decode_reqs, moe_term(T) = moe_coeff_s x n_experts x (1 - (1 -
    top_k/n_experts)^P) with P = cuda_graph_tokens(T, cuda_graph_max_tokens) (the padded
    rows are routed too) and allreduce_term(T) the step's all-reduces at T tokens,
    interpolated linearly on (allreduce_tokens, allreduce_step_s) (empty: none)."""

    weights: np.ndarray          # [len(AGGREGATES), len(BETA_FEATURES)], seconds per unit
    bias: np.ndarray             # [len(BETA_FEATURES)], seconds per step
    moe_coeff_s: float           # seconds per distinct expert (all MoE layers, per GPU)
    n_experts: int
    experts_per_tok: int
    routed_compute_s_per_token: float = 0.0  # routed experts' FLOP time per token
    attention_compute: np.ndarray = field(default_factory=lambda: np.zeros(len(AGGREGATES)))
    # [len(AGGREGATES)]: attention's FLOP time per unit of each aggregate (in the compute columns)
    allreduce_tokens: np.ndarray = field(default_factory=lambda: np.zeros(0))  # increasing
    allreduce_step_s: np.ndarray = field(default_factory=lambda: np.zeros(0))  # at those tokens
    cuda_graph_max_tokens: int = 0  # steps up to this many tokens run padded (0: none)

    def expected_distinct_experts(self, tokens) -> np.ndarray:
        """E[distinct routed experts per MoE layer touched by `tokens` tokens],
        uniform routing: E (1 - (1 - k/E)^T)."""
        tokens = np.asarray(tokens, dtype=float)
        if self.n_experts == 0:
            return np.zeros_like(tokens)
        miss = 1.0 - self.experts_per_tok / self.n_experts
        return self.n_experts * (1.0 - np.power(miss, tokens))

    def moe_term_s(self, tokens) -> np.ndarray:
        """Seconds to read the routed experts the step's tokens (CUDA-graph padded) touch."""
        padded = cuda_graph_tokens(tokens, self.cuda_graph_max_tokens)
        return self.moe_coeff_s * self.expected_distinct_experts(padded)

    def allreduce_term_s(self, tokens) -> np.ndarray:
        """Seconds of the step's measured all-reduces at `tokens` tokens (0 without a curve)."""
        tokens = np.asarray(tokens, dtype=float)
        if not len(self.allreduce_tokens):
            return np.zeros_like(tokens)
        return np.interp(tokens, self.allreduce_tokens, self.allreduce_step_s)

    def apply(self, aggregates: np.ndarray, roofline: bool = True) -> np.ndarray:
        """Features [n_steps, n_features] from an aggregate matrix [n_steps, n_agg]
        (``roofline=False``: the compute columns hold the whole FLOP time)."""
        agg = np.asarray(aggregates, dtype=float)
        out = agg @ self.weights + self.bias
        tokens = agg[:, _A["prefill_tokens"]] + agg[:, _A["num_decode_reqs"]]
        routed_memory_s = self.moe_term_s(tokens)
        out[:, WEIGHT_TRAFFIC_INDEX] += routed_memory_s
        if len(self.allreduce_tokens):
            out[:, TP_COMM_INDEX] += self.allreduce_term_s(tokens)
        if not roofline:
            return out
        return roofline_excess(out, self.routed_compute_s_per_token * tokens, routed_memory_s,
                               agg @ self.attention_compute)


ALLREDUCES_PER_LAYER = 2
"""Tensor-parallel all-reduces per layer and step (after attention and after the MLP)."""


def allreduce_rounds(tp: int) -> float:
    """Exchange rounds of one all-reduce over `tp` GPUs (the count `tp_sync_s` prices per
    all-reduce): log2(tp), whatever the bytes; 0 without TP."""
    return float(np.log2(tp))


def allreduce_rounds_per_layer(tp: int) -> float:
    """All-reduce exchange rounds per layer and step: ALLREDUCES_PER_LAYER x log2(tp)."""
    return ALLREDUCES_PER_LAYER * allreduce_rounds(tp)


def allreduce_link_s(message_bytes, tp: int, link_bytes_per_s: float):
    """Seconds at `link_bytes_per_s` (per GPU and direction) of one ring all-reduce of
    `message_bytes` over `tp` GPUs: each GPU sends 2 (tp - 1) / tp of the message."""
    return np.asarray(message_bytes, dtype=float) * 2 * (tp - 1) / tp / link_bytes_per_s


def weight_time_at_peak_s(deployment: Deployment, weight_bytes: float) -> float:
    """Seconds to stream `weight_bytes` (whole model or layer) split over the TP group at
    datasheet bandwidth."""
    return weight_bytes / (deployment.tp * deployment.hbm_bandwidth_bytes_per_s)


def _weight_time_s(deployment: Deployment, weight_bytes: float) -> float:
    """`weight_time_at_peak_s` times the deployment's measured dense-GEMM streaming time
    relative to the reference (`Deployment.weight_stream_factor`)."""
    return weight_time_at_peak_s(deployment, weight_bytes) * deployment.weight_stream_factor


def feature_weights(deployment: Deployment) -> FeatureMap:
    """The affine map from aggregates to features for one deployment (cached on it)."""
    cached = deployment.__dict__.get("_feature_map")
    if cached is None:
        cached = _build_feature_map(deployment)
        object.__setattr__(deployment, "_feature_map", cached)  # not a dataclass field
    return cached


def _build_feature_map(deployment: Deployment) -> FeatureMap:
    d, m = deployment, deployment.model
    n = d.tp
    compute = n * d.peak_flops_per_s
    bw = d.hbm_bandwidth_bytes_per_s
    link = d.interconnect_bandwidth_bytes_per_s
    W = np.zeros((len(AGGREGATES), len(BETA_FEATURES)))
    b = np.zeros(len(BETA_FEATURES))
    a, f = _A, _F

    attention = n * d.attention_peak_flops_per_s
    # dense GEMMs at the FLOP rate kernel-db measures (d.compute_factor); routed experts
    # (fused-MoE kernels) at the datasheet's
    routed = 2.0 * m.n_moe_layers * m.n_experts_per_tok * m.expert_params
    linear = (d.compute_factor * (m.linear_flops_per_token - routed) + routed) / compute
    lm_head = d.compute_factor * m.lm_head_flops_per_token / compute
    attention_compute = np.zeros(len(AGGREGATES))
    # prefill attention at the FLOP rate kernel-db measures for it, relative to the GEMMs
    attention_compute[a["prefill_attention_pairs"]] = d.prefill_attention_factor * m.attention_flops_per_pair / attention
    attention_compute[a["decode_context_tokens"]] = m.decode_attention_flops_per_pair / attention
    W[a["prefill_tokens"], f["prefill_compute_s"]] = linear
    W[a["prefill_attention_pairs"], f["prefill_compute_s"]] = attention_compute[a["prefill_attention_pairs"]]
    W[a["num_prefill_reqs"], f["prefill_compute_s"]] = lm_head

    W[a["num_decode_reqs"], f["decode_compute_s"]] = linear + lm_head
    W[a["decode_context_tokens"], f["decode_compute_s"]] = attention_compute[a["decode_context_tokens"]]

    b[f["weight_traffic_s"]] = _weight_time_s(d, d.streamed_weight_bytes)
    # routed experts run in fused-MoE kernels, priced by their own measured factor
    moe_coeff = (d.moe_stream_factor * weight_time_at_peak_s(d, m.n_moe_layers * d.expert_weight_bytes_per_layer)
                 if m.is_moe else 0.0)

    kv = d.kv_stream_factor * d.kv_bytes_per_token_per_gpu / bw
    for name in ("decode_context_tokens", "num_decode_reqs", "prefill_context_tokens", "prefill_tokens"):
        W[a[name], f["kv_traffic_s"]] = kv
        W[a[name], f["kv_token_layer_s"]] = m.n_layers * NS

    allreduce_tokens = allreduce_step_s = np.zeros(0)
    if d.tp > 1 and d.allreduce_curve is not None:
        # the step's ALLREDUCES_PER_LAYER x L all-reduces of T x hidden x 2 B, as measured
        # (latency and the one-shot/two-shot switch included: tp_sync_s is 0)
        message_bytes, seconds = d.allreduce_curve
        allreduce_tokens = message_bytes / (m.hidden_size * ACTIVATION_BYTES)
        allreduce_step_s = ALLREDUCES_PER_LAYER * m.n_layers * seconds
    elif d.tp > 1:  # per token: its activations (hidden x 2 B) in every all-reduce of the step
        per_token = (ALLREDUCES_PER_LAYER * m.n_layers
                     * float(allreduce_link_s(m.hidden_size * ACTIVATION_BYTES, d.tp, link)))
        W[a["prefill_tokens"], f["tp_comm_s"]] = per_token
        W[a["num_decode_reqs"], f["tp_comm_s"]] = per_token
        b[f["tp_sync_s"]] = m.n_layers * allreduce_rounds_per_layer(d.tp) * US
    if d.ep > 1:
        per_token = (2 * m.n_moe_layers * m.n_experts_per_tok * m.hidden_size * ACTIVATION_BYTES
                     * (d.ep - 1) / d.ep / link)
        W[a["prefill_tokens"], f["ep_comm_s"]] = per_token
        W[a["num_decode_reqs"], f["ep_comm_s"]] = per_token

    W[a["offload_blocks"], f["offload_s"]] = d.block_size * d.kv_bytes_per_token / d.pcie_bandwidth_bytes_per_s
    b[f["layer_overhead_s"]] = m.n_layers * US
    W[a["num_prefill_reqs"], f["request_overhead_s"]] = US
    W[a["num_decode_reqs"], f["request_overhead_s"]] = US
    # every scheduled request's row of logits goes through vLLM's sampler
    W[a["num_prefill_reqs"], f["sampling_s"]] = d.sampler_row_s
    W[a["num_decode_reqs"], f["sampling_s"]] = d.sampler_row_s
    b[f["sampling_s"]] = d.sampler_step_s
    b[f["step_overhead_s"]] = US
    b[f["gemm_fixed_s"]] = d.gemm_fixed_s
    W.setflags(write=False)
    b.setflags(write=False)
    for arr in (allreduce_tokens, allreduce_step_s, attention_compute):
        arr.setflags(write=False)
    return FeatureMap(weights=W, bias=b, moe_coeff_s=moe_coeff,
                      n_experts=m.n_experts if m.is_moe else 0,
                      experts_per_tok=m.n_experts_per_tok if m.is_moe else 0,
                      routed_compute_s_per_token=routed / compute, attention_compute=attention_compute,
                      allreduce_tokens=allreduce_tokens, allreduce_step_s=allreduce_step_s,
                      cuda_graph_max_tokens=CUDA_GRAPH_MAX_TOKENS if PAD_MOE_TOKENS else 0)


def linear_layer_features(deployment: Deployment, tokens, *, layer_constant: bool = True,
                          roofline: bool = True) -> np.ndarray:
    """Features [n, len(BETA_FEATURES)] of `tokens` tokens (scalar or 1-D) passing through
    the linear layers (attention projections and MLP matmuls) of ONE layer of a dense model
    on one GPU of the TP group: the share of a step's features those kernels cover.

    - ``weight_traffic_s`` = one layer's matmul weight bytes / (tp BW), as the step's
      weight feature streams the whole model's;
    - ``prefill_compute_s`` = the FLOP time beyond it (`roofline_excess`) of tokens x 2 x
      one layer's matmul weights / (tp P), at the datasheet peak P (the step's features
      carry the deployment's kernel-priced `compute_factor` on top);
    - ``layer_overhead_s`` = 1 µs (the layer's share of the per-layer constant: its
      coefficient is the fixed cost of the layer's kernels) unless `layer_constant` is False.

``roofline=False`` keeps the whole FLOP time in ``prefill_compute_s``.

    Other features are 0 (no attention, KV, lm_head, collectives or per-request work).
    Operator profiles (`bayesblis.operator_evidence`) are observations of this form.
    """
    d, m = deployment, deployment.model
    if m.is_moe:
        raise ValueError(f"linear_layer_features: {m.name} is an MoE model (dense layers only)")
    tokens = np.atleast_1d(np.asarray(tokens, dtype=float))
    if tokens.ndim != 1 or not np.all(np.isfinite(tokens)) or np.any(tokens < 0):
        raise ValueError("tokens must be a finite, non-negative scalar or 1-D array")
    fm = feature_weights(d)
    out = np.zeros((len(tokens), len(BETA_FEATURES)))
    # FLOPs at datasheet peak, as the bytes below: the profiles measure what factors say
    out[:, _F["prefill_compute_s"]] = tokens * 2.0 * m.dense_layer_matmul_params / (d.tp * d.peak_flops_per_s)
    # bytes at datasheet bandwidth, without the deployment's weight_stream_factor: a profile
    # row measures the time that factor prices
    out[:, _F["weight_traffic_s"]] = weight_time_at_peak_s(d, d.dense_layer_weight_bytes)
    if layer_constant:
        out[:, _F["layer_overhead_s"]] = fm.bias[_F["layer_overhead_s"]] / m.n_layers
    return roofline_excess(out) if roofline else out


def allreduce_features(gpu, tp: int, message_bytes) -> np.ndarray:
    """Features [n, len(BETA_FEATURES)] of ONE all-reduce of `message_bytes` (scalar or
    1-D) over `tp` GPUs of `gpu` (a catalog name or GpuSpec): the share of a step's
    ``tp_comm_s`` and ``tp_sync_s`` that one of its ALLREDUCES_PER_LAYER x n_layers
    all-reduces carries (a step of T tokens all-reduces T x hidden x 2 B each time): where
    kernel-db measured the GPU at this TP, ``tp_comm_s`` = that all-reduce's measured time
    (`catalog.kernel_prices.allreduce_curve`, linear between the measured sizes) and
    ``tp_sync_s`` 0; else ``tp_comm_s`` = `allreduce_link_s` over the GPU's interconnect and
    ``tp_sync_s`` = log2(tp) rounds x 1 µs. Other features are 0."""
    from bayesblis.catalog import kernel_prices
    from bayesblis.catalog.gpus import load_gpu

    spec = load_gpu(gpu)
    if not isinstance(tp, (int, np.integer)) or tp < 2:
        raise ValueError(f"an all-reduce needs tp >= 2 GPUs, got {tp!r}")
    size = np.atleast_1d(np.asarray(message_bytes, dtype=float))
    if size.ndim != 1 or not np.all(np.isfinite(size)) or np.any(size <= 0):
        raise ValueError("message_bytes must be positive and finite (scalar or 1-D)")
    out = np.zeros((len(size), len(BETA_FEATURES)))
    curve = kernel_prices.allreduce_curve(spec, int(tp))
    if curve is not None:
        out[:, _F["tp_comm_s"]] = np.interp(size, *curve)
        return out
    out[:, _F["tp_comm_s"]] = allreduce_link_s(size, int(tp), spec.interconnect_bandwidth_bytes_per_s)
    out[:, _F["tp_sync_s"]] = allreduce_rounds(int(tp)) * US
    return out


def _stack(values: Mapping[str, object]) -> np.ndarray:
    """[n_steps, len(AGGREGATES)] float matrix from scalars / 1-D arrays (broadcast)."""
    cols = []
    for name in AGGREGATES:
        arr = np.asarray(values[name], dtype=float)
        if arr.ndim > 1:
            raise ValueError(f"aggregate '{name}' must be a scalar or 1-D, got shape {arr.shape}")
        cols.append(np.atleast_1d(arr))
    try:
        cols = np.broadcast_arrays(*cols)
    except ValueError:
        shapes = {n: c.shape for n, c in zip(AGGREGATES, cols)}
        raise ValueError(f"aggregates have incompatible lengths: {shapes}") from None
    agg = np.stack(cols, axis=1)
    if not np.all(np.isfinite(agg)):
        raise ValueError("aggregates must be finite (no NaN/inf)")
    if np.any(agg < 0):
        bad = [AGGREGATES[j] for j in np.unique(np.nonzero(agg < 0)[1])]
        raise ValueError(f"aggregates must be non-negative: {', '.join(bad)}")
    return agg


def beta_features(deployment: Deployment, *, prefill_tokens, prefill_context_tokens,
                  prefill_attention_pairs, num_prefill_reqs, num_decode_reqs,
                  decode_context_tokens, offload_blocks=0) -> np.ndarray:
    """Step features [n_steps, len(BETA_FEATURES)] in seconds (inputs: scalars or 1-D)."""
    agg = _stack(dict(prefill_tokens=prefill_tokens, prefill_context_tokens=prefill_context_tokens,
                      prefill_attention_pairs=prefill_attention_pairs,
                      num_prefill_reqs=num_prefill_reqs, num_decode_reqs=num_decode_reqs,
                      decode_context_tokens=decode_context_tokens, offload_blocks=offload_blocks))
    return feature_weights(deployment).apply(agg)


def beta_feature_matrix(deployment: Deployment, aggregates) -> np.ndarray:
    """`beta_features` from a mapping or DataFrame with the AGGREGATES columns
    (`offload_blocks` optional, 0 when absent)."""
    missing = [n for n in AGGREGATES if n != "offload_blocks" and n not in aggregates]
    if missing:
        raise KeyError(f"aggregates missing columns: {', '.join(missing)} (need {', '.join(AGGREGATES)})")
    values = {n: (np.asarray(aggregates[n]) if n in aggregates else 0) for n in AGGREGATES}
    return feature_weights(deployment).apply(_stack(values))


def roofline_s(deployment: Deployment, **aggregates) -> np.ndarray:
    """Reference roofline per step: max(compute, memory) seconds at peak (compute = all
    prefill and decode FLOPs; memory = weight + KV traffic). Not a BETA feature."""
    aggregates.setdefault("offload_blocks", 0)
    values = {n: aggregates[n] for n in AGGREGATES}
    feats = feature_weights(deployment).apply(_stack(values), roofline=False)
    compute = feats[:, _F["prefill_compute_s"]] + feats[:, _F["decode_compute_s"]]
    memory = feats[:, _F["weight_traffic_s"]] + feats[:, _F["kv_traffic_s"]]
    return np.maximum(compute, memory)


SLOT_TOKENS = np.geomspace(8, 512, 25)
"""Step token counts (decode batches to a prefill chunk, uniform in log tokens) over which
`blis_tp_slot` fits a line to the step's TP all-reduce price for BLIS's per-token slot."""


def blis_tp_slot(deployment: Deployment) -> tuple[float, float, float] | None:
    """(β4 per unit ``tp_comm_s`` coefficient, β7 µs per unit coefficient, ``tp_sync_s``
    rounds per layer): the step's TP all-reduce price (the measured curve, or the ring
    formula) as the least-squares line a + b T over SLOT_TOKENS, b over BLIS's per-token TP
    basis (`blis_projection.trained_physics_basis` at one decode token: its bytes over HBM
    bandwidth) and a in µs, so that BLIS's linear basis carries what the curve costs at those
    sizes; and the per-round latency terms the deployment prices per layer (0 where the
    measured curve includes them). None without TP."""
    if deployment.tp < 2:
        return None
    from bayesblis.blis_projection import Batches, BlisShape, trained_physics_basis

    fm = feature_weights(deployment)
    tokens = SLOT_TOKENS
    agg = np.zeros((len(tokens), len(AGGREGATES)))
    agg[:, _A["num_decode_reqs"]] = tokens
    price_s = fm.apply(agg, roofline=False)[:, TP_COMM_INDEX]
    slope_s, step_s = np.polyfit(tokens, price_s, 1)
    one = Batches(*(np.array([v], float) for v in (0.0, 0.0, 1.0, 0.0, 1.0)))
    per_token_us = float(trained_physics_basis(BlisShape.from_deployment(deployment), one)[0, 3])
    rounds = float(fm.bias[_F["tp_sync_s"]]) / (deployment.model.n_layers * US)
    return float(slope_s * 1e6 / per_token_us), float(max(step_s, 0.0) * 1e6), rounds


ASYNC_STEP_AGGREGATES = {"num_decode_reqs": 16, "decode_context_tokens": 16 * 512}
"""The decode step whose duration stands for the async-scheduling wait BLIS's alpha0 takes
(`blis_async_step_features`): with async scheduling a new request waits for the step after
next, about one step (bayesblis's simulator on four shared runs' first 300 s: a mean wait of
0.99-1.04 mean steps), and a step is mostly its weight stream, which the batch barely moves."""


def blis_async_step_features(deployment: Deployment) -> np.ndarray:
    """Features [len(BETA_FEATURES)] of ASYNC_STEP_AGGREGATES (seconds per unit coefficient):
    times the coefficients, the wait a slot-mapped BLIS export adds to alpha0."""
    agg = np.zeros((1, len(AGGREGATES)))
    for name, value in ASYNC_STEP_AGGREGATES.items():
        agg[0, _A[name]] = value
    return feature_weights(deployment).apply(agg)[0]


def to_blis_beta(beta: Mapping[str, float], tp: int = 1,
                 factors: Mapping[str, float] | None = None,
                 tp_slot: tuple[float, float, float] | None = None) -> list[float]:
    """Our coefficients in BLIS trained-physics `beta_coeffs` order (BLIS_BETA_ORDER).

    kv_traffic -> both β1b and β2b; tp_comm -> β4; ep_comm -> β_EP; overheads (µs)
    -> β5, β6, β7; β8 (per MoE layer) = 0; β2a (decode compute) = 0: on bayesblis's roofline
    a decode step's FLOPs ride under its weight and KV streaming until hundreds of tokens,
    where BLIS's additive basis would add them on top (a decode batch past the knee is then
    under-priced in BLIS; `blis_projection` fits both). tp_sync_s (µs per all-reduce round, 2 log2(tp)
    rounds per layer) is folded into the per-layer β5 for the given `tp`. BLIS prices raw
    bytes and FLOPs at the datasheet, so the deployment's kernel-priced `factors`
    (`Deployment.feature_factors`, feature -> factor, 1 when absent; weight traffic's
    averaged over dense weights and routed experts by their bytes) multiply their
    coefficients; offload_s and kv_token_layer_s have no BLIS slot and are dropped
    (NO_BLIS_SLOT); sampling_s joins the per-request β6 and the per-step β7 at the
    deployment's priced µs per sampled request and per step (`factors["sampling_s"]`,
    `factors["sampling_s_per_step"]`; without them, 0); gemm_fixed_s joins the per-layer β5
    at the deployment's GEMM fixed time per layer (`factors["gemm_fixed_s"]`, µs; without it,
    0). `tp_slot` (`blis_tp_slot`): tp_comm's line in BLIS's basis, β4 = its slope factor x tp_comm and β7 += its per-step µs
    x tp_comm, and tp_sync folded into β5 at the deployment's own rounds per layer; without it β4 = tp_comm and the rounds are
    the ring's at `tp`.
    """
    missing = [n for n in BETA_FEATURES
               if n not in NO_BLIS_SLOT and n not in LATE_FEATURES and n not in beta]
    if missing:
        raise KeyError(f"coefficients missing: {', '.join(missing)}")
    factors = factors or {}
    g = lambda k: float(beta[k]) * float(factors.get(k, 1.0))  # noqa: E731
    tp_per_token, tp_step_us, rounds = tp_slot or (1.0, 0.0, allreduce_rounds_per_layer(tp))
    per_layer = (g("layer_overhead_s") + rounds * (g("tp_sync_s") if "tp_sync_s" in beta else 0.0)
                 + float(beta.get("gemm_fixed_s", 0.0)) * float(factors.get("gemm_fixed_s", 0.0)))
    sampling = float(beta.get("sampling_s", 0.0))
    per_request = g("request_overhead_s") + sampling * float(factors.get("sampling_s", 0.0))
    per_step = (g("step_overhead_s") + g("tp_comm_s") * tp_step_us
                + sampling * float(factors.get("sampling_s_per_step", 0.0)))
    return [g("prefill_compute_s"), 0.0, g("weight_traffic_s"), g("tp_comm_s") * tp_per_token,
            per_layer, per_request, per_step, 0.0,
            g("kv_traffic_s"), g("kv_traffic_s"), g("ep_comm_s")]
