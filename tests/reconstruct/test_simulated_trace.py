"""End to end: simulate with known beta (no noise), write OTEL traces, read, reconstruct.

The simulator charges every step beta . features(aggregates); with noise 0 and journey
sampling 1.0 the reconstructed aggregates equal the engine's and every step-gap window's
y equals its summed features . beta (to the nanosecond rounding of the trace clock).
"""

from __future__ import annotations

import numpy as np
import pytest

import bayesblis.simulate.trace_writer  # noqa: F401
import bayesblis.simulate.engine as engine
import bayesblis.simulate.workload as workload

from bayesblis.features.beta import AGGREGATES, BETA_FEATURES  # noqa: E402
from bayesblis.io.otel import read_otel  # noqa: E402
from bayesblis.reconstruct import journey_batches, otel_observations  # noqa: E402

BETA = {"prefill_compute_s": 2.2, "decode_compute_s": 1.0, "weight_traffic_s": 1.15,
        "kv_traffic_s": 1.4, "kv_token_layer_s": 0.2, "tp_comm_s": 1.1, "tp_sync_s": 8.0, "ep_comm_s": 1.0, "offload_s": 1.0,
        "layer_overhead_s": 30.0, "request_overhead_s": 4.0, "step_overhead_s": 100.0,
        "sampling_s": 1.0, "gemm_fixed_s": 1.0}
ALPHA_US = np.array([2000.0, 0.5, 20.0, 25.0])


@pytest.fixture(scope="module")
def simulated(deployment, tmp_path_factory):
    from bayesblis.simulate.trace_writer import write_traces

    w = workload.generate([{"rate": 15, "duration": 6}], {"dist": "uniform", "min": 20, "max": 700},
                          {"dist": "uniform", "min": 1, "max": 60}, arrival="poisson",
                          prefix={"num_groups": 3, "system_prompt_len": 64}, seed=5)
    cfg = engine.EngineConfig(max_num_batched_tokens=256, max_num_seqs=32, max_model_len=4096,
                              kv_blocks_total=5000, block_size=16)
    beta = np.array([BETA[f] for f in BETA_FEATURES])
    run = engine.run_engine(w, cfg, engine.deployment_constants(deployment), beta, ALPHA_US,
                            noise_sigma=0.0, seed=1, record=True)
    out = tmp_path_factory.mktemp("simtrace")
    paths = write_traces(run, w, cfg, out, step_sample_rate=0.2, rich_subsample_rate=0.2, seed=2,
                         kv_events=False)
    return run, cfg, beta, read_otel(paths["traces"])


def test_reconstruction_equals_engine_batches(simulated):
    run, cfg, _, trace = simulated
    assert run.num_preemptions.sum() == 0
    b = journey_batches(trace, cfg.max_num_batched_tokens, snapshots="check")
    sid = run.steps.step_col("step_id")
    rec = b.table.loc[sid, list(AGGREGATES)].to_numpy(float)
    np.testing.assert_allclose(rec, run.steps.aggregates, rtol=1e-12, atol=1e-9)
    assert b.summary["n_multi_step_chunks"] > 0
    assert b.summary["n_summary_mismatch"] == 0 and b.summary["n_snapshot_mismatch"] == 0


def test_step_gap_windows_equal_features_dot_beta(simulated, deployment):
    run, cfg, beta, trace = simulated
    obs, summary = otel_observations(trace, deployment, cfg.max_num_batched_tokens)
    gaps = obs[obs["kind"] == "step_gap"]
    assert len(gaps) > 20
    pred = gaps[[f"f_{f}" for f in BETA_FEATURES]].to_numpy(float) @ beta
    np.testing.assert_allclose(pred, gaps["y_s"].to_numpy(float), rtol=1e-6)
    dec = obs[obs["kind"] == "decode_window"]
    pred = dec[[f"f_{f}" for f in BETA_FEATURES]].to_numpy(float) @ beta
    np.testing.assert_allclose(pred, dec["y_s"].to_numpy(float), rtol=1e-6)
    # alpha windows: queued - arrived = (alpha_const + alpha_prompt x prompt) µs
    a2q = obs[obs["kind"] == "arrival_to_queue"]
    pred = a2q[["a_alpha_const_s", "a_alpha_prompt_s"]].to_numpy(float) @ ALPHA_US[:2]
    np.testing.assert_allclose(pred, a2q["y_s"].to_numpy(float), rtol=1e-5)
    post = obs[obs["kind"] == "post_decode"]
    # departed - finished = alpha_output x output + alpha_frontend x requests decoding then
    assert (post["a_alpha_frontend_s"] > 0).any()
    pred = post[["a_alpha_output_s", "a_alpha_frontend_s"]].to_numpy(float) @ ALPHA_US[2:]
    np.testing.assert_allclose(pred, post["y_s"].to_numpy(float), rtol=1e-5)


def test_preemption_by_recompute_is_reconstructed_exactly(deployment, tmp_path):
    """Small KV cache, no prefix caching: many PREEMPTED/RESUME journeys. A RESUME after
    the first token recomputes prompt + generated tokens; the reconstruction matches."""
    from bayesblis.simulate.trace_writer import write_traces

    w = workload.generate([{"rate": 20, "duration": 4}], {"dist": "uniform", "min": 20, "max": 500},
                          {"dist": "uniform", "min": 1, "max": 150}, arrival="poisson", seed=11)
    cfg = engine.EngineConfig(max_num_batched_tokens=128, max_num_seqs=64, max_model_len=4096,
                              kv_blocks_total=200, block_size=16, enable_prefix_caching=False)
    beta = np.array([BETA[f] for f in BETA_FEATURES])
    run = engine.run_engine(w, cfg, engine.deployment_constants(deployment), beta, ALPHA_US,
                            noise_sigma=0.0, seed=1, record=True)
    assert run.num_preemptions.sum() > 20
    paths = write_traces(run, w, cfg, tmp_path, step_sample_rate=0.1, rich_subsample_rate=0.0,
                         seed=2, kv_events=False)
    trace = read_otel(paths["traces"])
    b = journey_batches(trace, cfg.max_num_batched_tokens)
    sid = run.steps.step_col("step_id")
    rec = b.table.loc[sid, list(AGGREGATES)].to_numpy(float)
    np.testing.assert_allclose(rec, run.steps.aggregates, rtol=1e-12, atol=1e-9)
    obs, _ = otel_observations(trace, deployment, cfg.max_num_batched_tokens, kinds=["step_gap"])
    pred = obs[[f"f_{f}" for f in BETA_FEATURES]].to_numpy(float) @ beta
    np.testing.assert_allclose(pred, obs["y_s"].to_numpy(float), rtol=1e-6)
