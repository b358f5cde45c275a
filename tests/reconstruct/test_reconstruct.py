"""Teacher-forced batch reconstruction and window observations.

The bundled sample (bayesblis/data/samples/otel-run, max_num_batched_tokens 64) read by
hand from its journey events:

  R0 prompt 102: SCHEDULED@1, FIRST_TOKEN@2, FINISHED@5   (chunks 64 + 38, decodes 3..5)
  R1 prompt  32: SCHEDULED@3, FIRST_TOKEN@3, FINISHED@5   (chunk 32 @3, decodes 4..5)
  R2 prompt  44: SCHEDULED@5, FIRST_TOKEN@5, FINISHED@9
  R3 prompt 149: SCHEDULED@8, FIRST_TOKEN@10, FINISHED@13 (63 + 63 + 23, R2 decodes at 8, 9)
  R4 prompt 131: SCHEDULED@10, FIRST_TOKEN@12, FINISHED@17 (41 @10, 63 @11, 27 @12)
  R5 prompt  43: SCHEDULED@12, FIRST_TOKEN@13, PREEMPTED@15 (decode.done 2), RESUME@17, FINISHED@21
  R6 prompt  51: SCHEDULED@14, FIRST_TOKEN@14, FINISHED@15 (aborted)
  R7 prompt  35: SCHEDULED@16, FIRST_TOKEN@16, FINISHED@22
Decode context = tokens already in the KV cache = prompt + outputs so far - 1.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bayesblis.features.beta import AGGREGATES, BETA_FEATURES, beta_feature_matrix
from bayesblis.reconstruct import (OBS_COLUMNS, STEP_COLUMNS, alpha_windows, journey_batches, journey_decode_windows,
                                   journey_ttft_windows, otel_observations, snapshot_aggregates,
                                   step_gap_windows)

from recon_helpers import AGG, schedule, true_aggregates, write_trace

# step -> (prefill_tokens, prefill_context, pairs, n_prefill, n_decode, decode_context)
BY_HAND = {
    1: (64, 0, 64 * 65 / 2, 1, 0, 0),
    2: (38, 64, 38 * 64 + 38 * 39 / 2, 1, 0, 0),
    3: (32, 0, 32 * 33 / 2, 1, 1, 102),                       # R1 chunk, R0 decode
    4: (0, 0, 0, 0, 2, 103 + 32),
    5: (44, 0, 44 * 45 / 2, 1, 2, 104 + 33),
    8: (63, 0, 63 * 64 / 2, 1, 1, 46),                        # R3 first chunk, R2 decode
    10: (23 + 41, 126, 23 * 126 + 23 * 24 / 2 + 41 * 42 / 2, 2, 0, 0),
    12: (27 + 36, 104, 27 * 104 + 27 * 28 / 2 + 36 * 37 / 2, 2, 1, 150),
    13: (7, 36, 7 * 36 + 7 * 8 / 2, 1, 2, 151 + 131),
    15: (0, 0, 0, 0, 2, 131 + 2 + 51),                         # R4, R6 decode; R5 preempted
    17: (45, 0, 45 * 46 / 2, 1, 2, 135 + 35),                  # R5 recomputes 43 + 2 tokens
    18: (0, 0, 0, 0, 2, 45 + 36),
    22: (0, 0, 0, 0, 1, 40),
}


@pytest.mark.parametrize("step", sorted(BY_HAND))
def test_sample_aggregates_by_hand(sample_batches, step):
    row = sample_batches.table.loc[step, list(AGGREGATES[:6])].to_numpy(float)
    np.testing.assert_allclose(row, BY_HAND[step])
    assert sample_batches.table.loc[step, "offload_blocks"] == 0


def test_sample_table_shape_and_flags(sample_batches):
    t = sample_batches.table
    assert list(t.index) == list(range(1, 23)) and t.index.name == "step_id"
    assert list(t.columns[:7]) == list(AGGREGATES) and tuple(t.columns) == STEP_COLUMNS
    assert not t["empty"].any() and not t["uncertain"].any()
    assert t["num_traced_reqs"].loc[12] == 3
    # R5's resume recompute is an estimate (prefix hits on resume are not traced)
    assert not t.loc[17, "exact"] and t.drop(index=17)["exact"].all()
    assert t["sampled"].sum() == 7 and t["summary_match"].all()
    s = sample_batches.summary
    assert s["n_summary_mismatch"] == 0 and s["n_snapshot_steps"] == 3 and s["n_snapshot_mismatch"] == 0
    assert s["n_inconsistent_chunks"] == 0 and s["n_intervals"] == 9


def test_snapshots_check_and_override(sample_trace):
    exact = snapshot_aggregates(sample_trace.snapshots)
    assert list(exact.index) == [6, 12, 18]
    np.testing.assert_allclose(exact.loc[12].to_numpy(float), BY_HAND[12])
    b = journey_batches(sample_trace, 64)                     # default: override
    assert b.table["from_snapshot"].sum() == 3
    # a wrong snapshot wins over the reconstruction under 'override' and is counted
    snaps = sample_trace.snapshots.copy()
    snaps.loc[snaps["step_id"] == 6, "num_computed_tokens"] = 40      # no longer a decode
    tr = type(sample_trace)(requests=sample_trace.requests, journey_events=sample_trace.journey_events,
                            steps=sample_trace.steps, snapshots=snaps)
    b2 = journey_batches(tr, 64)
    assert b2.summary["n_snapshot_mismatch"] == 1 and b2.summary["snapshot_mismatch_steps"] == [6]
    assert b2.table.loc[6, "prefill_tokens"] == 1 and b2.table.loc[6, "num_decode_reqs"] == 0
    b3 = journey_batches(tr, 64, snapshots="ignore")
    assert b3.table.loc[6, "num_decode_reqs"] == 1 and b3.summary["n_snapshot_steps"] == 0


def test_offload_blocks_from_series(sample_trace):
    b = journey_batches(sample_trace, 64, offload=pd.Series({4: 3, 9: 2, 500: 7}))
    assert b.table.loc[4, "offload_blocks"] == 3 and b.table.loc[9, "offload_blocks"] == 2
    assert b.table["offload_blocks"].sum() == 5                 # steps past the trace ignored


def test_sample_step_gap_windows(sample_trace, sample_batches, deployment):
    df, dropped = step_gap_windows(sample_batches, sample_trace, deployment, config="c", source="s")
    assert list(df.columns) == list(OBS_COLUMNS)
    assert list(df["first_step"]) == [3, 6, 9, 12, 15, 18]
    assert list(df["last_step"]) == [5, 8, 11, 14, 17, 20]
    assert (df["n_steps"] == 3).all() and (df["kind"] == "step_gap").all()
    np.testing.assert_allclose(df["y_s"], 0.06, rtol=1e-9)
    feats = sample_batches.features(deployment)                 # row k = step k + 1
    want = feats[2:5].sum(axis=0)
    np.testing.assert_allclose(df[[f"f_{f}" for f in BETA_FEATURES]].iloc[0], want, rtol=1e-12)
    assert (df[[c for c in df.columns if c.startswith("a_")]] == 0).all().all()
    assert set(df["config"]) == {"c"} and set(df["source"]) == {"s"}
    assert sum(dropped.values()) == 0


def test_step_gap_uses_step_starts_not_duration(sample_trace, sample_batches, deployment):
    steps = sample_trace.steps.copy()
    steps["duration_us"] = 1
    steps["ts_end_s"] = steps["ts_start_s"] + 1e-6
    tr = type(sample_trace)(requests=sample_trace.requests, journey_events=sample_trace.journey_events,
                            steps=steps, snapshots=sample_trace.snapshots)
    df, _ = step_gap_windows(sample_batches, tr, deployment)
    np.testing.assert_allclose(df["y_s"], 0.06, rtol=1e-9)


def test_sample_decode_windows(sample_trace, sample_batches, deployment):
    df, dropped = journey_decode_windows(sample_batches, sample_trace, deployment)
    got = {r[:15]: (y, n, f, l) for r, y, n, f, l in
           zip(df["request_id"], df["y_s"], df["n_steps"], df["first_step"], df["last_step"])}
    assert set(got) == {"cmpl-0000651327", "cmpl-0001d23f08", "cmpl-0002953198", "cmpl-0003099950",
                        "cmpl-000411e20b", "cmpl-000795e60a"}           # R5 preempted, R6 aborted
    y, n, f, l = got["cmpl-0000651327"]
    assert (n, f, l) == (3, 3, 5) and y == pytest.approx(5000.1181 - 5000.058)
    y, n, f, l = got["cmpl-000795e60a"]
    assert (n, f, l) == (6, 17, 22) and y == pytest.approx(5000.4581 - 5000.338)
    assert dropped["preempted_in_decode"] == 1 and dropped["aborted"] == 1
    assert (df["kind"] == "decode_window").all()


def test_sample_ttft_windows(sample_trace, sample_batches, deployment):
    df, _ = journey_ttft_windows(sample_batches, sample_trace, deployment)
    assert len(df) == 8 and (df["kind"] == "queue_to_first_token").all()
    r = df.set_index(df["request_id"].str[:15])
    assert (r.loc["cmpl-0000651327", "first_step"], r.loc["cmpl-0000651327", "last_step"]) == (1, 2)
    assert r.loc["cmpl-0000651327", "y_s"] == pytest.approx(5000.058 - 5000.0114)
    assert (r.loc["cmpl-0003099950", "first_step"], r.loc["cmpl-0003099950", "n_steps"]) == (8, 3)
    assert (df[[c for c in df.columns if c.startswith("a_")]] == 0).all().all()


def test_sample_alpha_windows(sample_trace):
    df, dropped = alpha_windows(sample_trace, config="c")
    a2q = df[df["kind"] == "arrival_to_queue"]
    post = df[df["kind"] == "post_decode"]
    assert len(a2q) == 8 and len(post) == 7                      # the aborted request has no DEPARTED
    np.testing.assert_allclose(a2q["y_s"], 0.0004, rtol=1e-6)
    np.testing.assert_allclose(post["y_s"], 0.0005, rtol=1e-6)
    assert (a2q["a_alpha_const_s"] == 1e-6).all() and (a2q["a_alpha_output_s"] == 0).all()
    prompts = sample_trace.requests.set_index("request_id")["prompt_tokens"]
    np.testing.assert_allclose(a2q["a_alpha_prompt_s"], prompts.loc[a2q["request_id"]].to_numpy() * 1e-6)
    outs = sample_trace.requests.set_index("request_id")["output_tokens"]
    np.testing.assert_allclose(post["a_alpha_output_s"], outs.loc[post["request_id"]].to_numpy() * 1e-6)
    assert (post["a_alpha_const_s"] == 0).all() and (df["n_steps"] == 0).all()
    assert (df[[f"f_{f}" for f in BETA_FEATURES]] == 0).all().all()
    assert df["first_step"].isna().all()
    assert dropped["post_decode_not_completed"] == 1


def test_alpha_windows_drop_and_count_bad_y(sample_trace):
    rq = sample_trace.requests.copy()
    rq.loc[0, "arrived_s"] = np.nan
    rq.loc[1, "arrived_s"] = rq.loc[1, "queued_s"] + 1.0          # negative delay
    rq.loc[2, "departed_s"] = rq.loc[2, "finished_s"]             # zero
    tr = type(sample_trace)(requests=rq, journey_events=sample_trace.journey_events,
                            steps=sample_trace.steps, snapshots=sample_trace.snapshots)
    df, dropped = alpha_windows(tr)
    assert dropped["arrival_to_queue_missing_or_non_positive"] == 2
    assert dropped["post_decode_missing_or_non_positive"] == 1
    assert len(df) == 6 + 6 and (df["y_s"] > 0).all()


def test_otel_observations_summary_and_kinds(sample_trace, deployment):
    obs, summary = otel_observations(sample_trace, deployment, 64, config="c", source="s")
    assert summary["kept"] == {"step_gap": 6, "decode_window": 6, "queue_to_first_token": 8,
                               "arrival_to_queue": 8, "post_decode": 7}
    assert len(obs) == 35 and list(obs.columns) == list(OBS_COLUMNS)
    only, s2 = otel_observations(sample_trace, deployment, 64, kinds=["post_decode"])
    assert set(only["kind"]) == {"post_decode"} and "reconstruction" not in s2
    with pytest.raises(ValueError, match="unknown observation kind"):
        otel_observations(sample_trace, deployment, 64, kinds=["ttft"])


# -- synthetic, fully consistent traces ----------------------------------------------------

def _workload(seed, n=25, prompt_max=300, gap=0.004):
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(gap, n))
    return [(float(a), int(rng.integers(5, prompt_max)), int(rng.integers(1, 12)),
             int(rng.choice([0, 0, 16]))) for a in arrivals]


def _read(tmp_path, reqs, steps, **kw):
    from bayesblis.io.otel import read_otel

    return read_otel(write_trace(tmp_path / "traces.json", reqs, steps, **kw))


@pytest.mark.parametrize("seed,budget", [(0, 64), (1, 128), (2, 48), (3, 512), (4, 33)])
def test_synthetic_reconstruction_is_exact(tmp_path, seed, budget):
    reqs, steps = schedule(_workload(seed), budget)
    tr = _read(tmp_path, reqs, steps, sampled={s["step_id"] for s in steps[::3]},
               snapshot_steps={steps[4]["step_id"]})
    b = journey_batches(tr, budget, snapshots="check")
    truth = true_aggregates(steps)
    rec = b.table.loc[[s["step_id"] for s in steps], list(AGG)].to_numpy(float)
    np.testing.assert_allclose(rec, truth, rtol=0, atol=1e-9)
    assert (b.summary["n_multi_step_chunks"] > 0) == (budget < 300)   # chunk sharing exercised
    assert b.summary["n_inconsistent_chunks"] == 0 and b.summary["n_summary_mismatch"] == 0
    assert b.summary["n_snapshot_mismatch"] == 0 and b.table["exact"].all()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.floats(0, 0.05), st.integers(1, 200), st.integers(1, 8), st.sampled_from([0, 16])),
                min_size=1, max_size=12),
       st.integers(8, 160), st.integers(2, 6))
def test_synthetic_reconstruction_property(tmp_path, wl, budget, max_seqs):
    wl = [(a, max(p, c + 1), o, c) for a, p, o, c in wl]
    reqs, steps = schedule(wl, budget, max_num_seqs=max_seqs)
    tr = _read(tmp_path, reqs, steps)
    b = journey_batches(tr, budget)
    rec = b.table.loc[[s["step_id"] for s in steps], list(AGG)].to_numpy(float)
    np.testing.assert_allclose(rec, true_aggregates(steps), rtol=0, atol=1e-9)
    assert b.summary["n_summary_mismatch"] == 0


def test_synthetic_windows_sum_their_steps(tmp_path, deployment):
    reqs, steps = schedule(_workload(5, gap=0.002), 96)
    tr = _read(tmp_path, reqs, steps, sampled={s["step_id"] for s in steps[::4]})
    b = journey_batches(tr, 96)
    dur = {s["step_id"]: s["end"] - s["start"] for s in steps}
    gaps, _ = step_gap_windows(b, tr, deployment)
    assert len(gaps) > 5
    for f, l, y in zip(gaps["first_step"], gaps["last_step"], gaps["y_s"]):
        assert y == pytest.approx(sum(dur[k] for k in range(f, l + 1)), rel=1e-6)
    dec, _ = journey_decode_windows(b, tr, deployment)
    assert len(dec) > 5
    for f, l, y in zip(dec["first_step"], dec["last_step"], dec["y_s"]):
        assert y == pytest.approx(sum(dur[k] for k in range(f, l + 1)), rel=1e-9)
    feats = beta_feature_matrix(deployment, pd.DataFrame(true_aggregates(steps), columns=AGG))
    by_step = dict(zip([s["step_id"] for s in steps], feats))
    for _, row in dec.iterrows():
        want = sum(by_step[k] for k in range(row["first_step"], row["last_step"] + 1))
        np.testing.assert_allclose(row[[f"f_{f}" for f in BETA_FEATURES]].to_numpy(float), want, rtol=1e-9)


def test_idle_gaps_are_detected_and_dropped(tmp_path, deployment):
    # two bursts 1 s apart: the engine idles in between
    wl = [(0.0, 40, 3, 0), (0.0005, 30, 4, 0), (1.0, 50, 3, 0), (1.0001, 20, 2, 0)]
    reqs, steps = schedule(wl, 64)
    tr = _read(tmp_path, reqs, steps)                           # every step sampled
    b = journey_batches(tr, 64)
    last_first_burst = max(s["step_id"] for s in steps if s["start"] < 100.5)
    assert b.table.loc[last_first_burst, "idle_after"]
    assert b.table["idle_after"].sum() == 2                     # the gap and the trace end
    gaps, dropped = step_gap_windows(b, tr, deployment)
    assert dropped["idle"] == 1
    assert last_first_burst not in set(gaps["first_step"])
    assert (gaps["y_s"] < 0.1).all()


def test_idle_not_flagged_when_request_arrives_during_step(tmp_path):
    # request 2 queues while request 1's last step runs: no idle between them
    wl = [(0.0, 20, 2, 0), (0.0015, 20, 2, 0)]
    reqs, steps = schedule(wl, 64, step_time=lambda agg: 1e-3)
    tr = _read(tmp_path, reqs, steps)
    b = journey_batches(tr, 64)
    assert not b.table["idle_after"].iloc[:-1].any()


def test_untraced_request_breaks_summary_match(tmp_path, deployment):
    reqs, steps = schedule(_workload(7, gap=0.001), 64)
    tr = _read(tmp_path, reqs, steps, drop_requests={3})       # journey sampling < 1
    b = journey_batches(tr, 64)
    assert b.summary["n_summary_mismatch"] > 0
    gaps, dropped = step_gap_windows(b, tr, deployment)
    assert dropped["summary_mismatch"] > 0
    loose, _ = step_gap_windows(b, tr, deployment, require_summary_match=False)
    assert len(loose) > len(gaps)


def test_incomplete_journey_marks_steps_uncertain(sample_trace, deployment):
    je = sample_trace.journey_events
    rid = "cmpl-000411e20b-0-3d9c1724"                            # R4: drop its FINISHED
    je2 = je[~((je["request_id"] == rid) & (je["event_type"] == "FINISHED"))]
    tr = type(sample_trace)(requests=sample_trace.requests, journey_events=je2,
                            steps=sample_trace.steps, snapshots=sample_trace.snapshots)
    b = journey_batches(tr, 64, snapshots="ignore")
    assert b.summary["n_incomplete_requests"] == 1
    assert b.table.loc[10:, "uncertain"].all() and not b.table.loc[:9, "uncertain"].any()
    gaps, dropped = step_gap_windows(b, tr, deployment)
    assert list(gaps["first_step"]) == [3, 6] and dropped["empty_or_uncertain"] == 4


def test_empty_step_drops_window(sample_trace, deployment):
    # remove R2 (the only request active at steps 6-7): those steps become empty
    je = sample_trace.journey_events
    je2 = je[je["request_id"] != "cmpl-0002953198-0-0ed90475"]
    tr = type(sample_trace)(requests=sample_trace.requests, journey_events=je2,
                            steps=sample_trace.steps, snapshots=sample_trace.snapshots.iloc[:0])
    b = journey_batches(tr, 64)
    assert b.table.loc[6, "empty"] and b.table.loc[7, "empty"]
    gaps, dropped = step_gap_windows(b, tr, deployment, require_summary_match=False)
    assert 6 not in set(gaps["first_step"]) and dropped["empty_or_uncertain"] >= 1


def test_journey_batches_rejects_bad_arguments(sample_trace):
    with pytest.raises(ValueError):
        journey_batches(sample_trace, 0)
    with pytest.raises(ValueError):
        journey_batches(sample_trace, 64, snapshots="maybe")
