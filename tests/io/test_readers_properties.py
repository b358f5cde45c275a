"""Hypothesis property tests for the parsers."""

import json
import math

import pandas as pd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bayesblis.io.kv_events import LAYOUTS, parse_event, read_kv_events
from bayesblis.io.otel import decode_attributes, encode_attributes
from bayesblis.io.tracev2 import BASE_COLUMNS, OPTIONAL_COLUMNS, read_trace_v2

SLOW = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
FAST = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

scalars = st.one_of(
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False),
    st.text(max_size=20),
    st.booleans(),
)
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(min_size=1, max_size=8), inner, max_size=4)),
    max_leaves=6)


@FAST
@given(st.dictionaries(st.text(min_size=1, max_size=12), values, max_size=8))
def test_otel_attribute_round_trip(attrs):
    wire = json.loads(json.dumps(encode_attributes(attrs)))  # through JSON, ints as strings
    assert decode_attributes(wire) == attrs


@FAST
@given(st.floats(allow_nan=True, allow_infinity=True))
def test_otel_double_nonfinite(x):
    out = decode_attributes(json.loads(json.dumps(encode_attributes({"v": x}))))["v"]
    assert (math.isnan(out) and math.isnan(x)) or out == x


media = st.sampled_from(["GPU", "CPU", "DISK", "LMCACHE", None])
hashes = st.lists(st.one_of(st.integers(min_value=0, max_value=2**64 - 1),
                            st.binary(min_size=8, max_size=32).map(
                                lambda b: __import__("base64").b64encode(b).decode())), max_size=5)
nonneg = st.integers(min_value=0, max_value=10**6)
field_strategies = {
    "block_hashes": hashes, "parent_block_hash": st.one_of(st.none(), st.integers(0, 2**64 - 1)),
    "token_ids": st.lists(nonneg, max_size=8), "block_size": st.integers(1, 64), "lora_id": st.none(),
    "medium": media, "lora_name": st.none(), "transfer_id": nonneg, "request_id": st.text(max_size=30),
    "source_medium": media, "dest_medium": media, "block_count": nonneg, "scheduler_step": st.one_of(st.none(), nonneg),
    "success": st.booleans(), "connector_type": st.sampled_from(["NIXL", "P2P", "MOONCAKE"]),
    "source_rank": nonneg, "dest_rank": nonneg, "blocks_evicted": nonneg,
    "eviction_reason": st.sampled_from(["lru", "capacity", "preemption"]),
}


@st.composite
def kv_event(draw):
    etype = draw(st.sampled_from(sorted(LAYOUTS)))
    layout = LAYOUTS[etype]
    n = draw(st.integers(min_value=0, max_value=len(layout)))  # trailing fields may be missing
    fields = [draw(field_strategies[f]) for f in layout[:n]]
    return [etype, *fields]


@FAST
@given(st.lists(kv_event(), min_size=1, max_size=6))
def test_kv_event_parsing_never_crashes(events):
    for ev in events:
        row, hs = parse_event(json.loads(json.dumps(ev)), 1.0, 1)
        assert row[2] == ev[0]
        if hs is not None:
            assert all(0 <= h < 2**64 for h in hs)


@SLOW
@given(st.lists(st.lists(kv_event(), min_size=1, max_size=4), min_size=1, max_size=5))
def test_kv_file_parsing(tmp_path_factory, batches):
    p = tmp_path_factory.mktemp("kv") / "kv.jsonl"
    p.write_text("\n".join(json.dumps([1.0 + i, b, 0]) for i, b in enumerate(batches)) + "\n")
    kv = read_kv_events(p)
    assert len(kv.events) == sum(map(len, batches))
    kv.cpu_residency_blocks()
    kv.offload_blocks_per_step()


text_cell = st.text(alphabet=st.characters(codec="ascii", categories=["L", "N"]), max_size=8)
us = st.integers(min_value=0, max_value=2**52)


@st.composite
def trace_rows(draw):
    n = draw(st.integers(min_value=1, max_value=6))
    optional = [c for c in OPTIONAL_COLUMNS if draw(st.booleans())]
    rows = []
    for i in range(n):
        send = draw(st.integers(min_value=1, max_value=2**52))  # 0 = 'no chunk'
        first = send + draw(st.integers(0, 10**7))
        last = first + draw(st.integers(0, 10**8))
        row = {c: 0 for c in BASE_COLUMNS}
        row.update({"request_id": i, "client_id": draw(text_cell), "slo_class": draw(text_cell),
                    "prefix_group": draw(text_cell), "streaming": draw(st.booleans()),
                    "input_tokens": draw(nonneg), "output_tokens": draw(nonneg),
                    "reason_ratio": draw(st.floats(0, 1)), "model": draw(text_cell),
                    "arrival_time_us": draw(us), "send_time_us": send, "first_chunk_time_us": first,
                    "last_chunk_time_us": last, "num_chunks": draw(nonneg),
                    "status": draw(st.sampled_from(["ok", "error", "timeout"])), "error_message": "",
                    "finish_reason": draw(st.sampled_from(["", "stop", "length"])), "tenant_id": "",
                    "session_id": ""})
        for c in optional:
            row[c] = draw(nonneg) if c.endswith("_us") or c == "vllm_priority" else draw(text_cell)
        rows.append(row)
    return rows, optional


@SLOW
@given(trace_rows())
def test_tracev2_csv_round_trip(tmp_path_factory, data):
    rows, optional = data
    cols = list(BASE_COLUMNS)
    if "vllm_priority" in optional:
        cols.insert(cols.index("slo_class") + 1, "vllm_priority")
    if "slo_target_us" in optional:
        cols.insert(cols.index("deadline_us") + 1, "slo_target_us")
    cols += [c for c in ("x_request_id", "adapter", "think_time_us") if c in optional]
    d = tmp_path_factory.mktemp("tv")
    (d / "t.yaml").write_text("trace_version: 3\ntime_unit: us\nmode: real\nwarm_up_requests: 0\n")
    df = pd.DataFrame(rows)[cols]
    df["streaming"] = df["streaming"].map({True: "true", False: "false"})
    df.to_csv(d / "t.csv", index=False)
    tv = read_trace_v2(d / "t.yaml", d / "t.csv")
    r = tv.requests
    for c in cols:
        want = [row[c] for row in rows]
        got = list(r[c])
        if c == "reason_ratio":
            assert all(math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-300) for a, b in zip(got, want))
        else:
            assert got == want, c
    ok = r.status == "ok"
    assert ((r.ttft_s[ok] * 1e6 - (r.first_chunk_time_us - r.send_time_us)[ok]).abs() < 1e-3 * 1e6).all()
