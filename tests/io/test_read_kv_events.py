import base64
import json

import pytest

from bayesblis.errors import EmptyInputError, InputError
from bayesblis.io.kv_events import EVENT_COLUMNS, normalize_hash, read_kv_events


def test_sample(samples):
    kv = read_kv_events(samples / "otel-run" / "kv_events.jsonl")
    assert list(kv.events.columns) == EVENT_COLUMNS
    assert len(kv.events) == 12 and kv.meta["n_lines"] == 7
    assert len(kv.deduped()) == 11  # one duplicated TransferInitiated
    res = kv.cpu_residency_blocks()
    assert list(res) == [2, 1]
    off = kv.offload_blocks_per_step()
    assert off.to_dict() == {42: 2, 60: 1}


def test_hash_normalisation():
    h = 2209843198812345678
    b64 = base64.b64encode(h.to_bytes(8, "big")).decode()
    assert normalize_hash(b64) == normalize_hash(h) == h
    long = base64.b64encode(b"\x01" * 24 + h.to_bytes(8, "big")).decode()
    assert normalize_hash(long) == h
    assert normalize_hash(-1) == (1 << 64) - 1


def test_missing_trailing_fields(tmp_path):
    p = tmp_path / "kv.jsonl"
    p.write_text(json.dumps([1.0, [["TransferCompleted", 3, "r", "GPU", "CPU", 2]]]) + "\n")
    ev = read_kv_events(p).events
    assert ev.success.isna().all() and ev.scheduler_step.isna().all() and ev.block_count.iloc[0] == 2


def test_truncated_tail_and_backwards_ts(tmp_path, builders):
    lines = builders.kv_lines()
    p = tmp_path / "kv.jsonl"
    p.write_text("\n".join(lines + [lines[0][:20]]))
    with pytest.warns(UserWarning, match="truncated"):
        assert read_kv_events(p).meta["n_lines"] == 7
    p.write_text("\n".join(lines + lines) + "\n")
    with pytest.raises(InputError) as exc:
        read_kv_events(p)
    assert "several runs" in str(exc.value) and "line 8" in str(exc.value) and "'ts'" in str(exc.value)
    assert read_kv_events(p, allow_multiple_runs=True).meta["n_runs"] == 2


def test_errors(tmp_path):
    p = tmp_path / "kv.jsonl"
    p.write_text("")
    with pytest.raises(EmptyInputError):
        read_kv_events(p)
    p.write_text('{"resourceSpans": []}\n')
    with pytest.raises(InputError, match="not a KV-event batch"):
        read_kv_events(p)
    p.write_text(json.dumps([1.0, [["CacheStoreCommitted", "r", "CPU", -2, 4]]]) + "\n")
    with pytest.raises(InputError) as exc:
        read_kv_events(p)
    assert "line 1" in str(exc.value) and "block_count" in str(exc.value)
    p.write_text('[NaN, []]\n')
    with pytest.raises(InputError, match="'ts'"):
        read_kv_events(p)
