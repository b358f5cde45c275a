import pytest

from bayesblis.errors import EmptyInputError, InputError
from bayesblis.io.tracev2 import read_trace_v2

OLD_V2_COLS = ["request_id", "client_id", "tenant_id", "slo_class", "session_id", "round_index",
               "prefix_group", "streaming", "input_tokens", "output_tokens", "text_tokens", "image_tokens",
               "audio_tokens", "video_tokens", "reason_ratio", "arrival_time_us", "send_time_us",
               "first_chunk_time_us", "last_chunk_time_us", "num_chunks", "status", "error_message"]


def test_sample(samples):
    d = samples / "tracev2"
    tv = read_trace_v2(d / "trace.yaml", d / "trace.csv")
    assert tv.mode == "real" and tv.header["warm_up_requests"] == 2
    r = tv.requests
    assert len(r) == 12 and len(tv.ok()) == 11 and len(tv.by_status("timeout")) == 1
    ok = tv.ok()
    assert ((ok.first_chunk_time_us - ok.send_time_us) / 1e6 == ok.ttft_s).all()
    assert (ok.e2e_s > ok.ttft_s).all()
    assert r.loc[r.status == "timeout", "ttft_s"].isna().all()
    assert tv.itl is not None and len(tv.itl) == int(ok.num_chunks.sum())
    assert (tv.itl_s().itl_s >= 0).all()
    assert r.arrival_time_s.iloc[1] == pytest.approx(0.2)


def _header(tmp_path, extra=""):
    h = tmp_path / "t.yaml"
    h.write_text(f"trace_version: 2\ntime_unit: microseconds\nmode: generated\nwarm_up_requests: 0\n{extra}")
    return h


def test_old_22_column_v2_defaults(tmp_path):
    h = _header(tmp_path)
    d = tmp_path / "t.csv"
    d.write_text(",".join(OLD_V2_COLS) + "\n" + "0,c,,,,0,,false,100,10,100,0,0,0,0,1000,1000,51000,151000,0,ok,\n")
    tv = read_trace_v2(h, d)
    r = tv.requests.iloc[0]
    assert tv.meta["old_v2_22_columns"]
    assert r.prefix_length == 0 and r.model == "" and r.deadline_us == 0 and r.finish_reason == ""
    assert r.ttft_s == pytest.approx(0.05) and r.e2e_s == pytest.approx(0.15)


def test_unknown_header_key_warns(tmp_path):
    h = _header(tmp_path, "future_key: 3\n")
    d = tmp_path / "t.csv"
    d.write_text(",".join(OLD_V2_COLS) + "\n" + "0,c,,,,0,,false,100,10,100,0,0,0,0,0,0,0,0,0,error,boom\n")
    with pytest.warns(UserWarning, match="future_key"):
        tv = read_trace_v2(h, d)
    assert tv.header["future_key"] == 3 and len(tv.ok()) == 0


def test_errors_name_file_row_field(tmp_path):
    h = _header(tmp_path)
    d = tmp_path / "t.csv"
    d.write_text(",".join(OLD_V2_COLS) + "\n" + "0,c,,,,0,,false,-5,10,100,0,0,0,0,0,0,0,0,0,ok,\n")
    with pytest.raises(InputError) as exc:
        read_trace_v2(h, d)
    assert "t.csv" in str(exc.value) and "line 2" in str(exc.value) and "input_tokens" in str(exc.value)
    d.write_text(",".join(OLD_V2_COLS) + "\n" + "0,c,,,,0,,false,5,10,100,0,0,0,nan,0,0,0,0,0,ok,\n")
    with pytest.raises(InputError, match="reason_ratio"):
        read_trace_v2(h, d)
    d.write_text("")
    with pytest.raises(EmptyInputError):
        read_trace_v2(h, d)
    d.write_text("foo,bar\n1,2\n")
    with pytest.raises(InputError, match="request_id"):
        read_trace_v2(h, d)
    h.write_text("[1, 2]\n")
    with pytest.raises(InputError, match="mapping"):
        read_trace_v2(h, d)
