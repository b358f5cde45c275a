"""Kernel-priced factors (bayesblis.catalog.kernel_prices): a deployment's GEMM shapes by
hand, and every factor measured from a kernel-db folder with a known truth."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bayesblis.catalog import kernel_prices
from bayesblis.catalog.gpus import load_gpu
from bayesblis.catalog.models import load_model
from bayesblis.features import AGGREGATES, BETA_FEATURES, Deployment, beta_features, feature_weights

REAL = Path(__file__).resolve().parents[3] / "shared" / "data" / "kernel-db"
SIZES = [16, 64, 256, 1024, 4096, 16384, 65536]
# the truth: achieved fraction of datasheet bandwidth (decode GEMMs) and FLOP/s (prefill)
TRUTH = {("h100_sxm", "bfloat16"): (0.8, 0.8), ("h100_sxm", "fp8"): (0.4, 0.4),
         ("a100_sxm", "bfloat16"): (0.6, 0.5)}
# a decode-size GEMM's fixed kernel time (µs) on top of its streaming
FIXED_US = {("h100_sxm", "bfloat16"): 3.0, ("h100_sxm", "fp8"): 10.0, ("a100_sxm", "bfloat16"): 5.0}
DEVICE = {"h100_sxm": "NVIDIA H100 80GB HBM3", "a100_sxm": "NVIDIA A100-SXM4-80GB"}
GPU = {"h100_sxm": "H100-SXM", "a100_sxm": "A100-SXM-80GB"}
ATTENTION = {"h100_sxm": 1.25, "a100_sxm": 1.5}   # KV time over bytes at peak, past L2
PREFILL_ATTENTION = 1.9   # H100 prefill attention's time over its FLOPs at peak, long prompts
ALLREDUCE = {"h100_sxm": (5.0, 2e-6), "a100_sxm": (7.5, 5e-6)}   # µs, µs per byte at TP 4
# fused MoE: fraction of datasheet bandwidth per (hidden, inter, experts, top-k) shape; A100
# has only power-law points, which take POWER_LAW x the balanced time
MOE = {"h100_sxm": {(4096, 14336, 8, 2): 0.7, (2048, 768, 128, 8): 0.35},
       "a100_sxm": {(4096, 14336, 8, 2): 0.5}}
POWER_LAW = 0.8


def _meta(framework, version, table):
    return (f"schema_version: 1\nprovenance: legacy\nruntime:\n  framework: {framework}\n"
            f"  version: '{version}'\ntables:\n  {table}:\n    status: complete\n")


def _write(folder: Path, table: str, frame: pd.DataFrame, framework="vllm", version="0.14.0"):
    folder.mkdir(parents=True, exist_ok=True)
    frame.to_parquet(folder / f"{table}.parquet")
    (folder / "collection_meta.yaml").write_text(_meta(framework, version, table))


def write_truth_db(root: Path) -> Path:
    """GEMMs at max(bytes / (f_w BW), FLOPs / (f_c P)), plus a fixed time at decode sizes
    (FIXED_US), decode attention at a fixed multiple
    of its bytes past L2 (and far faster inside it), all-reduce as latency + slope x bytes."""
    for gpu, device in DEVICE.items():
        spec = load_gpu(GPU[gpu])
        rows = []
        for (g, dtype), (f_w, f_c) in TRUTH.items():
            if g != gpu:
                continue
            width = 2 if dtype == "bfloat16" else 1
            peak = spec.peak_flops("bf16" if dtype == "bfloat16" else "fp8")
            for m in kernel_prices.TOKENS:
                for n in SIZES:
                    for k in SIZES:
                        t = max(n * k * width / (f_w * spec.hbm_bandwidth_bytes_per_s),
                                2 * m * n * k / (f_c * peak))
                        t += FIXED_US[g, dtype] * 1e-6 if m in kernel_prices.DECODE_TOKENS else 0.0
                        rows.append((dtype, m, n, k, t * 1e3))
        frame = pd.DataFrame(rows, columns=["gemm_dtype", "m", "n", "k", "latency"])
        common = {"framework": "VLLM", "version": "0.14.0", "device": device, "op_name": "gemm",
                  "kernel_source": "vllm_default"}
        _write(root / gpu / "gemm" / "vllm" / "0.14.0", "gemm_perf", frame.assign(**common))

        attention = []
        for batch in (1, 8, 64, 128, 256):
            for step in (127, 1023, 8191, 32767):
                kv_bytes = batch * (step + 1) * 8 * 128 * 2 * 2
                past = kv_bytes > kernel_prices.L2_MULTIPLE * kernel_prices.L2_BYTES[GPU[gpu]]
                ratio = ATTENTION[gpu] if past else 0.3
                attention.append((batch, step, kv_bytes / spec.hbm_bandwidth_bytes_per_s * ratio * 1e3))
        frame = pd.DataFrame(attention, columns=["batch_size", "step", "latency"]).assign(
            framework="VLLM", version="0.14.0", device=device, op_name="generation_attention",
            kernel_source="vllm_flash_attn", isl=1, num_heads=64, num_key_value_heads=8, head_dim=128,
            beam_width=1, attn_dtype="bfloat16", kv_cache_dtype="bfloat16")
        _write(root / gpu / "attention" / "vllm" / "0.14.0", "generation_attention_perf", frame)
        if gpu == "h100_sxm":   # A100 has no prefill attention table
            prefill = []
            for batch in (1, 4, 16):
                for isl in (1024, 2048, 4096, 6144, 8192, 12288, 16384):
                    flops = 4 * batch * 32 * 128 * isl * (isl + 1) / 2
                    ratio = PREFILL_ATTENTION if isl >= kernel_prices.PREFILL_ATTENTION_TOKENS else 5.0
                    prefill.append((batch, isl, flops / spec.peak_flops("bf16") * ratio * 1e3))
            frame = pd.DataFrame(prefill, columns=["batch_size", "isl", "latency"]).assign(
                framework="VLLM", version="0.14.0", device=device, op_name="context_attention",
                kernel_source="vllm_flash_attn", num_heads=32, num_key_value_heads=8, head_dim=128,
                beam_width=1, attn_dtype="bfloat16", kv_cache_dtype="bfloat16", step=0)
            _write(root / gpu / "attention" / "vllm" / "0.14.0", "context_attention_perf", frame)

        latency, slope = ALLREDUCE[gpu]
        elements = np.array([64, 128, 2**17, 2**20, 2**23, 2**24])
        frame = pd.DataFrame({"message_size": elements, "latency": (latency + slope * elements * 2) / 1e3}).assign(
            framework="VLLM", version="0.14.0", device=device, op_name="all_reduce",
            kernel_source="vLLM_custom_graph", allreduce_dtype="bfloat16", num_gpus=4, backend="vllm_graph")
        _write(root / gpu / "comm" / "vllm" / "0.14.0", "custom_allreduce_perf", frame)

        moe = []
        routings = {"balanced": 1.0, "power_law_1.01": POWER_LAW} if gpu == "h100_sxm" else {"power_law_1.01": POWER_LAW}
        for (hidden, inter, experts, topk), f_moe in MOE[gpu].items():
            for tp, ep in ((2, 1), (1, 2)):
                for tokens in kernel_prices.MOE_TOKENS:
                    touched = min(experts, tokens * topk) / ep
                    balanced = touched * 3 * hidden * inter / tp * 2 / (f_moe * spec.hbm_bandwidth_bytes_per_s)
                    for routing, scale in routings.items():
                        moe.append(("bfloat16", tokens, hidden, inter, topk, experts, tp, ep, routing,
                                    balanced * scale * 1e3))
        frame = pd.DataFrame(moe, columns=["moe_dtype", "num_tokens", "hidden_size", "inter_size", "topk",
                                           "num_experts", "moe_tp_size", "moe_ep_size", "distribution",
                                           "latency"]).assign(framework="VLLM", version="0.14.0", device=device,
                                                              op_name="moe", kernel_source="vllm_fused_moe")
        _write(root / gpu / "moe" / "vllm" / "0.14.0", "moe_perf", frame)
    return root


@pytest.fixture
def truth_catalog(tmp_path, monkeypatch):
    """The catalog built from the truth folder, read in place of the packaged one."""
    out = tmp_path / "kernel_prices.json"
    monkeypatch.setattr(kernel_prices, "CATALOG_FILE", out)
    doc = kernel_prices.build(write_truth_db(tmp_path / "kernel-db"), out=out)
    yield doc
    monkeypatch.undo()
    kernel_prices.clear_caches()


def test_layer_gemms_of_llama_2_70b_at_tp4_by_hand():
    # 64 heads, 8 KV heads, head 128, hidden 8192, MLP 28672, vocab 32000, 80 layers
    shapes = kernel_prices.layer_gemms(load_model("llama-2-70b"), 4)
    assert shapes == [((16 + 2 * 2) * 128, 8192, 80.0),   # fused QKV per GPU: 2,560 x 8,192
                      (8192, 16 * 128, 80.0),             # output projection: 8,192 x 2,048
                      (2 * 7168, 8192, 80.0),             # gate + up: 14,336 x 8,192
                      (8192, 7168, 80.0),                 # down: 8,192 x 7,168
                      (8000, 8192, 1.0)]                  # lm_head, once per step


def test_factors_recover_the_truth(truth_catalog):
    assert json.loads(kernel_prices.CATALOG_FILE.read_text()) == truth_catalog
    h100, a100 = load_gpu("H100-SXM"), load_gpu("A100-SXM-80GB")
    model = load_model("llama-2-70b")
    # a decode GEMM's fixed time: the median of the GEMMs that stream in under 1 µs, which
    # carries a little of their streaming (0.05-0.1 µs here)
    for gpu, dtype, table in (("H100-SXM", "bf16", "bfloat16"), ("H100-SXM", "fp8", "fp8"),
                              ("A100-SXM-80GB", "bf16", "bfloat16")):
        fixed = FIXED_US[{v: k for k, v in GPU.items()}[gpu], table]
        assert fixed < kernel_prices.kernel_fixed_us(gpu, dtype) < fixed + 0.15
    assert kernel_prices.kernel_fixed_us("L40S", "bf16") is None
    # a step's: 4 GEMMs a layer x 80 layers and the lm_head, each at its fixed time
    assert kernel_prices.gemm_fixed_us(model, "H100-SXM", 4, "bf16") == pytest.approx(321 * 3.0, rel=3e-2)
    assert kernel_prices.gemm_fixed_us(model, "L40S", 4, "bf16") is None
    # every GEMM streams at 0.8 of H100's bandwidth beyond its fixed time: the reference
    # ratio is 1/0.8 (within what the fixed time's estimate leaves in small models' GEMMs)
    weight, compute = kernel_prices.reference_ratios()
    assert weight == pytest.approx(1 / 0.8, rel=3e-2) and compute == pytest.approx(1 / 0.8, rel=1e-3)
    # A100 streams at 0.6 and computes at 0.5: 0.8/0.6 and 0.8/0.5 of the reference's time
    assert kernel_prices.factor(model, a100, 4, "bf16") == pytest.approx(0.8 / 0.6, rel=3e-2)
    assert kernel_prices.compute_factor(model, a100, 4, "bf16") == pytest.approx(0.8 / 0.5, rel=1e-3)
    # H100 FP8 GEMMs: half the bytes at half the efficiency (0.4), so 0.8/0.4 x the bytes' time,
    # and the FLOPs at 0.4 of the doubled FP8 peak
    assert kernel_prices.factor(model, h100, 2, "fp8") == pytest.approx(2.0, rel=3e-2)
    assert kernel_prices.compute_factor(model, h100, 2, "fp8") == pytest.approx(2.0, rel=1e-3)
    assert kernel_prices.factor(model, load_gpu("L40S"), 1, "bf16") is None   # no L40S tables
    # decode attention: only the points past L2 price KV streaming (1.5 / 1.25)
    assert truth_catalog["decode_attention"] == {"A100-SXM-80GB": 1.5, "H100-SXM": 1.25}
    assert kernel_prices.kv_factor(a100) == pytest.approx(1.2)
    # prefill attention: the long prompts' time over FLOPs at peak, over the GEMMs' 1/0.8;
    # a GPU without the table takes the reference GPU's
    assert truth_catalog["prefill_attention"] == {"H100-SXM": pytest.approx(PREFILL_ATTENTION)}
    assert kernel_prices.prefill_attention_factor(h100) == pytest.approx(PREFILL_ATTENTION * 0.8, rel=1e-3)
    assert kernel_prices.prefill_attention_factor(a100) == kernel_prices.prefill_attention_factor(h100)
    # all-reduce at TP 4: latency of small messages, slope over the ring formula at each link
    summary = {g: truth_catalog["allreduce"][GPU[g]]["4"] for g in GPU}
    formula = {g: 2 * 3 / 4 / load_gpu(GPU[g]).interconnect_bandwidth_bytes_per_s * 1e6 for g in GPU}
    per_byte = summary["a100_sxm"]["per_byte_ratio"] / summary["h100_sxm"]["per_byte_ratio"]
    latency = summary["a100_sxm"]["latency_us"] / summary["h100_sxm"]["latency_us"]
    assert per_byte == pytest.approx((5e-6 / formula["a100_sxm"]) / (2e-6 / formula["h100_sxm"]), rel=1e-3)
    assert latency == pytest.approx(7.5 / 5.0, rel=1e-3)
    assert kernel_prices.allreduce_curve(a100, 2) is None   # TP 2 not measured


def test_moe_factors_recover_the_truth(truth_catalog):
    h100, a100 = load_gpu("H100-SXM"), load_gpu("A100-SXM-80GB")
    mixtral, qwen = load_model("mixtral-8x7b"), load_model("qwen3-30b-a3b")
    # the routed experts stream at 0.7 of H100's bandwidth, relative to the reference dense
    # GEMMs' time beyond their fixed time (0.8 of it)
    ref = 1 / kernel_prices.reference_ratios()[0]
    assert kernel_prices.moe_factor(mixtral, h100, 2, 1, "bf16") == pytest.approx(ref / 0.7, rel=1e-3)
    # expert parallelism reads the ep = 2 points (same truth)
    assert kernel_prices.moe_factor(mixtral, h100, 2, 2, "bf16") == pytest.approx(ref / 0.7, rel=1e-3)
    # A100 has only power-law points: H100's balanced / power-law ratio brings them back
    assert kernel_prices.moe_factor(mixtral, a100, 2, 1, "bf16") == pytest.approx(ref / 0.5, rel=1e-3)
    # Qwen3-30B-A3B's 128 narrow experts are nearest the small shape, which streams at 0.35
    assert kernel_prices.moe_factor(qwen, h100, 2, 1, "bf16") == pytest.approx(ref / 0.35, rel=1e-3)
    assert kernel_prices.moe_factor(mixtral, h100, 4, 1, "bf16") is None   # TP 4 not measured
    assert kernel_prices.moe_factor(mixtral, h100, 2, 1, "fp8") is None    # no FP8 points
    # measured, applied only with PRICE_MOE
    assert Deployment("mixtral-8x7b", "H100", tp=2).moe_stream_factor == 1.0


def test_deployments_carry_the_moe_factor_when_priced(truth_catalog, monkeypatch):
    monkeypatch.setattr(kernel_prices, "PRICE_MOE", True)
    ref = 1 / kernel_prices.reference_ratios()[0]
    d = Deployment("mixtral-8x7b", "H100", tp=2)
    assert d.moe_stream_factor == pytest.approx(ref / 0.7, rel=1e-3)
    # a GPU this kernel-db lacks (L40S here) takes the measured GPUs' geometric mean
    pooled = Deployment("mixtral-8x7b", "L40S", tp=2).moe_stream_factor
    assert pooled == pytest.approx(ref / np.sqrt(0.7 * 0.5), rel=1e-3)
    assert Deployment("llama-2-70b", "H100", tp=2).moe_stream_factor == 1.0    # dense
    # the routed experts' bytes at that factor: all 8 experts at 4,096 tokens, 32 layers of
    # 3 x 4096 x 14336 x 2 B each, over 2 GPUs at 3.35 TB/s
    agg = dict(prefill_tokens=0, prefill_context_tokens=0, prefill_attention_pairs=0, num_prefill_reqs=0,
               decode_context_tokens=0)
    plain = Deployment("mixtral-8x7b", "H100", tp=2)
    monkeypatch.setattr(kernel_prices, "PRICE_MOE", False)
    unpriced = Deployment("mixtral-8x7b", "H100", tp=2)
    k = BETA_FEATURES.index("weight_traffic_s")
    experts_s = 32 * 8 * 3 * 4096 * 14336 * 2 / (2 * 3.35e12)
    priced = beta_features(plain, num_decode_reqs=4096, **agg)[0, k]
    assert priced - beta_features(unpriced, num_decode_reqs=4096, **agg)[0, k] == \
        pytest.approx(experts_s * (ref / 0.7 - 1), rel=1e-3)


def test_deployments_carry_the_factors(truth_catalog, monkeypatch):
    d = Deployment("llama-2-70b", "A100", tp=4)
    assert d.weight_stream_factor == pytest.approx(0.8 / 0.6, rel=3e-2)
    assert d.feature_factors["kv_traffic_s"] == pytest.approx(1.2)
    # across GPUs: the GPU's bf16 FLOP time over H100's at the same shapes, 0.8 / 0.5 of peak,
    # and its median over the catalog's dense deployments, which a deployment carries
    assert kernel_prices.gpu_compute_factor(load_model("llama-2-70b"), load_gpu("A100"), 4) == \
        pytest.approx(1.6, rel=1e-3)
    assert kernel_prices.gpu_compute_rate(load_gpu("A100")) == pytest.approx(1.6, rel=1e-3)
    assert kernel_prices.gpu_compute_rate(load_gpu("H100")) == 1.0
    assert d.feature_factors["prefill_compute_s"] == d.compute_factor == pytest.approx(1.6, rel=1e-3)
    monkeypatch.setattr(kernel_prices, "PRICE_COMPUTE_ACROSS_GPUS", False)
    assert Deployment("llama-2-70b", "A100", tp=4).compute_factor == 1.0   # the datasheet's
    monkeypatch.setattr(kernel_prices, "PRICE_COMPUTE_ACROSS_GPUS", True)
    # FP8 GEMMs at their measured FP8 rate whatever the across-GPU switch (0.8 / 0.4 of peak)
    assert Deployment("llama-2-70b", "H100", tp=2, dtype="fp8").compute_factor == pytest.approx(2.0, rel=1e-3)
    monkeypatch.setattr(kernel_prices, "PRICE_LOW_PRECISION_COMPUTE", False)
    assert Deployment("llama-2-70b", "H100", tp=2, dtype="fp8").compute_factor == 1.0  # datasheet
    monkeypatch.setattr(kernel_prices, "PRICE_COMPUTE", True)   # and the dtype's
    d = Deployment("llama-2-70b", "A100", tp=4)
    assert d.feature_factors["prefill_compute_s"] == d.compute_factor == pytest.approx(1.6, rel=1e-3)
    # the step's all-reduces at vLLM's measured time: 100 tokens of 8192 x 2 B = 1,638,400 B
    # each, 7.5 µs + 5e-6 µs/B (the truth, linear between the measured sizes) -> 15.692 µs,
    # 2 per layer x 80 layers; latency included, so no per-round term
    step = beta_features(d, prefill_tokens=0, prefill_context_tokens=0, prefill_attention_pairs=0,
                         num_prefill_reqs=0, num_decode_reqs=100, decode_context_tokens=0)[0]
    assert step[BETA_FEATURES.index("tp_comm_s")] == pytest.approx(160 * 15.692e-6, rel=1e-4)  # ns rounding
    assert step[BETA_FEATURES.index("tp_sync_s")] == 0
    # prefill attention's FLOPs at their measured rate relative to the GEMMs' (1.9 x 0.8);
    # decode attention's keep the peak
    pairs = feature_weights(d).attention_compute
    flops_s = d.model.attention_flops_per_pair / (4 * d.attention_peak_flops_per_s)
    assert pairs[AGGREGATES.index("prefill_attention_pairs")] == pytest.approx(1.52 * flops_s, rel=1e-3)
    monkeypatch.setattr(kernel_prices, "PRICE_PREFILL_ATTENTION", False)
    assert Deployment("llama-2-70b", "A100", tp=4).prefill_attention_factor == 1.0
    ref = Deployment("llama-2-70b", "H100", tp=4)
    relative = {k: v for k, v in ref.feature_factors.items()
                if not k.startswith(("sampling_s", "gemm_fixed_s"))}  # those are µs
    assert relative == pytest.approx({k: 1.0 for k in relative}, rel=3e-2)   # fixed time's estimate
    # FP8 weights on H100: GEMMs at their measured FP8 rate, attention at the bf16 peak
    fp8 = Deployment("llama-2-70b", "H100", tp=2, dtype="fp8")
    assert fp8.attention_peak_flops_per_s == load_gpu("H100").peak_flops("bf16")
    assert fp8.compute_factor == pytest.approx(2.0, rel=1e-3)
    # a GPU kernel-db lacks (L40S in this one) takes every factor, and the GEMMs' fixed time,
    # as the geometric mean of the GPUs it measures
    lacks, measured = Deployment("llama-2-70b", "L40S", tp=4), [Deployment("llama-2-70b", g, tp=4)
                                                                for g in ("A100", "H100")]
    assert not kernel_prices.measures(lacks.gpu.name) and kernel_prices.measures("A100-SXM-80GB")
    assert lacks.compute_factor == pytest.approx(np.sqrt(1.6), rel=1e-3)
    for name in ("weight_stream_factor", "kv_stream_factor", "compute_factor", "gemm_fixed_s"):
        assert getattr(lacks, name) == pytest.approx(np.sqrt(np.prod([getattr(m, name) for m in measured])))


def test_a_gpu_kernel_db_lacks_streams_at_the_measured_gpus_pooled_rate():
    # A40 (in the GPU catalog, not in kernel-db): the four measured GPUs' geometric mean,
    # slower than H100, the most efficient of them, and within their range
    gpus = ("H100-SXM", "A100-SXM-80GB", "L40S", "H200-SXM")
    assert not kernel_prices.measures("A40") and all(kernel_prices.measures(g) for g in gpus)
    a40 = Deployment("llama-2-70b", "A40", tp=4)
    each = [Deployment("llama-2-70b", g, tp=4).weight_stream_factor for g in gpus]
    assert a40.weight_stream_factor == pytest.approx(np.exp(np.mean(np.log(each))), rel=1e-9)
    assert min(each) == each[0] < a40.weight_stream_factor < max(each)
    kv = [Deployment("llama-2-70b", g, tp=4).kv_stream_factor for g in gpus]
    assert a40.kv_stream_factor == pytest.approx(np.exp(np.mean(np.log(kv))), rel=1e-9)


@pytest.mark.skipif(not REAL.is_dir(), reason="shared kernel-db not present")
def test_packaged_catalog_is_built_from_kernel_db(tmp_path):
    try:
        doc = kernel_prices.build(REAL, out=tmp_path / "kernel_prices.json")
    finally:
        kernel_prices.clear_caches()
    packaged = json.loads(kernel_prices.CATALOG_FILE.read_text())
    assert {k: v for k, v in doc.items() if k != "source"} == \
        {k: v for k, v in packaged.items() if k != "source"}
    # kernel-db's README: weight-bound bf16 GEMMs reach about 0.86 of H100's bandwidth, 0.66 of A100's
    h100, a100 = load_gpu("H100-SXM"), load_gpu("A100-SXM-80GB")
    t_h = kernel_prices.gemm_time_us("H100-SXM", "bf16", 8192, 8192, (16,))[0, 0] * 1e-6
    t_a = kernel_prices.gemm_time_us("A100-SXM-80GB", "bf16", 8192, 8192, (16,))[0, 0] * 1e-6
    assert 8192**2 * 2 / h100.hbm_bandwidth_bytes_per_s / t_h == pytest.approx(0.86, abs=0.03)
    assert 8192**2 * 2 / a100.hbm_bandwidth_bytes_per_s / t_a == pytest.approx(0.66, abs=0.03)
    # and prefill attention reaches 0.3-0.6 of peak FLOP/s (0.53 on H100 past 4,096 tokens)
    assert 1 / doc["prefill_attention"]["H100-SXM"] == pytest.approx(0.53, abs=0.02)
    # compute-bound GEMMs: A100 reaches more of its peak than H100, L40S less (the packaged
    # catalog, equal to the one just built)
    assert kernel_prices.gpu_compute_rate(a100) == pytest.approx(0.915, abs=0.01)
    assert kernel_prices.gpu_compute_rate(load_gpu("L40S")) == pytest.approx(1.10, abs=0.01)
