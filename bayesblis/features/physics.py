"""`Deployment`: one serving configuration (model x GPU x TP/EP x dtype) and its
per-step physics constants (FLOPs, bytes, bandwidths), precomputed once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from bayesblis.catalog import kernel_prices, sampler_prices
from bayesblis.catalog.gpus import DTYPES, GpuSpec, load_gpu, normalize_dtype
from bayesblis.catalog.models import DTYPE_BYTES, ModelArch, load_model
from bayesblis.constants import US
from bayesblis.errors import BayesBlisError

ACTIVATION_BYTES = 2.0
"""Bytes per activation element moved by TP/EP collectives (bf16/fp16)."""

DEFAULT_ACTIVATION_RESERVE_BYTES = 2 * 2**30
"""Default memory kept out of the KV cache besides weights (activation peak of the
profile run, CUDA graphs, NCCL buffers): 2 GiB, typical of vLLM V1 with 8k batched
tokens on 7B-70B models."""

LOW_PRECISION = ("fp8", "int8")
"""Compute dtypes whose GEMMs run below 16 bits while attention stays in bf16."""

# Compute dtype used when dtype='auto', from the checkpoint's weight dtype.
_AUTO_COMPUTE = {"bf16": "bf16", "fp16": "fp16", "fp32": "bf16", "fp8": "fp8",
                 "int8": "int8", "int4": "bf16"}


class DeploymentError(BayesBlisError, ValueError):
    """A deployment's parallelism or dtype is impossible for its model or GPU."""


@dataclass(frozen=True)
class Deployment:
    """Model x GPU x tensor/expert parallelism x compute dtype.

    `tp` GPUs shard every layer (Megatron-style); `ep` is 1 (experts TP-sharded) or
    `tp` (experts distributed over the TP group, vLLM --enable-expert-parallel).
    `dtype` is the tensor-core compute dtype ('auto': from the checkpoint; fp32
    checkpoints are served in bf16; fp8 checkpoints on a GPU without fp8 run
    weight-only fp8 with bf16 compute). After construction `dtype` (= `compute_dtype`)
    holds the resolved dtype, so 'auto' never reaches keys or levels. Weights are read
    at the smaller of the checkpoint's and the compute dtype's width.
    `kv_cache_dtype` 'auto' = the model's KV width (2 bytes).
    `weight_stream_factor`: the dense weights' streaming time on this GPU, TP and dtype
    priced from vLLM's measured GEMM kernels beyond each kernel's fixed time (`gemm_fixed_s`),
    relative to H100 bf16's (`catalog.kernel_prices`); 1 where kernel-db has the GPU but not
    the dtype. A GPU kernel-db lacks takes this and every kernel factor below pooled over the
    GPUs it measures (`kernel_prices.pooled`: their geometric mean).
    `moe_stream_factor`: 1, unless `catalog.kernel_prices.PRICE_MOE`: then the routed
    experts' streaming time in vLLM's measured fused-MoE kernel (the table's nearest shape
    at this GPU, dtype and expert split) on the same scale (1 for dense models and where
    kernel-db lacks the point).
    `compute_factor`: for FP8 deployments (`catalog.kernel_prices.PRICE_LOW_PRECISION_COMPUTE`)
    their dense GEMMs' measured time at the FP8 peak relative to H100 bf16 (where
    kernel-db has the GPU's FP8 GEMMs); else, with
    `catalog.kernel_prices.PRICE_COMPUTE_ACROSS_GPUS` (model version 14), the GPU's dense
    GEMMs' measured bf16 FLOP rate at prefill sizes relative to H100's
    (`kernel_prices.gpu_compute_rate`: A100 0.915, L40S 1.10; 1 on H100); or
    `PRICE_COMPUTE`: their measured time at the dtype's datasheet peak relative to H100 bf16
    (FP8 GEMMs on H100 reach about half the FLOP rate their datasheet doubles).
    `attention_peak_flops_per_s`: the peak attention runs at (bf16 for FP8 and INT8
    deployments). `prefill_attention_factor`: prefill attention's measured FLOP time on this
    GPU relative to the reference's dense GEMMs at prefill sizes
    (`kernel_prices.prefill_attention_factor`: H100 1.50; 1 unless
    `kernel_prices.PRICE_PREFILL_ATTENTION`). `kv_stream_factor`: decode attention's measured KV
    streaming time on this GPU relative to H100's;
    `feature_factors` collects the factors per step feature. `allreduce_curve`: (message
    bytes, seconds) of one all-reduce vLLM runs at this TP (its custom kernel over NVLink,
    NCCL over PCIe) as kernel-db measured it, which then prices the step's all-reduces
    whole; None without TP or a table (the ring formula and per-round latency instead).
    `sampler`: the path vLLM's sampler takes for the requests (`catalog.sampler_prices`:
    'sort' under top-p or top-k sampling defaults, 'plain', 'greedy'); `sampler_step_s` and
    `sampler_row_s`: its priced seconds per step and per sampled request.
    `gemm_fixed_s`: the fixed kernel time of a step's dense GEMMs on this GPU and dtype
    (`kernel_prices.gemm_fixed_us`; the reference GPU's where kernel-db has the GPU but not
    the dtype), which `weight_stream_factor` leaves out (model version 17).
    """

    model: ModelArch
    gpu: GpuSpec
    tp: int = 1
    ep: int = 1
    dtype: str = "bf16"
    block_size: int = 16
    kv_cache_dtype: str = "auto"
    sampler: str = sampler_prices.PLAIN

    # per-step constants, filled in __post_init__
    compute_dtype: str = field(init=False)
    weight_bytes_per_param: float = field(init=False)
    kv_bytes_per_element: float = field(init=False)
    peak_flops_per_s: float = field(init=False)
    hbm_bandwidth_bytes_per_s: float = field(init=False)
    interconnect_bandwidth_bytes_per_s: float = field(init=False)
    pcie_bandwidth_bytes_per_s: float = field(init=False)
    kv_heads_per_gpu: int = field(init=False)
    weight_stream_factor: float = field(init=False)
    moe_stream_factor: float = field(init=False)
    compute_factor: float = field(init=False)
    attention_peak_flops_per_s: float = field(init=False)
    prefill_attention_factor: float = field(init=False)
    kv_stream_factor: float = field(init=False)
    allreduce_curve: tuple | None = field(init=False, compare=False, repr=False)
    sampler_step_s: float = field(init=False)
    sampler_row_s: float = field(init=False)
    gemm_fixed_s: float = field(init=False)

    def __post_init__(self):
        model, gpu = load_model(self.model), load_gpu(self.gpu)
        object.__setattr__(self, "model", model)
        object.__setattr__(self, "gpu", gpu)
        tp, ep = self.tp, self.ep
        if not isinstance(tp, int) or isinstance(tp, bool) or tp < 1:
            raise DeploymentError(f"tp must be a positive integer, got {tp!r}")
        if not isinstance(ep, int) or isinstance(ep, bool) or ep < 1:
            raise DeploymentError(f"ep must be a positive integer, got {ep!r}")
        if model.n_heads % tp:
            raise DeploymentError(
                f"tp={tp} must divide the number of attention heads ({model.n_heads}) of {model.name}")
        if not model.is_mla and model.n_kv_heads % tp and tp % model.n_kv_heads:
            raise DeploymentError(
                f"tp={tp} and the {model.n_kv_heads} KV heads of {model.name}: one must divide the other")
        if ep not in (1, tp):
            raise DeploymentError(f"ep must be 1 or equal to tp ({tp}), got {ep}")
        if ep > 1 and not model.is_moe:
            raise DeploymentError(f"ep={ep} > 1 but {model.name} is a dense model")
        if ep > 1 and model.n_experts % ep:
            raise DeploymentError(f"ep={ep} must divide the {model.n_experts} experts of {model.name}")
        if not isinstance(self.block_size, int) or self.block_size < 1:
            raise DeploymentError(f"block_size must be a positive integer, got {self.block_size!r}")
        if self.sampler not in sampler_prices.PATHS:
            raise DeploymentError(f"sampler must be one of {', '.join(sampler_prices.PATHS)}, "
                                  f"got {self.sampler!r}")

        requested = normalize_dtype(self.dtype)
        if requested == "auto":
            compute = _AUTO_COMPUTE[model.weight_dtype]
            if not gpu.supports(compute):
                compute = "bf16"
        elif requested in DTYPES:
            compute = requested
        else:
            raise DeploymentError(f"dtype must be 'auto' or one of {', '.join(DTYPES)}, got {self.dtype!r}")
        peak = gpu.peak_flops(compute)  # raises for e.g. fp8 on A100
        compute_width = DTYPE_BYTES.get(compute, 4.0 if compute == "tf32" else 2.0)
        weight_bytes = min(model.bytes_per_weight, compute_width)

        kv_dtype = normalize_dtype(self.kv_cache_dtype)
        if kv_dtype == "auto":
            kv_elem = model.kv_bytes
        elif kv_dtype in ("fp8", "bf16", "fp16"):
            kv_elem = DTYPE_BYTES[kv_dtype]
        else:
            raise DeploymentError(f"kv_cache_dtype must be auto, fp8, bf16 or fp16, got {self.kv_cache_dtype!r}")

        kv_heads = model.n_kv_heads if model.is_mla else math.ceil(model.n_kv_heads / tp)
        # each kernel factor on this GPU, or pooled over kernel-db's GPUs where it lacks this one
        measured = kernel_prices.measures(gpu.name)

        def price(of_gpu):
            return of_gpu(gpu) if measured else kernel_prices.pooled(of_gpu)

        stream = price(lambda g: kernel_prices.factor(model, g, tp, compute))
        low_precision = compute in LOW_PRECISION and kernel_prices.PRICE_LOW_PRECISION_COMPUTE
        gemm_compute = (price(lambda g: kernel_prices.compute_factor(model, g, tp, compute))
                        if kernel_prices.PRICE_COMPUTE or low_precision
                        else price(kernel_prices.gpu_compute_rate)
                        if kernel_prices.PRICE_COMPUTE_ACROSS_GPUS else None)
        moe_stream = (price(lambda g: kernel_prices.moe_factor(model, g, tp, ep, compute))
                      if model.is_moe and kernel_prices.PRICE_MOE else None)
        kv_stream = price(kernel_prices.kv_factor)
        prefill_attention = (price(kernel_prices.prefill_attention_factor)
                             if kernel_prices.PRICE_PREFILL_ATTENTION else None)
        allreduce = kernel_prices.allreduce_curve(gpu, tp) if tp > 1 else None
        # the dense GEMMs' fixed time: this GPU's kernels (pooled where kernel-db lacks the
        # GPU), else the reference GPU's at this dtype, else the reference's own (H100 bf16)
        reference_gpu = kernel_prices.REFERENCE[0]
        fixed = [price(lambda g: kernel_prices.gemm_fixed_us(model, g.name, tp, compute)),
                 *(kernel_prices.gemm_fixed_us(model, g, tp, dt) for g, dt in
                   ((reference_gpu, compute), kernel_prices.REFERENCE))]
        gemm_fixed_us = next((f for f in fixed if f is not None), 0.0)
        # FlashAttention computes in bf16 whatever the weights' dtype
        attention_peak = gpu.peak_flops("bf16") if compute in LOW_PRECISION and gpu.supports("bf16") else peak
        sampler_step_s, sampler_row_s = sampler_prices.step_prices(
            model.vocab_size, self.sampler, gpu.hbm_bandwidth_bytes_per_s)
        for key, value in (("dtype", compute), ("compute_dtype", compute),
                           ("weight_bytes_per_param", weight_bytes), ("kv_bytes_per_element", kv_elem), ("peak_flops_per_s", peak),
                           ("hbm_bandwidth_bytes_per_s", gpu.hbm_bandwidth_bytes_per_s),
                           ("interconnect_bandwidth_bytes_per_s", gpu.interconnect_bandwidth_bytes_per_s),
                           ("pcie_bandwidth_bytes_per_s", gpu.pcie_bandwidth_bytes_per_s),
                           ("kv_heads_per_gpu", kv_heads),
                           ("weight_stream_factor", 1.0 if stream is None else stream),
                           ("moe_stream_factor", 1.0 if moe_stream is None else moe_stream),
                           ("compute_factor", 1.0 if gemm_compute is None else gemm_compute),
                           ("attention_peak_flops_per_s", attention_peak),
                           ("prefill_attention_factor", 1.0 if prefill_attention is None else prefill_attention),
                           ("kv_stream_factor", 1.0 if kv_stream is None else kv_stream),
                           ("allreduce_curve", allreduce),
                           ("sampler_step_s", sampler_step_s), ("sampler_row_s", sampler_row_s),
                           ("gemm_fixed_s", gemm_fixed_us * 1e-6)):
            object.__setattr__(self, key, value)

    @property
    def feature_factors(self) -> dict[str, float]:
        """Step feature -> the kernel-priced factor its physics carries (1 when none):
        what an export to a simulator pricing raw bytes and FLOPs (BLIS) folds into the
        coefficients; sampling's are the priced µs per sampled request and per step
        (`sampling_s_per_step`), which BLIS's per-request and per-step slots carry. Weight
        traffic's is the bytes-weighted mean of the dense weights' and the routed experts'
        factors over every weight (a decode batch that touches every expert, as BLIS prices
        them). gemm_fixed_s's is µs per layer, which BLIS's per-layer slot carries."""
        dense = self.streamed_weight_bytes
        experts = self.model.n_moe_layers * self.model.n_experts * self.expert_weight_bytes_per_layer
        weight = (dense * self.weight_stream_factor + experts * self.moe_stream_factor) / (dense + experts)
        return {"prefill_compute_s": self.compute_factor, "decode_compute_s": self.compute_factor,
                "weight_traffic_s": weight, "kv_traffic_s": self.kv_stream_factor,
                "sampling_s": self.sampler_row_s / US, "sampling_s_per_step": self.sampler_step_s / US,
                "gemm_fixed_s": self.gemm_fixed_s / US / self.model.n_layers}

    # ---- identity -------------------------------------------------------------
    @property
    def num_gpus(self) -> int:
        """GPUs of one replica (TP group; EP reuses the same GPUs)."""
        return self.tp

    @property
    def config_key(self) -> str:
        """Stable identifier, e.g. 'llama-2-7b|H100-SXM|tp1|ep1|bf16'."""
        key = f"{self.model.name}|{self.gpu.name}|tp{self.tp}|ep{self.ep}|{self.compute_dtype}"
        if normalize_dtype(self.kv_cache_dtype) not in ("auto",):
            key += f"|kv-{normalize_dtype(self.kv_cache_dtype)}"
        return key

    # ---- bytes ------------------------------------------------------------------
    @property
    def dense_weight_bytes(self) -> float:
        """Bytes of non-routed-expert weights (whole model, at the served width; the
        checkpoint's unquantized weights at 16 bits, `ModelArch.unquantized_params`)."""
        m = self.model
        return m.weight_bytes(m.total_params - m.routed_expert_params, self.weight_bytes_per_param)

    @property
    def streamed_weight_bytes(self) -> float:
        """Bytes of the non-routed-expert weights a step streams, at the served width: the
        embedding table's rows are gathered, not streamed (`ModelArch.streamed_weight_bytes`)."""
        return self.dense_weight_bytes - self.model.gathered_embedding_bytes(self.weight_bytes_per_param)

    @property
    def dense_layer_weight_bytes(self) -> float:
        """Bytes of the matmul weights of one dense layer (attention projections + MLP), whole
        layer at the served width (a GPU of the TP group holds 1/tp of them)."""
        return self.model.dense_layer_matmul_params * self.weight_bytes_per_param

    @property
    def expert_weight_bytes_per_layer(self) -> float:
        """Bytes of one routed expert in one MoE layer, at the served width."""
        return self.model.expert_params * self.weight_bytes_per_param

    @property
    def total_weight_bytes(self) -> float:
        return self.model.weight_bytes(self.model.total_params, self.weight_bytes_per_param)

    @property
    def weight_bytes_per_gpu(self) -> float:
        """Weight bytes resident on each GPU (all weights sharded over tp)."""
        return self.total_weight_bytes / self.tp

    @property
    def kv_bytes_per_token(self) -> float:
        """KV bytes of one token, all layers, whole model (unsharded)."""
        return self.model.n_layers * self.model.kv_elements_per_token_per_layer * self.kv_bytes_per_element

    @property
    def kv_bytes_per_token_per_gpu(self) -> float:
        """KV bytes of one token on one GPU: KV heads sharded over min(tp, n_kv_heads)
        (replicated beyond); an MLA latent is replicated on every GPU."""
        m = self.model
        if m.is_mla:
            return self.kv_bytes_per_token
        return m.n_layers * 2 * self.kv_heads_per_gpu * m.head_dim * self.kv_bytes_per_element

    def kv_cache_blocks(self, gpu_memory_utilization: float = 0.9,
                        activation_reserve_bytes: float = DEFAULT_ACTIVATION_RESERVE_BYTES) -> int:
        """vLLM-style estimate of the GPU KV blocks of one replica:
        (memory x util - weights/GPU - activation reserve) / (block_size x KV bytes/token/GPU).
        """
        if not 0 < gpu_memory_utilization <= 1:
            raise DeploymentError(f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}")
        free = (self.gpu.memory_bytes * gpu_memory_utilization - self.weight_bytes_per_gpu
                - activation_reserve_bytes)
        per_block = self.block_size * self.kv_bytes_per_token_per_gpu
        return max(0, int(free // per_block))

    # ---- FLOPs ------------------------------------------------------------------
    @property
    def linear_flops_per_token(self) -> float:
        return self.model.linear_flops_per_token

    @property
    def lm_head_flops_per_token(self) -> float:
        return self.model.lm_head_flops_per_token

    @property
    def attention_flops_per_pair(self) -> float:
        return self.model.attention_flops_per_pair

    @property
    def decode_attention_flops_per_pair(self) -> float:
        return self.model.decode_attention_flops_per_pair

    def describe(self) -> dict:
        """Plain dict of the configuration and its constants (for reports/exports)."""
        return {
            "config_key": self.config_key, "model": self.model.name, "gpu": self.gpu.name,
            "tp": self.tp, "ep": self.ep, "compute_dtype": self.compute_dtype,
            "family": self.model.family, "arch": self.model.arch,
            "peak_flops_per_s": self.peak_flops_per_s,
            "hbm_bandwidth_bytes_per_s": self.hbm_bandwidth_bytes_per_s,
            "interconnect_bandwidth_bytes_per_s": self.interconnect_bandwidth_bytes_per_s,
            "weight_bytes_per_gpu": self.weight_bytes_per_gpu,
            "weight_stream_factor": self.weight_stream_factor,
            "feature_factors": self.feature_factors,
            "attention_peak_flops_per_s": self.attention_peak_flops_per_s,
            "prefill_attention_factor": self.prefill_attention_factor,
            "kv_bytes_per_token_per_gpu": self.kv_bytes_per_token_per_gpu,
            "sampler": self.sampler, "sampler_step_s": self.sampler_step_s,
            "sampler_row_s": self.sampler_row_s,
        }
