"""Features of operator-profile rows, checked by hand (FLOPs = 2 x tokens x linear-layer
params / tp; bytes = linear weight bytes / tp), and against the step features they share."""

import numpy as np
import pytest

from bayesblis.features import BETA_FEATURES, Deployment, beta_features, feature_weights
from bayesblis.features.beta import allreduce_features, linear_layer_features
from bayesblis.catalog.models import ModelArch

F = {name: i for i, name in enumerate(BETA_FEATURES)}


def test_llama2_7b_a100_tp2_4096_tokens_by_hand():
    f = linear_layer_features(Deployment("llama-2-7b", "A100", tp=2, dtype="fp16"), 4096)[0]
    # one layer's matmuls: 4*4096^2 (q, k, v, o) + 3*4096*11008 (gate, up, down) = 202,375,168
    params = 4 * 4096**2 + 3 * 4096 * 11008
    assert params == 202_375_168
    # per GPU at TP2: 2 x 4096 tokens x 202,375,168 / 2 = 828,928,688,128 FLOP at 312 TFLOP/s
    assert 2 * 4096 * params // 2 == 828_928_688_128
    # weights: 202,375,168 params x 2 B / 2 GPUs = 202,375,168 B at 2.039 TB/s -> 99.25 µs
    assert f[F["weight_traffic_s"]] == pytest.approx(202_375_168 / 2.039e12, rel=1e-12)
    # the FLOP time (2.657 ms) beyond the weight time (roofline bend): 2.558 ms
    assert f[F["prefill_compute_s"]] == pytest.approx(
        828_928_688_128 / 312e12 - 202_375_168 / 2.039e12, rel=1e-12)
    assert f[F["layer_overhead_s"]] == pytest.approx(1e-6)  # one layer's per-layer constant
    others = [i for n, i in F.items() if n not in ("prefill_compute_s", "weight_traffic_s",
                                                   "layer_overhead_s")]
    assert not f[others].any()
    assert not linear_layer_features(Deployment("llama-2-7b", "A100"), 1,
                                     layer_constant=False)[0, F["layer_overhead_s"]]


def test_non_gated_model_from_shapes_by_hand():
    phi = ModelArch(name="phi-2", family="phi", architecture="PhiForCausalLM", n_layers=32,
                    hidden_size=2560, n_heads=32, n_kv_heads=32, head_dim=80,
                    intermediate_size=10240, vocab_size=51200, gated_mlp=False)
    f = linear_layer_features(Deployment(phi, "H100", dtype="fp16"), [1, 4096])
    params = 4 * 2560**2 + 2 * 2560 * 10240  # 78,643,200: up and down only
    assert f[:, F["weight_traffic_s"]] == pytest.approx(2 * params / 3.35e12)  # 46.95 µs
    # one token (0.16 µs of FLOPs) hides under the weights; 4,096 tokens pay the excess
    flops_s = np.array([1, 4096]) * 2 * params / 989.4e12
    assert f[:, F["prefill_compute_s"]] == pytest.approx(
        np.maximum(flops_s - 2 * params / 3.35e12, 0.0))
    assert f[0, F["prefill_compute_s"]] == 0.0


def test_per_layer_share_sums_to_the_step_linear_compute():
    dep = Deployment("llama-2-70b", "H100", tp=4)
    layer = linear_layer_features(dep, 512, roofline=False)[0]
    agg = np.array([[512, 0, 0, 0, 0, 0, 0]], float)
    step = feature_weights(dep).apply(agg, roofline=False)[0]
    # the step's GEMMs carry the deployment's kernel-priced FLOP rate, a profile row's do not
    assert 80 * layer[F["prefill_compute_s"]] * dep.compute_factor == pytest.approx(
        step[F["prefill_compute_s"]], rel=1e-12)
    assert 80 * layer[F["layer_overhead_s"]] == pytest.approx(step[F["layer_overhead_s"]])
    # the step streams embedding, norms and lm_head too: the layers' share is a bit less;
    # the step's weights carry the deployment's kernel-priced factor, a profile row's do not
    share = (80 * layer[F["weight_traffic_s"]] * dep.weight_stream_factor
             / step[F["weight_traffic_s"]])
    assert 0.97 < share < 1.0


def test_all_reduce_by_hand_and_as_the_step_shares():
    # A40 (not in kernel-db): the ring formula over its link (PCIe, 32 GB/s per direction)
    # and log2(tp) rounds of latency: 16,777,216 B x 2 x 7/8 / 32e9 -> 917.5 µs
    f = allreduce_features("A40", 8, [16 * 2**20])[0]
    assert f[F["tp_comm_s"]] == pytest.approx(16_777_216 * 2 * 7 / 8 / 32e9, rel=1e-12)
    assert f[F["tp_sync_s"]] == pytest.approx(3e-6)  # log2(8) rounds x 1 µs
    assert np.count_nonzero(f) == 2
    # H100 (in kernel-db): vLLM's measured all-reduce, whole; README: 4.9 / 11.4 µs at 1 / 32
    # tokens of an 8192-wide model at TP 4 (16 KiB and 512 KiB)
    h100 = allreduce_features("H100", 4, [16 * 2**10, 512 * 2**10])
    assert h100[:, F["tp_comm_s"]] * 1e6 == pytest.approx([4.9, 11.4], abs=0.1)
    assert not h100[:, F["tp_sync_s"]].any()
    # a step of T tokens runs 2 x n_layers all-reduces of T x hidden x 2 B each
    dep = Deployment("llama-2-70b", "H100", tp=4)
    step = beta_features(dep, prefill_tokens=300, prefill_context_tokens=0, prefill_attention_pairs=0,
                         num_prefill_reqs=0, num_decode_reqs=0, decode_context_tokens=0)[0]
    one = allreduce_features(dep.gpu, 4, 300 * 8192 * 2)[0]
    assert 2 * 80 * one[F["tp_comm_s"]] == pytest.approx(step[F["tp_comm_s"]], rel=1e-12)
    assert 2 * 80 * one[F["tp_sync_s"]] == pytest.approx(step[F["tp_sync_s"]], rel=1e-12)
    with pytest.raises(ValueError, match="tp >= 2"):
        allreduce_features("H100", 1, 1024)


def test_moe_models_have_no_linear_layer_features():
    with pytest.raises(ValueError, match="MoE"):
        linear_layer_features(Deployment("mixtral-8x7b", "H100", tp=2), 16)
