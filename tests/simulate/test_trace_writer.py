"""Trace writer: OTEL journey/step traces and KV events read back to the simulator's records."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bayesblis.simulate.engine import EngineConfig, run_engine
from bayesblis.simulate.trace_writer import write_traces
from bayesblis.simulate.workload import generate

from sim_helpers import ALPHA_PRIOR, BETA_PRIOR, beta_vector

ORIGIN = 1000.0


@pytest.fixture(scope="module")
def recorded(constants, tmp_path_factory):
    w = generate([{"rate": 30, "duration": 4}], {"dist": "uniform", "min": 20, "max": 400},
                 {"dist": "uniform", "min": 1, "max": 80}, arrival="poisson",
                 prefix={"num_groups": 4, "system_prompt_len": 64}, seed=11)
    cfg = EngineConfig(max_num_batched_tokens=256, max_num_seqs=12, max_model_len=2048,
                       kv_blocks_total=90, block_size=16, cpu_offload_blocks=30)
    run = run_engine(w, cfg, constants, beta_vector(BETA_PRIOR),
                     np.array(list(ALPHA_PRIOR.values())), noise_sigma=0.1, noise_nu=5, seed=1,
                     record=True)
    out = tmp_path_factory.mktemp("traces")
    paths = write_traces(run, w, cfg, out, step_sample_rate=0.5, rich_subsample_rate=0.3,
                         closure_interval=10, seed=3)
    return w, cfg, run, paths


def test_otel_round_trip(recorded):
    import bayesblis.io.otel as otel
    w, cfg, run, paths = recorded
    assert run.num_preemptions.sum() > 0          # the trace exercises PREEMPTED/RESUME
    tr = otel.read_otel(paths["traces"])
    ids = paths["engine_ids"]
    req = tr.requests.set_index("request_id")
    ok = np.nonzero(run.status == 0)[0]
    assert len(req) == len(ok)
    for r in ok:
        row = req.loc[ids[r]]
        assert row["queued_s"] == pytest.approx(ORIGIN + run.queued_s[r], abs=1e-6)
        assert row["scheduled_s"] == pytest.approx(ORIGIN + run.scheduled_s[r], abs=1e-6)
        assert row["first_token_s"] == pytest.approx(ORIGIN + run.first_token_s[r], abs=1e-6)
        assert row["finished_s"] == pytest.approx(ORIGIN + run.finish_s[r], abs=1e-6)
        assert row["arrived_s"] == pytest.approx(ORIGIN + w.arrival_s[r], abs=1e-6)
        assert row["departed_s"] == pytest.approx(ORIGIN + w.arrival_s[r] + run.e2e_s[r], abs=1e-6)
        assert (row["queued_step"], row["scheduled_step"], row["first_token_step"],
                row["finished_step"]) == (run.queued_step[r], run.scheduled_step[r],
                                          run.first_token_step[r], run.finish_step[r])
        assert row["prompt_tokens"] == w.prompt_tokens[r]
        assert row["output_tokens"] == w.output_tokens[r]
        assert row["num_preemptions"] == run.num_preemptions[r]
    je = tr.journey_events
    assert set(je["event_type"]) == {"QUEUED", "SCHEDULED", "FIRST_TOKEN", "PREEMPTED", "FINISHED"}
    assert (je["schedule_kind"] == "RESUME").sum() == run.num_preemptions.sum()
    # step summaries: ids, start times and batch contents match the records
    steps = tr.steps.set_index("step_id")
    assert 0 < len(steps) < run.n_steps
    for sid, row in steps.iterrows():
        i = sid - 1
        assert row["ts_start_s"] == pytest.approx(ORIGIN + run.steps.start_s[i], abs=1e-6)
        assert row["ts_end_s"] <= ORIGIN + run.steps.end_s[i] + 1e-6
        assert row["running_depth"] == run.steps.step_col("running_depth")[i]
        assert row["prefill_tokens"] + row["decode_tokens"] == row["scheduled_tokens"]
        assert row["kv_blocks_total"] == cfg.kv_blocks_total
    assert len(tr.snapshots) > 0
    assert set(tr.snapshots["step_id"]) <= set(steps.index)


def test_trace_lines_are_otlp_with_string_ints(recorded):
    _, _, _, paths = recorded
    with open(paths["traces"]) as fh:
        first = json.loads(fh.readline())
    spans = [sp for rs in first["resourceSpans"] for ss in rs["scopeSpans"] for sp in ss["spans"]]
    assert spans
    for sp in spans:
        assert isinstance(sp["startTimeUnixNano"], str) and len(sp["traceId"]) == 32
        for ev in sp["events"]:
            for a in ev["attributes"]:
                if "intValue" in a["value"]:
                    assert isinstance(a["value"]["intValue"], str)


def test_kv_events_written_and_readable(recorded):
    w, cfg, run, paths = recorded
    lines = [json.loads(x) for x in open(paths["kv_events"])]
    types = {ev[0] for line in lines for ev in line[1]}
    assert {"BlockStored", "BlockRemoved"} <= types
    if run.steps.aggregates[:, 6].sum() > 0:
        assert {"CacheStoreCommitted", "TransferInitiated", "TransferCompleted"} <= types
    ts = [line[0] for line in lines]
    assert ts == sorted(ts) and ts[0] > 1.76e9
    kvmod = pytest.importorskip("bayesblis.io.kv_events")
    ev = kvmod.read_kv_events(paths["kv_events"])
    assert ev is not None
