"""The client-side window likelihood, checked where the truth is known (simulated runs)
and on a slice of the real measured runs."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bayesblis.client_windows import (_active_integrals, client_windows, prefill_aggregates,
                                      queueing_requests, requests_in_error_stages)
from bayesblis.features.alpha import ALPHA_FEATURES
from bayesblis.features.beta import BETA_FEATURES
from bayesblis.features.physics import Deployment
from bayesblis.model.priors import ALPHA_PRIORS, BETA_PRIORS
from bayesblis.simulate.engine import EngineConfig, deployment_constants, run_engine
from bayesblis.simulate.workload import generate

REAL = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "real" / "h100-inference-perf"
BETA = np.array([BETA_PRIORS[f]["median"] for f in BETA_FEATURES])
ALPHA = np.array([ALPHA_PRIORS[f]["median"] for f in ALPHA_FEATURES])


def test_active_integrals_match_brute_force():
    rng = np.random.default_rng(0)
    s = np.sort(rng.uniform(0, 10, 40))
    e = s + rng.uniform(0.5, 2, 40)
    slope, icpt = rng.uniform(0, 3, 40), rng.uniform(0, 5, 40)
    n_int, c_int = _active_integrals(s, e, slope, icpt, s, e)
    t = np.linspace(0, 13, 260001)
    dt = t[1] - t[0]
    active = (t[None, :] > s[:, None]) & (t[None, :] <= e[:, None])
    lin = active * (icpt[:, None] + slope[:, None] * t[None, :])
    for i in range(0, 40, 7):
        inside = (t > s[i]) & (t <= e[i])
        assert n_int[i] == pytest.approx(active[:, inside].sum() * dt, rel=2e-3)
        assert c_int[i] == pytest.approx(lin[:, inside].sum() * dt, rel=2e-3)


def test_attention_pairs_do_not_depend_on_chunking():
    one = prefill_aggregates([1000], [96], [4096])
    many = prefill_aggregates([1000], [96], [128])
    assert one["prefill_attention_pairs"][0] == many["prefill_attention_pairs"][0]
    assert many["num_prefill_reqs"][0] == np.ceil(904 / 128)
    assert one["prefill_context_tokens"][0] == 96


@pytest.mark.parametrize("async_scheduling", [True, False])
def test_windows_recover_simulated_truth(async_scheduling):
    """Simulate a run with known coefficients and no noise, keep only what a client sees
    (arrival, TTFT, E2E, tokens), and check that the windows explain it with the truth,
    with and without async scheduling; windows that assume the other scheduling misread
    the TTFTs by a step."""
    dep = Deployment("llama-2-7b", "H100", tp=1)
    w = generate([{"rate": 6.0, "duration": 120.0}], {"dist": "normal", "mean": 600, "std": 60},
                 {"dist": "normal", "mean": 200, "std": 30}, seed=4)
    cfg = EngineConfig(max_num_batched_tokens=2048, max_num_seqs=128, max_model_len=4096,
                       kv_blocks_total=7000, enable_prefix_caching=False,
                       async_scheduling=async_scheduling)
    run = run_engine(w, cfg, deployment_constants(dep), BETA, ALPHA)
    req = pd.DataFrame({"arrival_s": w.arrival_s, "ttft_s": run.ttft_s, "e2e_s": run.e2e_s,
                        "prompt_tokens": w.prompt_tokens, "output_tokens": w.output_tokens,
                        "has_error": False, "stage": 0})

    def ttft_ratio(assume_async):
        obs = client_windows(req, dep, max_num_batched_tokens=2048, config="c", min_gap_s=0.0,
                             async_scheduling=assume_async)
        pred = obs.filter(like="f_").to_numpy() @ BETA + obs.filter(like="a_").to_numpy() @ ALPHA
        ratio = pred / obs["y_s"].to_numpy()
        assert abs(np.median(ratio[obs["kind"] == "client_decode_window"]) - 1) < 0.03
        return np.median(ratio[obs["kind"] == "client_ttft"])

    assert abs(ttft_ratio(async_scheduling) - 1) < 0.15
    wrong = ttft_ratio(not async_scheduling)
    assert (wrong < 0.85) if async_scheduling else (wrong > 1.15)


def test_ttft_phase_spread_matches_the_simulated_server():
    """Without step noise the simulator's TTFTs still scatter about their windows' means:
    where each request landed in the in-flight step. The windows record that spread
    (`phase_var`: 1/12 of the in-flight step squared, in squared average steps of the
    window), idle arrivals none, and `ttft_phase_share` gives the scatter's size in the
    likelihood's units (n x relative variance), so the simulator, which draws the phase
    itself, can take it out of its step noise."""
    from bayesblis.client_windows import PHASE_VARIANCE, ttft_phase_share

    dep = Deployment("llama-2-7b", "H100", tp=1)
    w = generate([{"rate": 6.0, "duration": 120.0}], {"dist": "normal", "mean": 600, "std": 60},
                 {"dist": "normal", "mean": 200, "std": 30}, seed=4)
    cfg = EngineConfig(max_num_batched_tokens=2048, max_num_seqs=128, max_model_len=4096,
                       kv_blocks_total=7000, enable_prefix_caching=False)
    run = run_engine(w, cfg, deployment_constants(dep), BETA, ALPHA)
    req = pd.DataFrame({"arrival_s": w.arrival_s, "ttft_s": run.ttft_s, "e2e_s": run.e2e_s,
                        "prompt_tokens": w.prompt_tokens, "output_tokens": w.output_tokens,
                        "has_error": False, "stage": 0})
    obs = client_windows(req, dep, max_num_batched_tokens=2048, config="c", min_gap_s=0.0)
    ttft = obs[obs["kind"] == "client_ttft"]
    # uncached 600-token prompts: the prefill step is longer than the in-flight decode step
    assert (ttft["phase_var"] > 0).mean() > 0.8 and (ttft["phase_var"] < PHASE_VARIANCE).all()
    assert obs.loc[obs["kind"] == "client_decode_window", "phase_var"].isna().all()
    steps = obs.filter(like="f_").to_numpy() @ BETA
    mean = steps + obs.filter(like="a_").to_numpy() @ ALPHA
    busy = (obs["phase_var"] > 0).to_numpy()
    relative = obs["y_s"].to_numpy()[busy] / mean[busy] - 1
    # a uniform phase: the median of its squared deviation is 3/4 of its variance
    scatter = np.median(obs["n_steps"].to_numpy()[busy] * relative ** 2) / 0.75
    share = ttft_phase_share(obs, steps, mean)
    assert 0.75 * share < scatter < 1.33 * share, (scatter, share)
    assert ttft_phase_share(obs.drop(columns="phase_var"), steps, mean) == 0.0


def test_ttft_windows_count_the_requests_decoding_at_the_first_token():
    # three overlapping requests: B's first token comes while A decodes, C's while A and B do
    dep = Deployment("llama-2-7b", "H100", tp=1)
    req = pd.DataFrame({"arrival_s": [0.0, 0.5, 1.0], "ttft_s": [0.05, 0.05, 0.05],
                        "e2e_s": [3.0, 3.0, 0.5], "prompt_tokens": [100, 100, 100],
                        "output_tokens": [100, 100, 20], "has_error": False, "stage": 0})
    obs = client_windows(req, dep, max_num_batched_tokens=2048, config="c", min_gap_s=0.0)
    ttft = obs[obs["kind"] == "client_ttft"].sort_values("request_id")
    np.testing.assert_allclose(ttft["a_alpha_frontend_s"], [0.0, 1e-6, 2e-6])
    assert (obs.loc[obs["kind"] == "client_decode_window", "a_alpha_frontend_s"] == 0).all()


def test_queueing_stages_are_recognised():
    req = pd.DataFrame({"ttft_s": [0.05] * 4 + [5.0] * 4, "e2e_s": [2.0] * 4 + [8.0] * 4,
                        "output_tokens": [200] * 8, "stage": [0] * 4 + [1] * 4})
    assert list(queueing_requests(req)) == [4, 5, 6, 7]


def test_stages_with_client_errors_give_no_windows():
    """Timed-out requests still loaded the server but left no timings: a stage with more
    than 1% of them would have too small reconstructed batches, so it gives no window."""
    rng = np.random.default_rng(1)
    n = 60
    req = pd.DataFrame({"arrival_s": np.arange(n) * 0.2, "ttft_s": 0.03, "e2e_s": 2.0,
                        "prompt_tokens": 500, "output_tokens": rng.integers(150, 250, n),
                        "has_error": False, "stage": np.repeat([0, 1], n // 2)})
    req.loc[40:41, ["has_error", "ttft_s", "e2e_s"]] = [True, np.nan, np.nan]
    assert list(requests_in_error_stages(req)) == list(range(30, 60))  # 2 of 30 failed
    dep = Deployment("llama-2-7b", "H100", tp=1)
    obs = client_windows(req, dep, max_num_batched_tokens=2048, config="c", min_gap_s=0.0)
    assert len(obs) and obs["request_id"].max() < 30
    req["has_error"] = True
    assert client_windows(req, dep, max_num_batched_tokens=2048, config="c").empty


@pytest.mark.skipif(not REAL.exists(), reason="shared real data not present")
def test_real_slice_windows_and_miscounted_outputs():
    from bayesblis.client_windows import client_observations
    from bayesblis.io.dataset import ingest

    source = ingest([REAL / "20260217-155451-llama-2-7b-tp1-codegen"]).sources[0]
    source.tables["requests"] = source.tables["requests"].iloc[:600]
    obs = client_observations(source, Deployment("llama-2-7b", "H100", tp=1))
    assert set(obs["kind"]) == {"client_decode_window", "client_ttft"}
    # prior-median coefficients explain the real windows within ~30% (physics features),
    # TTFTs too: 2.5 steps (async scheduling) and a prefill of the few tokens a repeated
    # prompt leaves uncached (io/prompt_reuse.py; priced as 480 fresh tokens: 1.41x)
    pred = obs.filter(like="f_").to_numpy() @ BETA + obs.filter(like="a_").to_numpy() @ ALPHA
    ratio = pred / obs["y_s"]
    for kind in ("client_decode_window", "client_ttft"):
        assert 0.7 < np.median(ratio[(obs["kind"] == kind).to_numpy()]) < 1.3, kind
