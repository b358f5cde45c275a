import json
import math
import warnings

import numpy as np
import pytest

from bayesblis.errors import EmptyInputError, InputError
from bayesblis.io.otel import (JOURNEY_COLUMNS, REQUEST_COLUMNS, SNAPSHOT_COLUMNS, STEP_COLUMNS,
                               read_otel, strip_engine_suffix)

EID = "cmpl-abc123-0-1a2b3c4d"


def one_request(b, events, *, api=True, parent=True):
    """A line holding one request's spans; `events` = [(type, ts, step, extra-kwargs)]."""
    evs = []
    for etype, ts, step, kw in events:
        args = dict(phase="DECODE", done=10, total=10, dec=1, max_tok=4)
        args.update(kw)
        evs.append(b.journey(etype, ts, step, **args))
    spans = [("vllm.scheduler", [b.core_span(EID, "c" * 16, "a" * 16 if parent else None, "1" * 32, evs)])]
    if api:
        api_ev = [b.event("api.ARRIVED", 1, event__ts__monotonic=0.9),
                  b.event("api.DEPARTED", 2, event__ts__monotonic=2.1)]
        spans.append(("vllm.api", [b.api_span("cmpl-abc123", "a" * 16, "1" * 32, api_ev)]))
    return b.export_line(spans)


GOOD = [("QUEUED", 1.0, 0, dict(phase="WAITING", done=0, dec=0)),
        ("SCHEDULED", 1.01, 1, dict(phase="PREFILL", done=0, dec=0, kind="FIRST")),
        ("FIRST_TOKEN", 1.05, 1, dict(dec=1)),
        ("FINISHED", 1.2, 4, dict(dec=4, status="length"))]


def write(tmp_path, lines, name="traces.json"):
    p = tmp_path / name
    p.write_text("\n".join(lines) + "\n")
    return p


def test_sample_trace(samples, builders):
    tr = read_otel(samples / "otel-run" / "traces.json")
    _, truth = builders.simulate_otel()
    assert list(tr.requests.columns) == REQUEST_COLUMNS
    assert list(tr.journey_events.columns) == JOURNEY_COLUMNS
    assert list(tr.steps.columns) == STEP_COLUMNS
    assert list(tr.snapshots.columns) == SNAPSHOT_COLUMNS
    assert sorted(tr.requests.request_id) == sorted(truth["engine_ids"])
    assert len(tr.steps) == truth["n_sampled_steps"]
    assert tr.steps.step_id.is_monotonic_increasing and (np.diff(tr.steps.step_id) > 1).all()  # sampled gaps
    r = tr.requests.set_index("request_id")
    for rid, status in truth["statuses"].items():
        assert r.loc[rid, "finish_status"] == status
    # every request joined to its API span (one via the id-suffix fallback)
    assert r.arrived_s.notna().all()
    assert (r.api_request_id == [strip_engine_suffix(i) for i in r.index]).all()
    ok = r[r.finish_status == "length"]
    assert (ok.queued_s <= ok.scheduled_s).all() and (ok.scheduled_s <= ok.first_token_s).all()
    assert (ok.first_token_s <= ok.finished_s).all() and (ok.finished_s < ok.departed_s).all()
    assert (ok.output_tokens == ok.max_tokens).all()
    # preemption + resume
    assert int(r.num_preemptions.sum()) == 1
    je = tr.journey_events
    assert (je.event_type == "PREEMPTED").sum() == 1 and (je.schedule_kind == "RESUME").sum() == 1
    # aborted request kept with NaN departure
    ab = r[r.finish_status == "aborted"]
    assert len(ab) == 1 and math.isnan(ab.departed_s.iloc[0])
    # journey events sorted per (request, step, ts)
    assert je.equals(je.sort_values(["request_id", "step", "ts_s"], kind="stable", ignore_index=True))


def test_out_of_order_and_suffix_join(tmp_path, builders):
    line = one_request(builders, list(reversed(GOOD)), parent=False)
    tr = read_otel(write(tmp_path, [line]))
    row = tr.requests.iloc[0]
    assert row.api_request_id == "cmpl-abc123" and row.arrived_s == 0.9
    assert list(tr.journey_events.event_type) == ["QUEUED", "SCHEDULED", "FIRST_TOKEN", "FINISHED"]
    assert row.output_tokens == 4 and row.first_token_step == 1


def test_never_finishing_request_is_kept(tmp_path, builders):
    line = one_request(builders, GOOD[:2], api=False)
    tr = read_otel(write(tmp_path, [line]))
    row = tr.requests.iloc[0]
    assert row.finish_status == "unfinished" and math.isnan(row.finished_s) and math.isnan(row.arrived_s)


def test_filters_other_scopes(tmp_path, builders):
    legacy = builders.export_line([("legacy.api", [builders.api_span("cmpl-x", "b" * 16, "2" * 32, [])])])
    tr = read_otel(write(tmp_path, [legacy, one_request(builders, GOOD)]))
    assert tr.meta["n_api_spans"] == 1 and len(tr.requests) == 1


# -- failure classes -------------------------------------------------------------------
def test_truncated_last_line_warns(tmp_path, builders):
    good = one_request(builders, GOOD)
    p = write(tmp_path, [good, good[: len(good) // 2]])
    with pytest.warns(UserWarning, match=r"line 2.*truncated"):
        tr = read_otel(p)
    assert len(tr.requests) == 1
    with pytest.raises(InputError, match="line 2"):
        read_otel(p, skip_malformed_tail=False)


def test_malformed_middle_line_raises(tmp_path, builders):
    good = one_request(builders, GOOD)
    p = write(tmp_path, [good, good[:50], good])
    with pytest.raises(InputError) as exc:
        read_otel(p)
    assert str(p) in str(exc.value) and "line 2" in str(exc.value)


def test_missing_first_token(tmp_path, builders):
    p = write(tmp_path, [one_request(builders, [GOOD[0], GOOD[1], GOOD[3]])])
    with pytest.raises(InputError) as exc:
        read_otel(p)
    msg = str(exc.value)
    assert str(p) in msg and EID in msg and "FIRST_TOKEN" in msg


def test_timestamps_backwards(tmp_path, builders):
    bad = [GOOD[0], GOOD[1], ("FIRST_TOKEN", 1.005, 1, dict(dec=1)), GOOD[3]]
    p = write(tmp_path, [one_request(builders, bad)])
    with pytest.raises(InputError) as exc:
        read_otel(p)
    msg = str(exc.value)
    assert str(p) in msg and EID in msg and "ts.monotonic" in msg and "FIRST_TOKEN" in msg


def test_negative_tokens(tmp_path, builders):
    bad = GOOD[:3] + [("FINISHED", 1.2, 4, dict(dec=-4, status="length"))]
    p = write(tmp_path, [one_request(builders, bad)])
    with pytest.raises(InputError) as exc:
        read_otel(p)
    msg = str(exc.value)
    assert "line 1" in msg and EID in msg and "decode.done_tokens" in msg


def test_nan_timestamp(tmp_path, builders):
    line = one_request(builders, GOOD).replace('{"doubleValue":1.05}', '{"doubleValue":"NaN"}')
    assert "NaN" in line
    p = write(tmp_path, [line])
    with pytest.raises(InputError) as exc:
        read_otel(p)
    assert "ts.monotonic" in str(exc.value) and EID in str(exc.value) and "finite" in str(exc.value)


def test_empty_file(tmp_path):
    p = tmp_path / "traces.json"
    p.write_text("\n\n")
    with pytest.raises(EmptyInputError, match="traces.json"):
        read_otel(p)


def test_wrong_file_types(tmp_path):
    csv = tmp_path / "t.csv"
    csv.write_text("a,b\n1,2\n")
    with pytest.raises(InputError, match="line 1"):
        read_otel(csv)
    obj = tmp_path / "obj.json"
    obj.write_text(json.dumps({"hello": 1}) + "\n")
    with pytest.raises(InputError) as exc:
        read_otel(obj)
    assert "resourceSpans" in str(exc.value) and "line 1" in str(exc.value)


def test_no_warning_on_clean_file(samples):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        read_otel(samples / "otel-run" / "traces.json")


def test_duplicate_export_and_foreign_trace(tmp_path, builders):
    line = one_request(builders, GOOD)
    tr = read_otel(write(tmp_path, [line, line]))
    assert len(tr.requests) == 1 and len(tr.journey_events) == 4
    other = builders.export_line([("some.other.lib", [])])
    with pytest.warns(UserWarning, match="no vLLM spans"):
        tr = read_otel(write(tmp_path, [other], "other.json"))
    assert tr.requests.empty and list(tr.requests.columns) == REQUEST_COLUMNS


def test_cli_error_is_one_line(tmp_path, builders, capsys):
    from bayesblis.cli import main

    p = write(tmp_path, [one_request(builders, [GOOD[0], GOOD[1], GOOD[3]])])
    with pytest.raises(SystemExit) as exc:
        main(["ingest", str(p), "--out", str(tmp_path / "ds"), "--quiet"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and EID in err and "Traceback" not in err
    assert not (tmp_path / "ds").exists()
