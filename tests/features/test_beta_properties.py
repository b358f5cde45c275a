"""Property tests of the step features (hypothesis)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bayesblis.catalog import kernel_prices
from bayesblis.features import (AGGREGATES, BETA_FEATURES, BLIS_BETA_ORDER, Deployment,
                                beta_features, feature_weights, roofline_s, to_blis_beta)

DEPLOYMENTS = [
    Deployment("llama-2-7b", "H100"),
    Deployment("llama-2-70b", "A100", tp=4),
    Deployment("mixtral-8x7b", "H100", tp=2, ep=2),
    Deployment("qwen3-30b-a3b", "L40S", tp=2),
    Deployment("deepseek-v2-lite", "H200"),
]
deployments = st.sampled_from(DEPLOYMENTS)
counts = st.integers(min_value=0, max_value=20_000)
aggregates = st.fixed_dictionaries({name: counts for name in AGGREGATES})
F = {name: i for i, name in enumerate(BETA_FEATURES)}
CONSTANT = {"tp_sync_s", "layer_overhead_s", "step_overhead_s", "gemm_fixed_s"}
COMPUTE = ("prefill_compute_s", "decode_compute_s")


def raw_features(d, agg):
    """Features with the compute columns holding the whole FLOP time (no roofline)."""
    a = np.array([[agg.get(name, 0) for name in AGGREGATES]], float)
    return feature_weights(d).apply(a, roofline=False)[0]


@settings(max_examples=200, deadline=None)
@given(deployments, aggregates)
def test_non_negative_and_finite(d, agg):
    f = beta_features(d, **agg)
    assert np.all(np.isfinite(f)) and np.all(f >= 0)


@settings(max_examples=200, deadline=None)
@given(deployments, aggregates, st.sampled_from(AGGREGATES), st.integers(1, 10_000))
def test_monotone_in_each_aggregate(d, agg, name, bump):
    # raw FLOP, byte and count times grow with every aggregate; the compute excess need not
    # (more KV raises the memory time it is measured against), the step's roofline does
    bigger = {**agg, name: agg[name] + bump}
    base, more = raw_features(d, agg), raw_features(d, bigger)
    assert np.all(more >= base * (1 - 1e-12))
    assert roofline_s(d, **bigger)[0] >= roofline_s(d, **agg)[0] * (1 - 1e-12)


@settings(max_examples=200, deadline=None)
@given(deployments, aggregates)
def test_unit_coefficients_never_beat_the_roofline(d, agg):
    # the physical floor: with compute and traffic coefficients of 1 a step costs at least
    # max(FLOPs / peak, bytes / peak bandwidth); compute below the bend costs nothing extra
    f = beta_features(d, **agg)[0]
    raw = raw_features(d, agg)
    priced = sum(f[F[k]] for k in (*COMPUTE, "weight_traffic_s", "kv_traffic_s"))
    assert priced >= roofline_s(d, **agg)[0] * (1 - 1e-12)
    compute, memory = raw[F[COMPUTE[0]]] + raw[F[COMPUTE[1]]], raw[F["weight_traffic_s"]] + raw[F["kv_traffic_s"]]
    # one roofline per kernel group: attention's FLOPs against the KV bytes, the routed
    # experts' against their bytes, the dense GEMMs' against the rest of the weights
    fm = feature_weights(d)
    tokens = agg["prefill_tokens"] + agg["num_decode_reqs"]
    routed_c, routed_m = fm.routed_compute_s_per_token * tokens, float(fm.moe_term_s(tokens))
    attention_c = sum(agg.get(name, 0) * fm.attention_compute[i] for i, name in enumerate(AGGREGATES))
    weights, kv = raw[F["weight_traffic_s"]], raw[F["kv_traffic_s"]]
    excess = (max(0.0, compute - attention_c - routed_c - (weights - routed_m))
              + max(0.0, routed_c - routed_m) + max(0.0, attention_c - kv))
    assert f[F[COMPUTE[0]]] + f[F[COMPUTE[1]]] == pytest.approx(excess, rel=1e-9, abs=1e-15)
    assert excess >= max(0.0, compute - memory) * (1 - 1e-12)
    if not d.model.is_moe:
        assert routed_c == routed_m == 0.0


@settings(max_examples=200, deadline=None)
@given(deployments, aggregates, aggregates)
def test_additive_over_steps_for_linear_features(d, a, b):
    fa, fb = raw_features(d, a), raw_features(d, b)
    fab = raw_features(d, {k: a[k] + b[k] for k in AGGREGATES})
    for name, i in F.items():
        if name in CONSTANT:
            assert fab[i] == pytest.approx(fa[i]) == pytest.approx(fb[i])
        elif name == "tp_comm_s" and len(feature_weights(d).allreduce_tokens):
            continue  # vLLM's measured all-reduce time, not linear in the tokens
        elif name == "weight_traffic_s":
            if not d.model.is_moe:
                assert fab[i] == pytest.approx(fa[i])  # dense: weights read once per step
            else:
                assert fab[i] <= fa[i] + fb[i]  # distinct experts are subadditive
        else:
            assert fab[i] == pytest.approx(fa[i] + fb[i], rel=1e-9, abs=1e-18)


@settings(max_examples=100, deadline=None)
@given(aggregates)
def test_compute_scales_as_one_over_tp(agg):
    # on a GPU kernel-db lacks, FLOPs are priced at the measured GPUs' pooled rate whatever
    # the shapes (catalog.kernel_prices.pooled; one rate per GPU, as on the GPUs it measures)
    d1, d4 = Deployment("llama-2-70b", "A40", tp=1), Deployment("llama-2-70b", "A40", tp=4)
    assert d1.compute_factor == d4.compute_factor == kernel_prices.pooled(kernel_prices.gpu_compute_rate)
    f1, f4 = raw_features(d1, agg), raw_features(d4, agg)  # FLOP time before the roofline
    for name in ("prefill_compute_s", "decode_compute_s"):
        assert f4[F[name]] == pytest.approx(f1[F[name]] / 4, rel=1e-12)
    # weights: a quarter of the bytes each, streamed at each TP's pooled kernel-db efficiency
    assert f4[F["weight_traffic_s"]] / d4.weight_stream_factor == pytest.approx(
        f1[F["weight_traffic_s"]] / d1.weight_stream_factor / 4, rel=1e-12)
    assert f1[F["tp_comm_s"]] == 0


@settings(max_examples=100, deadline=None)
@given(deployments, st.lists(aggregates, min_size=1, max_size=20), st.lists(st.floats(0, 5), min_size=len(BETA_FEATURES), max_size=len(BETA_FEATURES)))
def test_feature_map_is_affine_but_two_terms_before_the_roofline(d, rows, beta):
    agg = {k: np.array([r[k] for r in rows], dtype=float) for k in AGGREGATES}
    beta = np.array(beta)
    fmap = feature_weights(d)
    A = np.stack([agg[k] for k in AGGREGATES], axis=1)
    expected = fmap.apply(A, roofline=False) @ beta
    tokens = agg["prefill_tokens"] + agg["num_decode_reqs"]
    got = (A @ (fmap.weights @ beta) + fmap.bias @ beta
           + fmap.moe_term_s(tokens) * beta[F["weight_traffic_s"]]
           + fmap.allreduce_term_s(tokens) * beta[F["tp_comm_s"]])
    assert np.allclose(got, expected, rtol=1e-10, atol=1e-15)


def test_roofline_is_max_of_compute_and_memory():
    d = DEPLOYMENTS[0]
    decode = dict(prefill_tokens=0, prefill_context_tokens=0, prefill_attention_pairs=0,
                  num_prefill_reqs=0, num_decode_reqs=8, decode_context_tokens=8000)
    f = beta_features(d, **decode)[0]
    assert roofline_s(d, **decode)[0] == pytest.approx(f[F["weight_traffic_s"]] + f[F["kv_traffic_s"]])
    assert f[F["decode_compute_s"]] == 0.0  # 8 decodes: far below the bend
    prefill = dict(prefill_tokens=8192, prefill_context_tokens=0, prefill_attention_pairs=8192 * 8193 // 2,
                   num_prefill_reqs=1, num_decode_reqs=0, decode_context_tokens=0)
    f = raw_features(d, prefill)
    assert roofline_s(d, **prefill)[0] == pytest.approx(f[F["prefill_compute_s"]])


def test_blis_tp_slot_carries_the_measured_all_reduce_into_blis_linear_basis():
    from bayesblis.blis_projection import Batches, BlisShape, trained_physics_basis
    from bayesblis.coefficients import blis_to_bayesblis
    from bayesblis.features.beta import SLOT_TOKENS, blis_tp_slot

    F = {n: i for i, n in enumerate(BETA_FEATURES)}
    d = Deployment("llama-2-70b", "H100", tp=4)
    per_token, step_us, rounds = blis_tp_slot(d)
    assert rounds == 0.0          # the measured curve includes the latency: no per-round term
    # BLIS's beta4 x its basis + beta7 against the curve the step is priced with, 16-256 tokens
    shape = BlisShape.from_deployment(d)
    for tokens in (16, 64, 256):
        batch = Batches(*(np.array([v], float) for v in (0.0, 0.0, tokens, 0.0, tokens)))
        blis_us = per_token * trained_physics_basis(shape, batch)[0, 3] + step_us
        ours_us = raw_features(d, dict(prefill_tokens=0, prefill_context_tokens=0, prefill_attention_pairs=0,
                                       num_prefill_reqs=0, num_decode_reqs=tokens,
                                       decode_context_tokens=0))[F["tp_comm_s"]] * 1e6
        assert blis_us == pytest.approx(ours_us, rel=0.25), tokens
    assert SLOT_TOKENS[0] == 8 and SLOT_TOKENS[-1] == 512
    beta = {name: float(i + 1) for i, name in enumerate(BETA_FEATURES)}
    out = to_blis_beta(beta, tp=4, tp_slot=(per_token, step_us, rounds))
    assert out[3] == pytest.approx(6.0 * per_token)
    assert out[4] == 10.0                                   # no rounds folded in
    assert out[6] == pytest.approx(12.0 + 6.0 * step_us)
    back, _ = blis_to_bayesblis({"beta_coeffs": out, "alpha_coeffs": [1.0, 0.0, 2.0]},
                                tp_slot=(per_token, step_us, rounds))
    assert back["tp_comm_s"] == pytest.approx(6.0) and back["step_overhead_s"] == pytest.approx(12.0)
    # a GPU kernel-db lacks (A40, ring formula over its link): a line through zero, and the
    # ring's 2 x log2(2) rounds per layer stay in beta5
    per_token, step_us, rounds = blis_tp_slot(Deployment("llama-2-70b", "A40", tp=2))
    assert step_us == pytest.approx(0.0, abs=1e-6) and rounds == 2.0
    assert blis_tp_slot(Deployment("llama-2-7b", "H100", tp=1)) is None


def test_slot_mapping_weighs_moe_weights_and_waits_one_step_in_alpha0():
    from bayesblis.blis_export import slot_mapping
    from bayesblis.coefficients import async_wait_us, blis_to_bayesblis
    from bayesblis.features import ALPHA_FEATURES
    from bayesblis.features.beta import ASYNC_STEP_AGGREGATES, blis_async_step_features, blis_tp_slot

    d = Deployment("mixtral-8x7b", "H100", tp=2)
    # BLIS reads every expert at the weight slot: the dense GEMMs' factor (1.42, small
    # attention matrices) weighted by their 3.2 GB against 90.2 GB of experts at 1
    dense, experts = d.streamed_weight_bytes, 32 * 8 * 3 * 4096 * 14336 * 2
    assert d.feature_factors["weight_traffic_s"] == pytest.approx(
        (dense * d.weight_stream_factor + experts) / (dense + experts))
    assert d.feature_factors["weight_traffic_s"] < 1.05 < d.weight_stream_factor
    beta = np.linspace(1.0, 2.0, len(BETA_FEATURES))
    alpha = np.array([5000.0, 2.0, 40.0, 50.0])[:len(ALPHA_FEATURES)]
    a, b = slot_mapping(d, beta, alpha)
    step_us = beta_features(d, prefill_tokens=0, prefill_context_tokens=0, prefill_attention_pairs=0,
                            num_prefill_reqs=0, **ASYNC_STEP_AGGREGATES)[0] @ beta * 1e6
    assert 5_000 < step_us < 50_000                  # a Mixtral TP2 decode step, in µs
    # the prompt (2 µs x 512 tokens) and the return cost (50 µs x 16 decoding) at the typical
    # request: the return once in alpha0 (first token), once in alpha1 (last token)
    assert a == pytest.approx([5000.0 + step_us + 2.0 * 512 + 50.0 * 16, 50.0 * 16, 40.0])
    assert slot_mapping(d, beta, alpha, async_scheduling=False)[0][0] == 5000.0 + 1024 + 800
    back_beta, back_alpha = blis_to_bayesblis({"beta_coeffs": b, "alpha_coeffs": a},
                                              factors=d.feature_factors, tp_slot=blis_tp_slot(d),
                                              async_step=blis_async_step_features(d))
    # read back, alpha0 loses the wait of the step the read-back coefficients price (the
    # slots drop kv_token_layer_s and tie decode to prefill compute: not the original step)
    assert back_alpha["alpha_const_s"] == pytest.approx(
        a[0] - async_wait_us(back_beta, blis_async_step_features(d)) - a[1])
    assert back_alpha["alpha_const_s"] == pytest.approx(5000.0 + 1024, rel=0.1)  # prompt cost kept
    assert back_alpha["alpha_frontend_s"] == pytest.approx(50.0)
    assert back_alpha["alpha_prompt_s"] == 0.0
    assert back_beta["weight_traffic_s"] == pytest.approx(beta[BETA_FEATURES.index("weight_traffic_s")])


def test_to_blis_beta_order():
    beta = {name: float(i + 1) for i, name in enumerate(BETA_FEATURES)}
    out = to_blis_beta(beta)
    assert len(out) == len(BLIS_BETA_ORDER) == 11
    # beta1a, beta2a = 0 (decode compute under the roofline), beta3, beta4, beta5..7 (µs),
    # beta8 = 0, beta1b = beta2b = kv, beta_EP (5 = kv_token_layer_s and 9 = offload_s have
    # no BLIS slot; 7 = tp_sync_s is 0 at TP1; 13 = sampling_s needs the deployment's prices)
    assert out == [1.0, 0.0, 3.0, 6.0, 10.0, 11.0, 12.0, 0.0, 4.0, 4.0, 8.0]
    # at the priced µs per sampled request (beta6) and per step (beta7)
    priced = to_blis_beta(beta, factors={"sampling_s": 0.5, "sampling_s_per_step": 200.0})
    assert (priced[5], priced[6]) == (11.0 + 13.0 * 0.5, 12.0 + 13.0 * 200.0)
    assert to_blis_beta({k: v for k, v in beta.items() if k != "sampling_s"}) == out
    # at TP4 the all-reduce latency (2 x log2(4) rounds per layer) joins the per-layer beta5;
    # the export reads the TP from the configuration key
    assert to_blis_beta(beta, tp=4)[4] == 10.0 + 4 * 7.0
    # BLIS prices raw bytes and FLOPs: the deployment's kernel-priced factors go into their slots
    factored = to_blis_beta(beta, tp=4, factors={"weight_traffic_s": 0.9, "prefill_compute_s": 2.0,
                                                 "decode_compute_s": 2.0, "tp_sync_s": 3.0})
    assert factored[:3] == pytest.approx([2.0, 0.0, 3.0 * 0.9])
    assert factored[4] == pytest.approx(10.0 + 4 * 7.0 * 3.0)
    from bayesblis.model.data import config_key, tp_of

    assert tp_of(config_key("llama-2-70b", "H100-SXM", 4)) == 4
    del beta["tp_comm_s"]
    with pytest.raises(KeyError, match="tp_comm_s"):
        to_blis_beta(beta)
