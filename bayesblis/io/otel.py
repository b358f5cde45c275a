"""Reader for vLLM OTel journey + step traces (`traces.json`, OTLP/JSON lines).

See data_specs/otel-traces.md. The file is streamed line by line, so multi-GB traces
need memory only for the extracted rows. Clocks: journey times are the engine-core
monotonic clock (`ts.monotonic`, s), step times `step.ts_start_ns / 1e9` (same clock),
API times `event.ts.monotonic` (API-process monotonic clock, same host => same clock).
"""

from __future__ import annotations

import json
import math
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np
import pandas as pd

from bayesblis.errors import EmptyInputError, InputError, InputWarning
from bayesblis.io.text import decode_utf8, type_name

SCOPE_API = "vllm.api"
SCOPE_CORE = "vllm.scheduler"
SCOPE_STEP = "vllm.scheduler.step"
ENGINE_SUFFIX = re.compile(r"-\d+-[0-9a-fA-F]{8}$")
JOURNEY_TYPES = ("QUEUED", "SCHEDULED", "FIRST_TOKEN", "PREEMPTED", "FINISHED")

REQUEST_COLUMNS = [
    "request_id", "api_request_id", "arrived_s", "departed_s", "queued_s", "scheduled_s",
    "first_token_s", "finished_s", "queued_step", "scheduled_step", "first_token_step",
    "finished_step", "prompt_tokens", "output_tokens", "max_tokens", "num_preemptions",
    "finish_status",
]
JOURNEY_COLUMNS = [
    "request_id", "event_type", "ts_s", "step", "phase", "prefill_done_tokens",
    "prefill_total_tokens", "decode_done_tokens", "decode_max_tokens", "num_preemptions",
    "schedule_kind", "finish_status",
]
STEP_COLUMNS = [
    "step_id", "ts_start_s", "ts_end_s", "duration_us", "running_depth", "waiting_depth",
    "num_prefill_reqs", "prefill_tokens", "num_decode_reqs", "decode_tokens",
    "scheduled_tokens", "num_finished", "num_preempted", "kv_usage_ratio", "kv_blocks_total",
    "kv_blocks_free",
]
SNAPSHOT_COLUMNS = [
    "step_id", "request_id", "phase", "num_prompt_tokens", "num_computed_tokens",
    "num_output_tokens", "num_preemptions", "scheduled_tokens", "kv_blocks_allocated",
    "kv_blocks_cached", "effective_prompt_len",
]

# journey column -> attribute key (int-valued token/counter attributes)
_JOURNEY_INT_ATTRS = {
    "prefill_done_tokens": "prefill.done_tokens",
    "prefill_total_tokens": "prefill.total_tokens",
    "decode_done_tokens": "decode.done_tokens",
    "decode_max_tokens": "decode.max_tokens",
    "num_preemptions": "num_preemptions",
}
_STEP_ATTRS = {
    "duration_us": "step.duration_us", "running_depth": "queue.running_depth",
    "waiting_depth": "queue.waiting_depth", "num_prefill_reqs": "batch.num_prefill_reqs",
    "prefill_tokens": "batch.prefill_tokens", "num_decode_reqs": "batch.num_decode_reqs",
    "decode_tokens": "batch.decode_tokens", "scheduled_tokens": "batch.scheduled_tokens",
    "num_finished": "batch.num_finished", "num_preempted": "batch.num_preempted",
    "kv_blocks_total": "kv.blocks_total_gpu", "kv_blocks_free": "kv.blocks_free_gpu",
}
_SNAPSHOT_ATTRS = {
    "num_prompt_tokens": "request.num_prompt_tokens",
    "num_computed_tokens": "request.num_computed_tokens",
    "num_output_tokens": "request.num_output_tokens",
    "num_preemptions": "request.num_preemptions",
    "scheduled_tokens": "request.scheduled_tokens_this_step",
    "kv_blocks_allocated": "kv.blocks_allocated_gpu",
    "kv_blocks_cached": "kv.blocks_cached_gpu",
}


@dataclass
class OtelTrace:
    """Tidy tables of one traces.json (columns fixed in ARCHITECTURE.md)."""

    requests: pd.DataFrame
    journey_events: pd.DataFrame
    steps: pd.DataFrame
    snapshots: pd.DataFrame
    source: Path | None = None
    meta: dict = field(default_factory=dict)


# -- low level --------------------------------------------------------------------------
def iter_json_lines(path, *, skip_malformed_tail: bool = True, kind: str = "JSON") -> Iterator[tuple[int, object]]:
    """Yield (1-based line number, parsed JSON) for each non-blank line of `path`.

    A malformed line raises InputError, except (with `skip_malformed_tail`) the last
    non-blank line of a file that already had a valid line: a writer killed mid-line
    leaves that, so it is skipped with a warning.
    """
    path = Path(path)
    pending: InputError | None = None
    seen_valid = False
    offset_bytes = 0
    with _open_binary(path, kind) as fh:
        for lineno, raw in enumerate(fh, start=1):
            start, offset_bytes = offset_bytes, offset_bytes + len(raw)
            if not raw.strip():
                continue
            if pending is not None:
                raise pending
            try:
                text = decode_utf8(raw, path, expected=f"one {kind} value per line", offset_bytes=start,
                                   line=lineno)
                obj = json.loads(text)
            except (json.JSONDecodeError, InputError) as exc:
                # undecodable bytes are binary content, unless the line is unterminated
                # (a writer killed mid-character)
                undecodable = isinstance(exc, InputError)
                err = exc if undecodable else InputError(
                    path, f"malformed {kind} line: {exc.msg}", record=f"line {lineno}, column {exc.colno}",
                    expected=f"one {kind} value per line")
                if not seen_valid or not skip_malformed_tail or (undecodable and raw.endswith(b"\n")):
                    raise err from None
                pending = err
                continue
            seen_valid = True
            yield lineno, obj
    if pending is not None:
        warnings.warn(f"{pending} -- skipped as a truncated last line", InputWarning, stacklevel=2)


def _open_binary(path: Path, kind: str):
    try:
        return open(path, "rb")
    except FileNotFoundError:
        raise InputError(path, "file not found", expected=f"{kind} lines") from None
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}", expected=f"{kind} lines") from None


def _list_of_objects(value, path, record: str, field: str) -> list:
    """`value` (None -> []) checked to be a list of JSON objects."""
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        what = f"{type_name(value)} instead of a list" if not isinstance(value, list) else "a non-object item"
        raise InputError(path, what, record=record, field=field, expected="a list of objects")
    return value


def decode_value(value: dict):
    """Decode an OTLP/JSON AnyValue (`{"intValue": "12"}` -> 12, arrays, kvlists)."""
    if not value or type(value) is not dict:
        return None
    kind, v = next(iter(value.items()))
    if kind == "intValue":
        return int(v)
    if kind == "doubleValue":
        return float(v)  # OTLP JSON writes NaN/Infinity as strings
    if kind == "stringValue":
        return str(v)
    if kind == "boolValue":
        return v if isinstance(v, bool) else str(v).lower() == "true"
    if kind == "arrayValue":
        return [decode_value(x) for x in (v or {}).get("values", [])]
    if kind == "kvlistValue":
        return decode_attributes((v or {}).get("values", []))
    if kind == "bytesValue":
        return v
    return v


def decode_attributes(attrs) -> dict:
    """OTLP attribute list -> {key: python value}."""
    return {a["key"]: decode_value(a.get("value")) for a in attrs or ()}


def encode_value(v) -> dict:
    """Inverse of `decode_value` (used by writers and tests)."""
    if isinstance(v, bool):
        return {"boolValue": v}
    if isinstance(v, (int, np.integer)):
        return {"intValue": str(int(v))}
    if isinstance(v, (float, np.floating)):
        f = float(v)
        return {"doubleValue": f if math.isfinite(f) else ("NaN" if f != f else ("Infinity" if f > 0 else "-Infinity"))}
    if isinstance(v, str):
        return {"stringValue": v}
    if isinstance(v, (list, tuple)):
        return {"arrayValue": {"values": [encode_value(x) for x in v]}}
    if isinstance(v, dict):
        return {"kvlistValue": {"values": encode_attributes(v)}}
    raise TypeError(f"cannot encode {type(v).__name__} as an OTLP value")


def encode_attributes(d: dict) -> list:
    return [{"key": k, "value": encode_value(v)} for k, v in d.items()]


def strip_engine_suffix(engine_id: str) -> str:
    """Engine id `cmpl-abc-0-1a2b3c4d` -> API id `cmpl-abc`."""
    return ENGINE_SUFFIX.sub("", engine_id)


# -- reader -----------------------------------------------------------------------------
class _Ctx:
    def __init__(self, path):
        self.path = path
        self.step_lines: dict[int, int] = {}   # step id -> line of its BATCH_SUMMARY

    def attrs(self, holder: dict, lineno, rid=None) -> dict:
        """Decoded `attributes` of a span or event; a malformed entry raises InputError."""
        rec = f"line {lineno}" + (f", request {rid}" if rid else "")
        out = {}
        for a in _list_of_objects(holder.get("attributes"), self.path, rec, "attributes"):
            key = a.get("key")
            if not isinstance(key, str):
                raise InputError(self.path, f"attribute key {key!r}", record=rec, field="attributes[].key",
                                 expected="a string key")
            try:
                out[key] = decode_value(a.get("value"))
            except (ValueError, TypeError, AttributeError):
                raise InputError(self.path, f"undecodable value {a.get('value')!r}", record=rec, field=key,
                                 expected='an OTLP value such as {"intValue": "12"} or {"doubleValue": 1.5}') from None
        return out

    def num(self, attrs, key, lineno, rid=None, *, required=True, integer=True, nonneg=True):
        v = attrs.get(key)
        rec = f"line {lineno}" + (f", request {rid}" if rid else "")
        if v is None:
            if required:
                raise InputError(self.path, "attribute missing", record=rec, field=key,
                                 expected="an int" if integer else "a number")
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise InputError(self.path, f"not a number: {v!r}", record=rec, field=key,
                             expected="an int" if integer else "a number")
        if isinstance(v, float) and not math.isfinite(v):
            raise InputError(self.path, f"non-finite value {v}", record=rec, field=key,
                             expected="a finite number")
        if integer and isinstance(v, float) and not v.is_integer():
            raise InputError(self.path, f"not an integer: {v!r}", record=rec, field=key, expected="an int")
        if nonneg and v < 0:
            raise InputError(self.path, f"negative value {v}", record=rec, field=key,
                             expected="a value >= 0")
        return int(v) if integer else float(v)


def read_otel(path, *, skip_malformed_tail: bool = True) -> OtelTrace:
    """Read a vLLM OTel `traces.json` into tidy tables (see `OtelTrace`)."""
    path = Path(path)
    ctx = _Ctx(path)
    api: dict[str, dict] = {}          # spanId -> {api_request_id, arrived_s, ...}
    core: dict[str, dict] = {}         # engine id -> {parent, events: [row...]}
    steps: dict[int, tuple] = {}
    snaps: list[tuple] = []
    n_lines = 0
    for lineno, obj in iter_json_lines(path, skip_malformed_tail=skip_malformed_tail, kind="OTLP/JSON"):
        n_lines += 1
        if not isinstance(obj, dict) or "resourceSpans" not in obj:
            raise InputError(path, "not an OTLP/JSON export line", record=f"line {lineno}",
                             field="resourceSpans",
                             expected="a JSON object with 'resourceSpans' per line (vLLM traces.json)")
        rec = f"line {lineno}"
        for rs in _list_of_objects(obj["resourceSpans"], path, rec, "resourceSpans"):
            for ss in _list_of_objects(rs.get("scopeSpans"), path, rec, "resourceSpans[].scopeSpans"):
                scope = ss.get("scope") if isinstance(ss.get("scope"), dict) else {}
                scope = scope.get("name")
                for span in _list_of_objects(ss.get("spans"), path, rec, "scopeSpans[].spans"):
                    name = span.get("name") if isinstance(span.get("name"), str) else ""
                    if scope == SCOPE_API and name == "llm_request":
                        _api_span(ctx, span, lineno, api)
                    elif scope == SCOPE_CORE and name == "llm_core":
                        _core_span(ctx, span, lineno, core)
                    elif scope == SCOPE_STEP and name.startswith("scheduler_steps"):
                        _step_span(ctx, span, lineno, steps, snaps)
    if n_lines == 0:
        raise EmptyInputError(path, "no trace lines", expected="OTLP/JSON export lines")
    if not core and not steps and not api:
        warnings.warn(f"{path}: no vLLM spans (scopes {SCOPE_API}, {SCOPE_CORE}, {SCOPE_STEP}) found "
                      f"in {n_lines} line(s)", InputWarning, stacklevel=2)

    # Join API spans to core spans.
    api_by_id = {a["api_request_id"]: a for a in api.values() if a.get("api_request_id")}
    used_api = set()
    req_rows, journey_rows = [], []
    for rid, c in core.items():
        a = api.get(c["parent"]) if c["parent"] else None
        if a is None:
            a = api_by_id.get(strip_engine_suffix(rid))
        if a is not None:
            used_api.add(id(a))
        # a span exported twice repeats its events: keep one copy of each
        uniq = {ev[:-1]: ev for ev in reversed(c["events"])}
        events = sorted(uniq.values(), key=lambda r: (r[3], r[2]))
        req_rows.append(_request_row(ctx, rid, a, events))
        journey_rows.extend(events)

    journey = pd.DataFrame(journey_rows, columns=JOURNEY_COLUMNS + ["_line"]).drop(columns="_line")
    journey = _typed(journey, {"ts_s": "float64", "step": "int64"},
                     {c: "Int64" for c in _JOURNEY_INT_ATTRS})
    journey = journey.sort_values(["request_id", "step", "ts_s"], kind="stable", ignore_index=True)

    requests = pd.DataFrame(req_rows, columns=REQUEST_COLUMNS)
    requests = _typed(requests, {c: "float64" for c in REQUEST_COLUMNS if c.endswith("_s") or c.endswith("_step")}
                      | {"prompt_tokens": "int64", "output_tokens": "int64", "num_preemptions": "int64"},
                      {"max_tokens": "Int64"})
    requests = requests.sort_values(["queued_s", "request_id"], kind="stable", ignore_index=True)

    step_df = pd.DataFrame([steps[k] for k in sorted(steps)], columns=STEP_COLUMNS)
    step_df = _typed(step_df, {c: "int64" for c in STEP_COLUMNS if c not in ("ts_start_s", "ts_end_s", "kv_usage_ratio")}
                     | {"ts_start_s": "float64", "ts_end_s": "float64", "kv_usage_ratio": "float64"}, {})
    _check_step_order(ctx, step_df)
    _warn_clock_mismatch(path, requests)
    snap_df = pd.DataFrame(snaps, columns=SNAPSHOT_COLUMNS)
    snap_df = _typed(snap_df, {c: "int64" for c in _SNAPSHOT_ATTRS} | {"step_id": "int64"},
                     {"effective_prompt_len": "Int64"})
    snap_df = snap_df.sort_values(["step_id", "request_id"], kind="stable", ignore_index=True)

    n_api_only = sum(1 for a in api.values() if id(a) not in used_api)
    meta = {"n_lines": n_lines, "n_api_spans": len(api), "n_core_spans": len(core),
            "n_api_only": n_api_only, "n_steps": len(step_df), "n_snapshots": len(snap_df)}
    return OtelTrace(requests=requests, journey_events=journey, steps=step_df, snapshots=snap_df,
                     source=path, meta=meta)


def _check_step_order(ctx, steps: pd.DataFrame) -> None:
    """Step start times must not decrease with the step id (step-gap windows need it)."""
    back = np.flatnonzero(np.diff(steps["ts_start_s"].to_numpy()) < 0)
    if len(back):
        i = int(back[0]) + 1
        sid, prev = int(steps["step_id"].iloc[i]), int(steps["step_id"].iloc[i - 1])
        raise InputError(ctx.path, f"step {sid} starts at {steps['ts_start_s'].iloc[i]:.6f} s, before step {prev} "
                         f"({steps['ts_start_s'].iloc[i - 1]:.6f} s)", record=f"line {ctx.step_lines[sid]}, step {sid}",
                         field="step.ts_start_ns", expected="step start times non-decreasing with step.id")


def _warn_clock_mismatch(path, requests: pd.DataFrame) -> None:
    """API times come from the API process, journey times from the engine core: on one host
    they share the monotonic clock, so ARRIVED after QUEUED (or DEPARTED before FINISHED)
    means they do not. The reconstruction drops those requests' alpha windows."""
    early = int((requests["arrived_s"] > requests["queued_s"]).sum())
    late = int((requests["departed_s"] < requests["finished_s"]).sum())
    if early or late:
        warnings.warn(f"{path}: {early} request(s) with api.ARRIVED after journey.QUEUED and {late} with "
                      f"api.DEPARTED before journey.FINISHED of {len(requests)}: are the API server and the "
                      f"engine on different hosts (clocks)? Their arrival/departure delays are not used",
                      InputWarning, stacklevel=3)


def _typed(df: pd.DataFrame, plain: dict, nullable: dict) -> pd.DataFrame:
    for col, dt in plain.items():
        df[col] = df[col].astype(dt) if len(df) else pd.Series([], dtype=dt)
    for col, dt in nullable.items():
        df[col] = pd.array([None if (v is None or (isinstance(v, float) and math.isnan(v))) else int(v)
                            for v in df[col]], dtype=dt)
    for col in df.columns:
        if col not in plain and col not in nullable and df[col].dtype == object:
            df[col] = df[col].astype("string") if len(df) else pd.Series([], dtype="string")
    return df


def _api_span(ctx, span, lineno, api):
    attrs = ctx.attrs(span, lineno)
    rec = {"api_request_id": attrs.get("gen_ai.request.id"), "arrived_s": math.nan,
           "departed_s": math.nan, "aborted": False, "line": lineno}
    for ev in _list_of_objects(span.get("events"), ctx.path, f"line {lineno}", "events"):
        ea = ctx.attrs(ev, lineno, rec["api_request_id"])
        name = ev.get("name", "")
        ts = ctx.num(ea, "event.ts.monotonic", lineno, rec["api_request_id"], required=False, integer=False)
        if name == "api.ARRIVED" and ts is not None:
            rec["arrived_s"] = ts
        elif name == "api.DEPARTED" and ts is not None:
            rec["departed_s"] = ts
        elif name == "api.ABORTED":
            rec["aborted"] = True
    if rec["departed_s"] < rec["arrived_s"]:
        raise InputError(ctx.path, f"api.DEPARTED at {rec['departed_s']:.6f} s precedes api.ARRIVED at "
                         f"{rec['arrived_s']:.6f} s", record=f"line {lineno}, request {rec['api_request_id']}",
                         field="event.ts.monotonic", expected="ARRIVED <= DEPARTED")
    api[span.get("spanId") or f"line{lineno}:{rec['api_request_id']}"] = rec


def _core_span(ctx, span, lineno, core):
    attrs = ctx.attrs(span, lineno)
    rid = attrs.get("gen_ai.request.id")
    if not rid or not isinstance(rid, str):
        raise InputError(ctx.path, "llm_core span without request id" if not rid else f"request id {rid!r}",
                         record=f"line {lineno}", field="gen_ai.request.id", expected="the engine request id (a string)")
    entry = core.setdefault(rid, {"parent": span.get("parentSpanId") or None, "events": []})
    if not entry["parent"] and span.get("parentSpanId"):
        entry["parent"] = span["parentSpanId"]
    for ev in _list_of_objects(span.get("events"), ctx.path, f"line {lineno}, request {rid}", "events"):
        name = ev.get("name") if isinstance(ev.get("name"), str) else ""
        if not name.startswith("journey."):
            continue
        ea = ctx.attrs(ev, lineno, rid)
        etype = ea.get("event.type") or name.removeprefix("journey.")
        if etype not in JOURNEY_TYPES:
            raise InputError(ctx.path, f"unknown journey event type {etype!r}",
                             record=f"line {lineno}, request {rid}", field="event.type",
                             expected=" / ".join(JOURNEY_TYPES))
        ts = ctx.num(ea, "ts.monotonic", lineno, rid, required=False, integer=False)
        if ts is None:
            ns = ctx.num(ea, "ts.monotonic_ns", lineno, rid, required=False)
            if not ns:
                raise InputError(ctx.path, "journey event without a monotonic timestamp",
                                 record=f"line {lineno}, request {rid}", field="ts.monotonic",
                                 expected="seconds on the engine monotonic clock")
            ts = ns / 1e9
        step = ctx.num(ea, "scheduler.step", lineno, rid)
        vals = [ctx.num(ea, key, lineno, rid, required=False) for key in _JOURNEY_INT_ATTRS.values()]
        entry["events"].append((rid, etype, ts, step, ea.get("phase"), *vals,
                                ea.get("schedule.kind"), ea.get("finish.status"), lineno))


def _step_span(ctx, span, lineno, steps, snaps):
    for ev in _list_of_objects(span.get("events"), ctx.path, f"line {lineno}", "events"):
        name = ev.get("name", "")
        if name not in ("step.BATCH_SUMMARY", "step.REQUEST_SNAPSHOT"):
            continue
        ea = ctx.attrs(ev, lineno)
        sid = ctx.num(ea, "step.id", lineno)
        if name == "step.BATCH_SUMMARY":
            start_ns = ctx.num(ea, "step.ts_start_ns", lineno)
            end_ns = ctx.num(ea, "step.ts_end_ns", lineno)
            if end_ns < start_ns:
                raise InputError(ctx.path, f"step ends before it starts ({end_ns} < {start_ns})",
                                 record=f"line {lineno}, step {sid}", field="step.ts_end_ns",
                                 expected=">= step.ts_start_ns")
            vals = {c: ctx.num(ea, k, lineno, required=c in ("duration_us",)) for c, k in _STEP_ATTRS.items()}
            vals = {c: (-1 if v is None else v) for c, v in vals.items()}
            ratio = ctx.num(ea, "kv.usage_gpu_ratio", lineno, required=False, integer=False)
            row = (sid, start_ns / 1e9, end_ns / 1e9, vals["duration_us"], vals["running_depth"],
                   vals["waiting_depth"], vals["num_prefill_reqs"], vals["prefill_tokens"],
                   vals["num_decode_reqs"], vals["decode_tokens"], vals["scheduled_tokens"],
                   vals["num_finished"], vals["num_preempted"],
                   math.nan if ratio is None else ratio, vals["kv_blocks_total"], vals["kv_blocks_free"])
            steps.setdefault(sid, row)
            ctx.step_lines.setdefault(sid, lineno)
        else:
            rid = ea.get("request.id")
            if not rid:
                raise InputError(ctx.path, "snapshot without request id", record=f"line {lineno}, step {sid}",
                                 field="request.id", expected="the engine request id")
            vals = [ctx.num(ea, k, lineno, rid) for k in _SNAPSHOT_ATTRS.values()]
            eff = ctx.num(ea, "request.effective_prompt_len", lineno, rid, required=False)
            snaps.append((sid, rid, ea.get("request.phase"), *vals, eff))


_ORDER = ("QUEUED", "SCHEDULED", "FIRST_TOKEN", "FINISHED")


def _request_row(ctx, rid, api_rec, events) -> list:
    """Validate one request's sorted journey events and summarise them."""
    first: dict[str, tuple] = {}
    for ev in events:
        first.setdefault(ev[1], ev)
    # causal order of first occurrences: time and step never go backwards
    prev = None
    for et in _ORDER:
        if et not in first:
            continue
        ev = first[et]
        if prev is not None and (ev[2] < prev[2] or ev[3] < prev[3]):
            raise InputError(ctx.path,
                             f"timestamps go backwards: {et} at ts {ev[2]:.6f} s step {ev[3]} precedes "
                             f"{prev[1]} at ts {prev[2]:.6f} s step {prev[3]}",
                             record=f"line {ev[-1]}, request {rid}", field="ts.monotonic",
                             expected=" <= ".join(_ORDER))
        prev = ev
    fin = first.get("FINISHED")
    # prefer the last FINISHED (there should be one)
    fins = [e for e in events if e[1] == "FINISHED"]
    if fins:
        fin = fins[-1]
    col = {c: i for i, c in enumerate(JOURNEY_COLUMNS)}
    out_tokens = 0
    for e in events:
        v = e[col["decode_done_tokens"]]
        if v is not None:
            out_tokens = max(out_tokens, v)
    if fin is not None and fin[col["decode_done_tokens"]] is not None:
        out_tokens = fin[col["decode_done_tokens"]]
    if fin is not None and "FIRST_TOKEN" not in first and out_tokens > 0:
        raise InputError(ctx.path, f"request finished with {out_tokens} output tokens but has no FIRST_TOKEN event",
                         record=f"line {fin[-1]}, request {rid}", field="journey.FIRST_TOKEN",
                         expected="a FIRST_TOKEN event before FINISHED when decode.done_tokens > 0")
    prompt = max((e[col["prefill_total_tokens"]] or 0 for e in events), default=0)
    max_tok = next((e[col["decode_max_tokens"]] for e in reversed(events)
                    if e[col["decode_max_tokens"]] is not None), None)
    npre = max(max((e[col["num_preemptions"]] or 0 for e in events), default=0),
               sum(1 for e in events if e[1] == "PREEMPTED"))
    if fin is not None:
        status = fin[col["finish_status"]] or "finished"
    elif api_rec is not None and api_rec.get("aborted"):
        status = "aborted"
    else:
        status = "unfinished"

    def t(et):
        return first[et][2] if et in first else math.nan

    def s(et):
        return float(first[et][3]) if et in first else math.nan

    sched = next((e for e in events if e[1] == "SCHEDULED" and (e[col["schedule_kind"]] or "FIRST") == "FIRST"),
                 first.get("SCHEDULED"))
    return [
        rid, (api_rec or {}).get("api_request_id") or strip_engine_suffix(rid),
        (api_rec or {}).get("arrived_s", math.nan), (api_rec or {}).get("departed_s", math.nan),
        t("QUEUED"), sched[2] if sched else math.nan, t("FIRST_TOKEN"),
        fin[2] if fin else math.nan,
        s("QUEUED"), float(sched[3]) if sched else math.nan, s("FIRST_TOKEN"),
        float(fin[3]) if fin else math.nan,
        prompt, out_tokens, max_tok, npre, status,
    ]
