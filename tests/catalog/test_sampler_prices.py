"""vLLM's sampler priced per step (`catalog.sampler_prices`) and carried by deployments."""

import numpy as np
import pytest

from bayesblis.catalog import sampler_prices as sp
from bayesblis.features.beta import BETA_FEATURES, beta_features
from bayesblis.features.physics import Deployment, DeploymentError

SAMPLING = BETA_FEATURES.index("sampling_s")


def test_sampling_defaults_pick_the_path():
    assert sp.sampler_path({"temperature": 0.6, "top_p": 0.9}) == sp.SORT
    assert sp.sampler_path({"top_k": 20}) == sp.SORT
    assert sp.sampler_path({"temperature": 0.7}) == sp.PLAIN == sp.sampler_path({})
    assert sp.sampler_path({"temperature": 0.0, "top_p": 0.9}) == sp.GREEDY


def test_the_sort_is_the_chord_of_the_h100_power_curve_over_serving_rows():
    for vocab, (one_ms, four_ms) in sp.H100_SORT_MS.items():
        gamma = np.log(four_ms / one_ms) / np.log(4)
        step_s, row_s = sp.sort_line(vocab)
        for rows in sp.SERVING_ROWS:              # the chord meets the curve at both ends
            assert step_s + rows * row_s == pytest.approx(one_ms * rows ** gamma * 1e-3, rel=1e-9)
    # 131k tokens: about 0.29 ms a step and 32 µs a request; 32k: 0.19 ms and 7 µs
    assert np.array(sp.sort_line(131072)) * [1e3, 1e6] == pytest.approx([0.291, 32.3], abs=0.03)
    assert np.array(sp.sort_line(32768)) * [1e3, 1e6] == pytest.approx([0.190, 7.2], abs=0.03)
    # linear in the vocabulary between and beyond the two measured ones
    mid = np.add(sp.sort_line(32768), sp.sort_line(131072)) / 2
    assert sp.sort_line((32768 + 131072) // 2) == pytest.approx(tuple(mid))
    assert sp.sort_line(202048)[1] > sp.sort_line(151936)[1] > sp.sort_line(131072)[1]


def test_the_sort_costs_the_same_on_every_gpu_and_plain_paths_scale_with_bandwidth(monkeypatch):
    h100 = sp.step_prices(128256, sp.SORT, sp.reference_bandwidth())
    assert h100 == pytest.approx(sp.sort_line(128256))
    assert sp.step_prices(128256, sp.SORT, sp.reference_bandwidth() / 2) == pytest.approx(h100)
    monkeypatch.setattr(sp, "SORT_SCALES_WITH_BANDWIDTH", True)   # model versions 15-16
    assert sp.step_prices(128256, sp.SORT, sp.reference_bandwidth() / 2) == pytest.approx(
        tuple(2 * np.array(h100)))
    assert sp.step_prices(131072, sp.PLAIN, 3.35e12) == pytest.approx((0.0, 48 * 131072 / 3.35e12))
    assert sp.step_prices(131072, sp.GREEDY, 3.35e12) == pytest.approx((0.0, 4 * 131072 / 3.35e12))
    with pytest.raises(ValueError, match="sampler path"):
        sp.step_prices(131072, "beam", 3.35e12)


def test_a_deployment_prices_its_sampler_per_step_and_per_request():
    sort = Deployment("llama-3.1-8b", "H100-SXM", sampler="sort")
    plain = Deployment("llama-3.1-8b", "H100-SXM")
    assert plain.sampler == sp.PLAIN and sort.sampler_step_s == pytest.approx(sp.sort_line(128256)[0])

    def feature(d, decodes, prefills=0):
        return beta_features(d, prefill_tokens=100 * prefills, prefill_context_tokens=0,
                             prefill_attention_pairs=0, num_prefill_reqs=prefills,
                             num_decode_reqs=decodes, decode_context_tokens=decodes * 800,
                             offload_blocks=0)[0, SAMPLING]

    assert feature(sort, 20) == pytest.approx(sort.sampler_step_s + 20 * sort.sampler_row_s)
    assert feature(sort, 20, prefills=2) == pytest.approx(sort.sampler_step_s + 22 * sort.sampler_row_s)
    assert feature(plain, 20) == pytest.approx(20 * 48 * 128256 / 3.35e12)
    # BLIS's per-request and per-step slots get the two parts in µs
    assert sort.feature_factors["sampling_s"] == pytest.approx(sort.sampler_row_s * 1e6)
    assert sort.feature_factors["sampling_s_per_step"] == pytest.approx(sort.sampler_step_s * 1e6)
    with pytest.raises(DeploymentError, match="sampler must be one of"):
        Deployment("llama-3.1-8b", "H100-SXM", sampler="beam")
