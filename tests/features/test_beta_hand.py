"""Step features checked against hand calculations.

The expected numbers are written out from the architecture facts (config.json) and
datasheet figures below; they do not call the code under test.
H100-SXM: 989.4e12 dense bf16 FLOP/s, 3.35e12 B/s HBM, 450e9 B/s NVLink per direction.
"""

import numpy as np
import pytest

from bayesblis.catalog import kernel_prices
from bayesblis.features import (AGGREGATES, BETA_FEATURES, Deployment, beta_feature_matrix,
                                beta_features, feature_weights)
from bayesblis.features.beta import cuda_graph_tokens

P_H100 = 989.4e12
BW_H100 = 3.35e12
NVLINK_H100 = 450e9
# Weight streaming and dense-GEMM FLOPs carry the deployment's kernel-priced factors
# (bayesblis/catalog/kernel_prices.py, priced by hand in tests/catalog/test_kernel_prices.py):
# its measured GEMM times relative to H100 bf16's. Here they are inputs to the hand sums.
DEP_7B = Deployment("llama-2-7b", "H100")
DEP_70B = Deployment("llama-2-70b", "H100", tp=4)
STREAM_7B_TP1, GEMM_7B_TP1 = DEP_7B.weight_stream_factor, DEP_7B.compute_factor
STREAM_70B_TP4, GEMM_70B_TP4 = DEP_70B.weight_stream_factor, DEP_70B.compute_factor
# Prefill attention's FLOPs carry kernel-db's measured rate relative to the GEMMs' (one value
# per GPU: 1.90 / 1.265 on H100, checked in tests/catalog/test_kernel_prices.py).
PREFILL_ATTN = DEP_7B.prefill_attention_factor

# Mixed step: a 512-token prefill chunk (first chunk, empty context) + 32 decodes at
# context 1000. Attention pairs of the chunk: 512*513/2 = 131,328.
STEP = dict(prefill_tokens=512, prefill_context_tokens=0, prefill_attention_pairs=131_328,
            num_prefill_reqs=1, num_decode_reqs=32, decode_context_tokens=32_000)


def as_dict(row):
    return dict(zip(BETA_FEATURES, row))


def raw_features(deployment, step):
    """The step's features with the compute columns holding the whole FLOP time."""
    agg = np.array([[step.get(name, 0) for name in AGGREGATES]], float)
    return as_dict(feature_weights(deployment).apply(agg, roofline=False)[0])


def test_llama2_7b_tp1_h100():
    dep = Deployment("llama-2-7b", "H100")
    f = raw_features(dep, STEP)
    # Llama-2-7B: 32 layers, hidden 4096, 32 heads (MHA), head 128, MLP 11008, vocab 32000.
    # matmul params/layer = 4*4096^2 + 3*4096*11008 = 67,108,864 + 135,266,304 = 202,375,168
    linear = 2 * 32 * 202_375_168            # 12,952,010,752 FLOP/token
    lm_head = 2 * 4096 * 32000               # 262,144,000 FLOP/sampled token
    attn = 4 * 32 * 32 * 128                 # 524,288 FLOP/pair
    # prefill: 6,631,429,505,024 + 68,853,694,464 + 262,144,000 = 6,700,545,343,488 FLOP;
    # the GEMMs' (all but attention) at the kernel-priced rate
    assert linear * 512 + attn * 131_328 + lm_head == 6_700_545_343_488
    gemm_prefill = (linear * 512 + lm_head) * GEMM_7B_TP1 + attn * 131_328 * PREFILL_ATTN
    assert f["prefill_compute_s"] == pytest.approx(gemm_prefill / P_H100, rel=1e-9)  # 6.5 ms
    # decode: (12,952,010,752 + 262,144,000)*32 + 524,288*32,000 = 439,630,168,064 FLOP
    assert (linear + lm_head) * 32 + attn * 32_000 == 439_630_168_064
    gemm_decode = (linear + lm_head) * 32 * GEMM_7B_TP1 + attn * 32_000
    assert f["decode_compute_s"] == pytest.approx(gemm_decode / P_H100, rel=1e-9)  # 0.42 ms
    # weights: 6,738,415,616 params less the 32,000 x 4,096 embedding table (its rows are
    # gathered, not streamed) = 6,607,343,616 * 2 B = 13,214,687,232 B -> 3.9447 ms at peak
    assert dep.weight_stream_factor == pytest.approx(STREAM_7B_TP1, rel=1e-12)
    assert f["weight_traffic_s"] == pytest.approx(13_214_687_232 * STREAM_7B_TP1 / BW_H100, rel=1e-9)
    # KV: 524,288 B/token * (32,000 + 32 + 0 + 512) tokens = 17,062,428,672 B -> 5.0933 ms
    assert f["kv_traffic_s"] == pytest.approx(524_288 * 32_544 / BW_H100, rel=1e-9)
    # per (KV token, layer): 32 layers * 32,544 tokens = 1,041,408 -> 1.0414 ms at 1 ns
    assert f["kv_token_layer_s"] == pytest.approx(1_041_408e-9, rel=1e-9)
    assert f["tp_comm_s"] == f["tp_sync_s"] == f["ep_comm_s"] == f["offload_s"] == 0
    assert f["layer_overhead_s"] == pytest.approx(32e-6)
    assert f["request_overhead_s"] == pytest.approx(33e-6)
    assert f["step_overhead_s"] == pytest.approx(1e-6)
    # rooflines per kernel group. GEMMs: (12,952,010,752 x 544 + 262,144,000 x 33) FLOP
    # x the kernel-priced rate, about 7 ms at peak, against 3.94 ms of weights: about 3 ms
    # beyond. Attention: 524,288 x (131,328 x 1.50 + 32,000) FLOP, 0.12 ms, under
    # its 5.09 ms of KV. One roofline over the step (7 ms against 9 ms) priced nothing.
    gemm = (gemm_prefill + gemm_decode - attn * (131_328 * PREFILL_ATTN + 32_000)) / P_H100
    weights = 13_214_687_232 * STREAM_7B_TP1 / BW_H100
    kv = 524_288 * 32_544 / BW_H100
    attention = attn * (131_328 * PREFILL_ATTN + 32_000) / P_H100
    assert attention < kv and gemm > weights and gemm + attention < weights + kv
    roof = as_dict(beta_features(dep, **STEP)[0])
    excess = gemm - weights
    assert roof["prefill_compute_s"] + roof["decode_compute_s"] == pytest.approx(excess, rel=1e-9)
    # the excess is split between prefill and decode by their FLOPs
    assert roof["prefill_compute_s"] == pytest.approx(
        excess * f["prefill_compute_s"] / (f["prefill_compute_s"] + f["decode_compute_s"]), rel=1e-9)
    assert {k: v for k, v in roof.items() if "compute" not in k} == \
        {k: v for k, v in f.items() if "compute" not in k}


def test_decode_step_below_the_roofline_has_no_compute_cost():
    # 32 decodes at context 1000 on Llama-2-7B/H100: 0.4443 ms of FLOPs, far below half of
    # the 4.0229 ms of weights alone
    decode = dict(STEP, prefill_tokens=0, prefill_attention_pairs=0, num_prefill_reqs=0)
    roof = as_dict(beta_features(Deployment("llama-2-7b", "H100"), **decode)[0])
    assert roof["prefill_compute_s"] == roof["decode_compute_s"] == 0.0
    assert roof["weight_traffic_s"] > 0


def test_llama2_70b_tp4_h100():
    dep = Deployment("llama-2-70b", "H100", tp=4)
    f = raw_features(dep, STEP)
    # Llama-2-70B: 80 layers, hidden 8192, 64 heads, 8 KV heads, head 128, MLP 28672.
    # attention/layer = 2*8192^2 + 2*8192*1024 = 150,994,944; MLP = 3*8192*28672 = 704,643,072
    linear = 2 * 80 * (150_994_944 + 704_643_072)   # 136,902,082,560 FLOP/token
    lm_head = 2 * 8192 * 32000                      # 524,288,000
    attn = 4 * 80 * 64 * 128                        # 2,621,440 FLOP/pair
    n_peak = 4 * P_H100                             # 3.9576e15 FLOP/s over the TP group
    # prefill: 70,093,866,270,720 + 344,268,472,320 + 524,288,000 = 70,438,659,031,040 FLOP
    assert linear * 512 + attn * 131_328 + lm_head == 70_438_659_031_040
    assert dep.prefill_attention_factor == PREFILL_ATTN
    gemm_prefill = (linear * 512 + lm_head) * GEMM_70B_TP4 + attn * 131_328 * PREFILL_ATTN
    assert f["prefill_compute_s"] == pytest.approx(gemm_prefill / n_peak, rel=1e-9)   # about 21 ms
    # decode: 137,426,370,560*32 + 2,621,440*32,000 = 4,481,529,937,920 FLOP
    assert (linear + lm_head) * 32 + attn * 32_000 == 4_481_529_937_920
    gemm_decode = (linear + lm_head) * 32 * GEMM_70B_TP4 + attn * 32_000
    assert f["decode_compute_s"] == pytest.approx(gemm_decode / n_peak, rel=1e-9)
    # weights: (68,976,648,192 - 32,000 x 8,192 embedding) * 2 B = 137,429,008,384 B over 4
    # GPUs -> 10.256 ms, x the factor
    assert dep.weight_stream_factor == pytest.approx(STREAM_70B_TP4, rel=1e-12)
    assert f["weight_traffic_s"] == pytest.approx(137_429_008_384 * STREAM_70B_TP4 / (4 * BW_H100),
                                                  rel=1e-9)
    # KV sharding: 8 KV heads / 4 GPUs = 2 per GPU -> 80*2*2*128*2 = 81,920 B/token/GPU
    # 81,920 * 32,544 = 2,666,004,480 B -> 0.79582 ms
    assert f["kv_traffic_s"] == pytest.approx(2_666_004_480 / BW_H100, rel=1e-9)
    # per (KV token, layer), whatever the TP: 80 * 32,544 = 2,603,520 -> 2.6035 ms at 1 ns
    assert f["kv_token_layer_s"] == pytest.approx(2_603_520e-9, rel=1e-9)
    # TP: 2 all-reduces/layer * 80 layers of 544 tokens * 8192 * 2 B = 8,912,896 B each, at
    # vLLM's measured all-reduce time (kernel-db, H100 TP4: 63.3 µs at 8 MiB, 101.1 at 16 MiB,
    # linear between) -> 160 x 65.6 µs = 10.50 ms; latency included, so no rounds
    one_s = 63.264642e-6 + (101.143684e-6 - 63.264642e-6) * (8_912_896 - 8_388_608) / 8_388_608
    assert f["tp_comm_s"] == pytest.approx(160 * one_s, rel=1e-4)
    assert f["tp_sync_s"] == 0
    assert f["ep_comm_s"] == 0
    assert f["layer_overhead_s"] == pytest.approx(80e-6)
    assert f["request_overhead_s"] == pytest.approx(33e-6)
    # the GEMMs' fixed time: 4 a layer x 80 layers and the lm_head, 321 kernels at kernel-db's
    # 3.35 µs (H100 bf16) -> 1.075 ms a step
    assert f["gemm_fixed_s"] == pytest.approx(321 * kernel_prices.kernel_fixed_us("H100-SXM", "bf16") * 1e-6,
                                              rel=1e-12)
    assert 3.3 < kernel_prices.kernel_fixed_us("H100-SXM", "bf16") < 3.4


def test_mixtral_tp2_distinct_expert_weights():
    d = Deployment("mixtral-8x7b", "H100", tp=2)
    agg = dict(prefill_tokens=0, prefill_context_tokens=0, prefill_attention_pairs=0,
               num_prefill_reqs=0, decode_context_tokens=8000)
    # non-expert weights streamed: (1,605,636,096 - 32,000 x 4,096 embedding) * 2 B =
    # 2,949,128,192 B
    # one expert in one layer: 3*4096*14336*2 B = 352,321,536 B; 32 MoE layers
    # the dense weights stream at the kernel-priced factor of their GEMMs, the routed experts
    # (fused-MoE kernels) at bytes over peak (their measured price is not applied, PRICE_MOE)
    assert d.moe_stream_factor == 1.0
    dense, expert = 2_949_128_192 * d.weight_stream_factor, 352_321_536
    # 1 token touches exactly k = 2 experts/layer: dense + 32*2*352,321,536 B over 2 GPUs
    one = beta_features(d, num_decode_reqs=1, **agg)[0, BETA_FEATURES.index("weight_traffic_s")]
    assert one == pytest.approx((dense + 32 * 2 * expert) / (2 * BW_H100), rel=1e-9)
    # 16 tokens: E[distinct] = 8*(1 - 0.75^16); 0.75^16 = 0.0100226 -> 7.919819
    # bytes = dense + 32*7.919819*352,321,536
    distinct16 = 8 * (1 - 0.0100226)
    sixteen = beta_features(d, num_decode_reqs=16, **agg)[0, BETA_FEATURES.index("weight_traffic_s")]
    assert sixteen == pytest.approx((dense + 32 * distinct16 * expert) / (2 * BW_H100), rel=1e-5)
    # many tokens: all 8 experts -> every weight but the embedding is read
    many = beta_features(d, num_decode_reqs=4096, **agg)[0, BETA_FEATURES.index("weight_traffic_s")]
    assert 2_949_128_192 + 32 * 8 * 352_321_536 + 32_000 * 4096 * 2 == 46_702_792_704 * 2
    assert many == pytest.approx((dense + 32 * 8 * expert) / (2 * BW_H100), rel=1e-9)
    # compute uses the top-2 active experts only:
    # attention 41,943,040 + router 32,768 + 2 experts 352,321,536 per layer; the dense
    # GEMMs (and lm_head) at the kernel-priced rate, the routed experts at the datasheet's
    dense_gemm = 2 * 32 * (41_943_040 + 32_768) + 2 * 4096 * 32000
    routed = 2 * 32 * 352_321_536
    f = raw_features(d, dict(agg, num_decode_reqs=1))
    expected = (dense_gemm * d.compute_factor + routed + 4 * 32 * 32 * 128 * 8000) / (2 * P_H100)
    assert f["decode_compute_s"] == pytest.approx(expected, rel=1e-9)


def test_moe_term_routes_the_cuda_graph_padded_batch():
    # vLLM runs a step of <= 512 tokens padded to a captured size (1, 2, 4, 8, 16, ...);
    # the padded rows are routed too. Mixtral TP2, 3 decodes: the experts of 4 rows,
    # 8 (1 - 0.75^4) = 5.46875, not 8 (1 - 0.75^3) = 4.625; 11 decodes route 16 rows
    d = Deployment("mixtral-8x7b", "H100", tp=2)
    agg = dict(prefill_tokens=0, prefill_context_tokens=0, prefill_attention_pairs=0,
               num_prefill_reqs=0, decode_context_tokens=8000)
    w = BETA_FEATURES.index("weight_traffic_s")
    dense, expert = 2_949_128_192 * d.weight_stream_factor, 352_321_536
    three = beta_features(d, num_decode_reqs=3, **agg)[0, w]
    assert three == pytest.approx((dense + 32 * 5.46875 * expert) / (2 * BW_H100), rel=1e-9)
    eleven = beta_features(d, num_decode_reqs=11, **agg)[0, w]
    sixteen = beta_features(d, num_decode_reqs=16, **agg)[0, w]
    assert eleven == pytest.approx(sixteen, rel=1e-12)
    # above the largest captured size (512) a step runs unpadded
    assert list(cuda_graph_tokens([0, 1, 2, 3, 5, 9, 250, 257, 512, 513])) == [
        0, 1, 2, 4, 8, 16, 256, 272, 512, 513]
    assert list(cuda_graph_tokens([3, 11], max_tokens=0)) == [3, 11]


def test_moe_step_has_one_roofline_per_kernel_group():
    # Mixtral TP2, a 512-token prefill chunk: the routed experts' FLOPs hide under the
    # experts' bytes, the dense GEMMs' do not hide under them (other kernels, run after),
    # attention's hide under the KV it writes
    d = Deployment("mixtral-8x7b", "H100", tp=2)
    step = dict(prefill_tokens=512, prefill_context_tokens=0, prefill_attention_pairs=131_328,
                num_prefill_reqs=1, num_decode_reqs=0, decode_context_tokens=0)
    raw = raw_features(d, step)
    compute = raw["prefill_compute_s"] + raw["decode_compute_s"]
    memory = raw["weight_traffic_s"] + raw["kv_traffic_s"]
    # routed: 512 tokens x 2 experts x 32 layers x 2 FLOP/param x 176,160,768 params =
    # 23,089,744,183,296 FLOP over 2 x 989.4 TFLOP/s -> 11.67 ms; 512 tokens touch all 8
    # experts (1 - 0.75^512 = 1): 32 x 8 x 352,321,536 B over 2 x 3.35 TB/s -> 13.46 ms
    routed_c = 512 * 2 * 32 * 2 * 176_160_768 / (2 * P_H100)
    routed_m = 32 * 8 * 352_321_536 / (2 * BW_H100)
    assert routed_c < routed_m
    assert compute < memory  # one roofline over the whole step would price no compute
    # attention: 4 x 32 layers x 32 heads x 128 FLOP x 131,328 pairs over 2 x 989.4
    # TFLOP/s = 0.035 ms, x the measured rate 1.50 = 0.052 ms, past the chunk's KV write
    # (512 tokens x 32 layers x 4 KV heads per GPU x 128 x 2 x 2 B = 33.5 MB at 3.35 TB/s,
    # 0.010 ms): 0.042 ms beyond
    attention_c = 4 * 32 * 32 * 128 * 131_328 * PREFILL_ATTN / (2 * P_H100)
    assert attention_c == pytest.approx(
        131_328 * feature_weights(d).attention_compute[AGGREGATES.index("prefill_attention_pairs")], rel=1e-9)
    dense_excess = (compute - attention_c - routed_c) - (raw["weight_traffic_s"] - routed_m)
    assert dense_excess > 0
    roof = as_dict(beta_features(d, **step)[0])
    attention_excess = max(0.0, attention_c - raw["kv_traffic_s"])
    assert roof["prefill_compute_s"] == pytest.approx(dense_excess + attention_excess, rel=1e-9)
    assert roof["decode_compute_s"] == 0.0
    # a dense model has one group: the same features as before the split
    dense = Deployment("llama-2-7b", "H100")
    assert feature_weights(dense).routed_compute_s_per_token == 0.0


def test_mixtral_ep_comm():
    d = Deployment("mixtral-8x7b", "H100", tp=2, ep=2)
    f = as_dict(beta_features(d, prefill_tokens=100, prefill_context_tokens=0,
                              prefill_attention_pairs=5050, num_prefill_reqs=1,
                              num_decode_reqs=0, decode_context_tokens=0)[0])
    # dispatch + combine: 2 * 32 MoE layers * 100 tokens * top-2 * 4096 * 2 B = 104,857,600 B
    # all-to-all factor (2-1)/2 -> 52,428,800 B over 450e9 B/s
    assert f["ep_comm_s"] == pytest.approx(52_428_800 / NVLINK_H100, rel=1e-9)


def test_offload_whole_model_kv_over_pcie():
    d = Deployment("llama-2-7b", "H100")
    f = as_dict(beta_features(d, prefill_tokens=0, prefill_context_tokens=0, prefill_attention_pairs=0,
                              num_prefill_reqs=0, num_decode_reqs=1, decode_context_tokens=10,
                              offload_blocks=10)[0])
    # 10 blocks * 16 tokens * 524,288 B = 83,886,080 B over PCIe Gen5 64e9 B/s
    assert f["offload_s"] == pytest.approx(83_886_080 / 64e9, rel=1e-9)


def test_vectorized_and_matrix_forms_agree():
    d = Deployment("llama-3.1-8b", "A100")
    rng = np.random.default_rng(0)
    agg = {name: rng.integers(0, 5000, size=50).astype(float) for name in AGGREGATES}
    vec = beta_features(d, **agg)
    assert vec.shape == (50, len(BETA_FEATURES))
    assert np.allclose(beta_feature_matrix(d, agg), vec)
    pd = pytest.importorskip("pandas")
    assert np.allclose(beta_feature_matrix(d, pd.DataFrame(agg)), vec)
    row = beta_features(d, **{k: v[7] for k, v in agg.items()})
    assert np.allclose(row[0], vec[7])


def test_bad_inputs():
    d = Deployment("llama-2-7b", "H100")
    with pytest.raises(ValueError, match="non-negative"):
        beta_features(d, **{**STEP, "num_decode_reqs": -1})
    with pytest.raises(ValueError, match="lengths"):
        beta_features(d, **{**STEP, "num_decode_reqs": [1, 2], "prefill_tokens": [1, 2, 3]})
    with pytest.raises(KeyError, match="decode_context_tokens"):
        beta_feature_matrix(d, {k: v for k, v in STEP.items() if k != "decode_context_tokens"})
