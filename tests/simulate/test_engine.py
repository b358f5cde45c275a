"""Engine semantics: hand-checked scheduler cases, conservation, causality, features."""

from __future__ import annotations

import numpy as np
import pytest

from bayesblis.simulate.engine import (STATUS_DROPPED, STATUS_OK, EngineConfig, run_engine,
                                       run_engine_arrays, step_features)
from bayesblis.simulate.workload import Workload, generate

from sim_helpers import ALPHA_PRIOR, BETA_PRIOR, beta_vector, unit_step_beta

ZERO_ALPHA = np.zeros(4)


def cfg(**kw):
    """Hand-checked cases schedule synchronously (a queued request joins the next step);
    async scheduling has tests of its own below."""
    base = dict(max_num_batched_tokens=2048, max_num_seqs=128, max_model_len=4096,
                kv_blocks_total=10_000, block_size=16, async_scheduling=False)
    base.update(kw)
    return EngineConfig(**base)


def run(arrival, prompt, output, constants, config, *, group=None, prefix=None, beta=None,
        alpha=ZERO_ALPHA, **kw):
    n = len(arrival)
    group = np.full(n, -1) if group is None else np.asarray(group)
    prefix = np.zeros(n, int) if prefix is None else np.asarray(prefix)
    beta = unit_step_beta() if beta is None else beta
    return run_engine_arrays(np.asarray(arrival, float), np.asarray(prompt), np.asarray(output),
                             group, prefix, config, constants, beta, alpha, record=True, **kw)


def entries_of(res, r):
    e = res.steps.entries
    return e[(e[:, 1] == r) & (e[:, 2] > 0)]


def test_budget_split_chunks_prefill(constants):
    # three decoding requests, then a 10-token prompt under a budget of 8:
    # 3 decodes + a 5-token chunk, then 3 decodes + the remaining 5 tokens
    res = run([0, 0, 0, 0.0015], [2, 2, 2, 10], [10, 10, 10, 2], constants,
              cfg(max_num_batched_tokens=8))
    d = entries_of(res, 3)
    assert d[0, 0] == 3 and d[0, 2] == 5 and d[0, 3] == 0
    assert d[1, 0] == 4 and d[1, 2] == 5 and d[1, 3] == 5
    assert res.first_token_step[3] == 4
    assert res.first_token_s[3] == pytest.approx(0.004)
    for r in range(3):  # the decodes ran in both steps, one token each
        e = res.steps.entries
        rows = e[(e[:, 1] == r) & np.isin(e[:, 0], [3, 4])]
        assert list(rows[:, 2]) == [1, 1]


def test_running_prefill_continues_before_new_admissions(constants):
    # request 0 needs 3 chunks; request 1 arriving meanwhile waits for the budget
    res = run([0, 0.0005], [20, 4], [2, 2], constants, cfg(max_num_batched_tokens=8))
    e0 = entries_of(res, 0)
    assert list(e0[:3, 2]) == [8, 8, 4]
    e1 = entries_of(res, 1)
    assert e1[0, 0] == 3 and e1[0, 2] == 4   # admitted with the leftover budget of step 3


def test_preemption_evicts_last_admitted(constants):
    # 4 blocks of 4 tokens: two requests fit at first, then the later one is preempted
    res = run([0, 0], [4, 4], [8, 8], constants,
              cfg(block_size=4, kv_blocks_total=4, max_num_batched_tokens=64))
    assert res.num_preemptions[1] >= 1
    assert res.num_preemptions[0] == 0
    pre = res.steps.preemptions
    assert pre[0, 1] == 1
    assert np.all(res.status == STATUS_OK)
    # the preempted request resumes by recomputing prompt + generated output
    e1 = entries_of(res, 1)
    restart = e1[1:][e1[1:, 3] == 0]
    assert len(restart) >= 1 and restart[0, 4] > 0 and restart[0, 2] == 4 + restart[0, 4]
    assert res.prefill_computed_tokens[1] == 4 * (1 + res.num_preemptions[1])  # recomputed


def test_preemption_puts_victim_at_front_of_waiting(constants):
    # a third request is waiting when request 1 is preempted: 1 must be resumed first
    res = run([0, 0, 0.0001], [4, 4, 4], [8, 8, 2], constants,
              cfg(block_size=4, kv_blocks_total=4, max_num_batched_tokens=64, max_num_seqs=2))
    assert res.num_preemptions[1] >= 1
    assert res.scheduled_step[2] > res.steps.preemptions[0, 0]
    e1 = entries_of(res, 1)
    resume_step = e1[1:][e1[1:, 3] == 0][0, 0]
    assert resume_step <= res.scheduled_step[2]


def test_prefix_hit_skips_cached_full_blocks(constants):
    res = run([0, 0.01], [100, 100], [2, 2], constants, cfg(), group=[0, 0], prefix=[70, 70])
    assert res.cached_prefix_tokens[0] == 0
    assert res.cached_prefix_tokens[1] == 64            # 4 full blocks of the 70-token prefix
    e1 = entries_of(res, 1)
    assert e1[0, 3] == 64 and e1[0, 2] == 36
    assert res.prefill_computed_tokens[1] == 36


def test_prefix_hit_leaves_one_token_to_compute(constants):
    res = run([0, 0.01], [64, 64], [2, 2], constants, cfg(), group=[0, 0], prefix=[64, 64])
    assert res.cached_prefix_tokens[1] == 48


def test_prefix_caching_off_has_no_hits(constants):
    res = run([0, 0.01], [100, 100], [2, 2], constants, cfg(enable_prefix_caching=False),
              group=[0, 0], prefix=[70, 70])
    assert res.cached_prefix_tokens.sum() == 0


@pytest.mark.parametrize("b_prompt, d_hit", [(20, 64), (160, 0)])
def test_blocks_freed_after_a_prefix_are_reused_after_it(constants, b_prompt, d_hit):
    """vLLM's free-block queue: a finished request's blocks stay in line behind those freed
    before them. A (group 0, 4 prefix blocks + 1 own) finishes, then C (10 own blocks) does;
    B needs 2 or 11 of the 16 blocks, 1 never used: 2 take A's own block, 11 also evict the
    prefix A released before C's blocks, and D (group 0) misses it."""
    res = run([0, 1, 2, 3], [65, 150, b_prompt, 65], [2, 2, 2, 2], constants,
              cfg(kv_blocks_total=16), group=[0, -1, -1, 0], prefix=[64, 0, 0, 64])
    assert res.cached_prefix_tokens[3] == d_hit
    assert np.all(res.status == STATUS_OK)


def test_max_num_seqs_respected(constants):
    res = run(np.zeros(10), np.full(10, 8), np.full(10, 5), constants, cfg(max_num_seqs=3))
    assert res.steps.step_col("running_depth").max() == 3
    assert np.all(res.status == STATUS_OK)


def test_max_model_len_rejection(constants):
    res = run([0, 0, 0], [100, 4000, 50], [10, 200, 10], constants, cfg(max_model_len=4096))
    assert list(res.status) == [STATUS_OK, STATUS_DROPPED, STATUS_OK]
    assert res.drop_reason[1] == 1
    assert np.isnan(res.e2e_s[1])


def test_chunked_prefill_off_waits_for_budget(constants):
    res = run([0, 0], [6, 6], [3, 3], constants,
              cfg(max_num_batched_tokens=8, enable_chunked_prefill=False))
    e1 = entries_of(res, 1)
    assert e1[0, 2] == 6 and e1[0, 3] == 0   # never chunked


def test_idle_skip_and_alpha_timing(constants):
    alpha = np.array([1000.0, 2.0, 50.0, 0.0])  # 1 ms + 2 µs/prompt token; 50 µs per output token
    res = run([0.0, 5.0], [10, 10], [3, 3], constants, cfg(), alpha=alpha)
    q = 0.001 + 10 * 2e-6
    assert res.queued_s[1] == pytest.approx(5.0 + q)
    assert res.scheduled_s[1] == pytest.approx(5.0 + q)       # engine idle: starts at queueing
    assert res.ttft_s[1] == pytest.approx(q + 0.001)           # one 1-ms step
    assert res.e2e_s[1] == pytest.approx(q + 0.003 + 3 * 50e-6)


def test_a_cold_start_holds_every_request_until_the_server_is_up(constants):
    """A fresh server (cold_start_s) schedules nothing before its start-up is over: requests
    of its first seconds wait for it, later ones run as on a warm server."""
    arrival = [0.0, 0.5, 1.5, 10.0]
    warm = run(arrival, [10] * 4, [3] * 4, constants, cfg())
    cold = run(arrival, [10] * 4, [3] * 4, constants, cfg(cold_start_s=2.0))
    assert cold.scheduled_s[:3].min() >= 2.0 > warm.scheduled_s[:3].max()
    np.testing.assert_allclose(cold.ttft_s[:3] - warm.ttft_s[:3],
                               [2.0, 1.5, 0.5], atol=0.01)   # their wait, and a shared step
    assert cold.ttft_s[3] == pytest.approx(warm.ttft_s[3])
    with pytest.raises(ValueError, match="cold_start_s"):
        cfg(cold_start_s=-1.0)


def test_step_time_equals_beta_features(constants, deployment):
    from bayesblis.features.beta import beta_features

    w = generate([{"rate": 30, "duration": 5}], {"dist": "uniform", "min": 50, "max": 900},
                 {"dist": "uniform", "min": 1, "max": 60}, arrival="poisson",
                 prefix={"num_groups": 3, "system_prompt_len": 100}, seed=3)
    beta = beta_vector(BETA_PRIOR)
    res = run_engine(w, cfg(max_num_batched_tokens=512, kv_blocks_total=400), constants, beta,
                     np.array(list(ALPHA_PRIOR.values())), record=True)
    agg = res.steps.aggregates
    names = ("prefill_tokens", "prefill_context_tokens", "prefill_attention_pairs",
             "num_prefill_reqs", "num_decode_reqs", "decode_context_tokens", "offload_blocks")
    f = beta_features(deployment, **{n: agg[:, i] for i, n in enumerate(names)})
    np.testing.assert_allclose(res.steps.end_s - res.steps.start_s, f @ beta, rtol=1e-9)


@pytest.mark.parametrize("model,gpu,tp", [("llama-2-7b", "H100-SXM", 1),
                                          ("llama-2-70b", "H100-SXM", 4),
                                          ("mixtral-8x7b", "H100-SXM", 2),
                                          ("qwen3-30b-a3b", "H100-SXM", 1)])
def test_compiled_features_match_beta_features(model, gpu, tp):
    from bayesblis.features.beta import AGGREGATES, beta_features
    from bayesblis.features.physics import Deployment
    from bayesblis.simulate.engine import deployment_constants

    d = Deployment(model, gpu, tp=tp)
    rng = np.random.default_rng(0)
    n = 200
    # half the steps small enough to run CUDA-graph padded (the MoE term's padding)
    k = np.where(np.arange(n) % 2, rng.integers(0, 2048, n), rng.integers(0, 40, n)).astype(float)
    c = rng.integers(0, 4000, n).astype(float)
    agg = {"prefill_tokens": k, "prefill_context_tokens": c,
           "prefill_attention_pairs": k * c + k * (k + 1) / 2,
           "num_prefill_reqs": rng.integers(0, 5, n).astype(float),
           "num_decode_reqs": rng.integers(0, 128, n).astype(float),
           "decode_context_tokens": rng.integers(0, 400_000, n).astype(float),
           "offload_blocks": rng.integers(0, 50, n).astype(float)}
    expected = beta_features(d, **agg)
    got = step_features(deployment_constants(d), {a: agg[a] for a in AGGREGATES})
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-18)


def _random_workload(seed, n_groups=3):
    return generate([{"rate": 40, "duration": 3}, {"rate": 80, "duration": 2}],
                    {"dist": "lognormal", "mean": 300, "std": 250, "max": 1500},
                    {"dist": "uniform", "min": 1, "max": 120}, arrival="poisson",
                    prefix={"num_groups": n_groups, "system_prompt_len": {"dist": "uniform", "min": 0, "max": 200}},
                    seed=seed)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("offload", [0, 40])
def test_conservation_and_causality(constants, seed, offload):
    w = _random_workload(seed)
    config = cfg(max_num_batched_tokens=256, max_num_seqs=16, kv_blocks_total=160,
                 max_model_len=1600, cpu_offload_blocks=offload)
    res = run_engine(w, config, constants, beta_vector(BETA_PRIOR),
                     np.array(list(ALPHA_PRIOR.values())), noise_sigma=0.2, noise_nu=4,
                     seed=seed, record=True)
    ok = res.status == STATUS_OK
    assert np.all(ok | (res.status == STATUS_DROPPED))
    assert np.all(ok == (w.prompt_tokens + w.output_tokens <= 1600))
    assert res.num_preemptions.sum() > 0          # the tiny cache forces preemptions
    # causality
    o = ok
    assert np.all(w.arrival_s[o] <= res.queued_s[o])
    assert np.all(res.queued_s[o] <= res.scheduled_s[o])
    assert np.all(res.scheduled_s[o] < res.first_token_s[o])
    assert np.all(res.first_token_s[o] <= res.finish_s[o])
    assert np.all(res.ttft_s[o] < res.e2e_s[o])
    st = res.steps
    assert np.all(st.end_s > st.start_s)
    assert np.all(st.start_s[1:] >= st.end_s[:-1] - 1e-12)     # steps never overlap
    assert st.start_s[0] >= res.queued_s.min()
    assert np.all(np.diff(st.step_col("step_id")) == 1)
    # per request: tokens computed continue, or restart after a preemption from a prefix hit
    e = st.entries[st.entries[:, 2] > 0]
    order = np.lexsort((e[:, 0], e[:, 1]))
    e = e[order]
    for r in np.nonzero(ok)[0]:
        er = e[e[:, 1] == r]
        pre_steps = list(st.preemptions[st.preemptions[:, 1] == r, 0])
        assert len(pre_steps) == res.num_preemptions[r]
        done = -1
        for row in er:
            step, before, k = row[0], row[3], row[2]
            restart = done < 0 or (pre_steps and step > pre_steps[0])
            if restart:   # (re)admission: starts from a prefix-cache hit or 0
                if done >= 0:
                    pre_steps.pop(0)
                assert before % 16 == 0 and before <= w.prefix_tokens[r]
            else:
                assert before == done
            done = before + k
        assert not pre_steps
        assert done == w.prompt_tokens[r] + w.output_tokens[r] - 1   # every output token made
        assert res.finish_step[r] == er[-1, 0]
    # KV never over-committed; running never above max_num_seqs
    assert st.step_col("kv_used_blocks").max() <= 160
    assert st.step_col("running_depth").max() <= 16
    if offload:
        assert st.aggregates[:, 6].sum() > 0


def test_noise_seeded_and_sigma_zero_deterministic(constants):
    w = _random_workload(5)
    config = cfg(max_num_batched_tokens=512, kv_blocks_total=2000)
    beta, alpha = beta_vector(BETA_PRIOR), np.array(list(ALPHA_PRIOR.values()))
    a = run_engine(w, config, constants, beta, alpha, noise_sigma=0.3, noise_nu=3, seed=7)
    b = run_engine(w, config, constants, beta, alpha, noise_sigma=0.3, noise_nu=3, seed=7)
    c = run_engine(w, config, constants, beta, alpha, noise_sigma=0.3, noise_nu=3, seed=8)
    np.testing.assert_array_equal(a.e2e_s, b.e2e_s)
    assert not np.allclose(a.e2e_s, c.e2e_s)
    z1 = run_engine(w, config, constants, beta, alpha, seed=1)
    z2 = run_engine(w, config, constants, beta, alpha, seed=2)
    np.testing.assert_array_equal(z1.e2e_s, z2.e2e_s)
    assert z1.busy_s == z2.busy_s


def test_record_mode_matches_fast_mode(constants):
    w = _random_workload(9)
    config = cfg(max_num_batched_tokens=256, max_num_seqs=16, kv_blocks_total=160, max_model_len=1600)
    beta, alpha = beta_vector(BETA_PRIOR), np.array(list(ALPHA_PRIOR.values()))
    fast = run_engine(w, config, constants, beta, alpha, noise_sigma=0.1, seed=3)
    rec = run_engine(w, config, constants, beta, alpha, noise_sigma=0.1, seed=3, record=True)
    np.testing.assert_array_equal(fast.e2e_s, rec.e2e_s)
    assert rec.steps.start_s.shape[0] == rec.n_steps


def test_workload_validation():
    with pytest.raises(ValueError):
        Workload([0.0, 1.0], [10, 0], [1, 1])
    with pytest.raises(ValueError):
        Workload([1.0, 0.0], [10, 10], [1, 1])


def test_ttft_parts_by_hand(constants):
    # 1 ms steps, a 2 ms arrival -> queued delay, budget 8: request 0 (10 prompt tokens)
    # prefills in steps 1-2 (8 + 2 tokens); request 1 (4 tokens) waits one step for the
    # budget, then prefills in step 2 beside it. Both first tokens at 4 ms.
    from bayesblis.simulate.results import TTFT_PARTS, ttft_parts

    res = run([0, 0], [10, 4], [2, 2], constants, cfg(max_num_batched_tokens=8),
              alpha=np.array([2000.0, 0.0, 0.0, 0.0]))
    parts = ttft_parts(np.zeros(2), res.queued_s, res.scheduled_s, res.first_token_s, res.ttft_s)
    assert list(parts) == list(TTFT_PARTS)
    np.testing.assert_allclose(parts["api_s"], [0.002, 0.002])
    np.testing.assert_allclose(parts["queue_s"], [0.0, 0.001], atol=1e-12)
    np.testing.assert_allclose(parts["prefill_s"], [0.002, 0.001])
    np.testing.assert_allclose(parts["return_s"], [0.0, 0.0], atol=1e-12)
    np.testing.assert_allclose(sum(parts.values()), res.ttft_s)


def test_async_scheduling_admits_a_busy_engines_arrival_one_step_later(constants):
    # request 0 decodes alone in unit steps; request 1 is queued during step 2. Without
    # async scheduling it joins step 3; with it, step 3 was planned when step 2 started
    # (before request 1 was queued), so it joins step 4: one step more to its first token.
    arrival, prompt, output = [0.0, 0.0], [4, 4], [10, 2]
    base = dict(constants=constants, group=None, prefix=None)
    sync = run(arrival, prompt, output, config=cfg(), **base)
    step1 = sync.steps.end_s[0]
    t1 = step1 + 0.5 * (sync.steps.end_s[1] - step1)  # inside step 2
    arrival = [0.0, t1]
    sync = run(arrival, prompt, output, config=cfg(), **base)
    lag = run(arrival, prompt, output, config=cfg(async_scheduling=True), **base)
    assert sync.scheduled_step[1] == 3 and lag.scheduled_step[1] == 4
    step_s = sync.steps.end_s[2] - sync.steps.start_s[2]
    assert lag.ttft_s[1] == pytest.approx(sync.ttft_s[1] + step_s, rel=1e-9)


def test_async_scheduling_does_not_delay_an_idle_engine(constants):
    # one request at a time: the engine is idle when each arrives, so both schedule at once
    arrival, prompt, output = [0.0, 5.0], [4, 4], [3, 3]
    sync = run(arrival, prompt, output, constants, cfg())
    lag = run(arrival, prompt, output, constants, cfg(async_scheduling=True))
    np.testing.assert_allclose(lag.ttft_s, sync.ttft_s)
    np.testing.assert_array_equal(lag.scheduled_step, sync.scheduled_step)


def test_frontend_return_cost_follows_the_requests_decoding(constants):
    # 1 ms steps. Request 0 (4 prompt tokens, 10 outputs) decodes alone until request 1
    # arrives at 5.0005 s; an idle engine admits it at once (its prefill step ends at 5.002,
    # wait: the engine is busy, see below). alpha_frontend 100 µs per request decoding.
    base = run([0.0, 0.0035], [4, 4], [10, 3], constants, cfg(), alpha=np.zeros(4))
    res = run([0.0, 0.0035], [4, 4], [10, 3], constants, cfg(),
              alpha=np.array([0.0, 0.0, 0.0, 100.0]))
    from bayesblis.features.alpha import decoding_at

    # engine times do not move; the client sees each token behind the others decoding
    np.testing.assert_allclose(res.first_token_s, base.first_token_s)
    np.testing.assert_allclose(res.finish_s, base.finish_s)
    behind_first = decoding_at(base.first_token_s, base.finish_s, base.first_token_s)
    behind_last = decoding_at(base.first_token_s, base.finish_s, base.finish_s)
    assert behind_first[0] == 0 and behind_first[1] == 1   # request 0 was decoding
    assert behind_last[0] == 1 and behind_last[1] == 2     # itself, and request 0
    np.testing.assert_allclose(res.ttft_s - base.ttft_s, 100e-6 * behind_first)
    np.testing.assert_allclose(res.e2e_s - base.e2e_s, 100e-6 * behind_last)
    from bayesblis.simulate.results import ttft_parts

    parts = ttft_parts(np.array([0.0, 0.0035]), res.queued_s, res.scheduled_s,
                       res.first_token_s, res.ttft_s)
    np.testing.assert_allclose(parts["return_s"], [0.0, 100e-6])
