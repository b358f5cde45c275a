"""Reader for vLLM KV-cache event streams (`kv_events.jsonl`, positional arrays).

Each line is `[ts, events, data_parallel_rank?, scheduler_step?]`; each event is
`[TypeName, field1, ...]` (see data_specs/kv-events.md). The file is streamed.
"""

from __future__ import annotations

import base64
import binascii
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from bayesblis.errors import EmptyInputError, InputError
from bayesblis.io.otel import iter_json_lines

EVENT_COLUMNS = ["line", "ts_s", "event_type", "medium", "source_medium", "dest_medium",
                 "block_count", "num_hashes", "transfer_id", "request_id", "success",
                 "scheduler_step", "eviction_reason"]
MEDIA = ("GPU", "CPU", "DISK", "LMCACHE")
MASK64 = (1 << 64) - 1

# Field positions after the tag, per event type.
LAYOUTS = {
    "BlockStored": ("block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id",
                    "medium", "lora_name"),
    "BlockRemoved": ("block_hashes", "medium"),
    "AllBlocksCleared": (),
    "TransferInitiated": ("transfer_id", "request_id", "source_medium", "dest_medium",
                          "block_count", "scheduler_step"),
    "TransferCompleted": ("transfer_id", "request_id", "source_medium", "dest_medium",
                          "block_count", "success", "scheduler_step"),
    "RemoteTransferInitiated": ("transfer_id", "request_id", "connector_type", "source_rank",
                                "dest_rank", "block_count"),
    "RemoteTransferCompleted": ("transfer_id", "request_id", "connector_type", "source_rank",
                                "dest_rank", "block_count", "success"),
    "CacheLoadCommitted": ("request_id", "medium", "block_count", "scheduler_step"),
    "CacheStoreCommitted": ("request_id", "medium", "block_count", "scheduler_step"),
    "CacheEviction": ("medium", "blocks_evicted", "eviction_reason", "scheduler_step", "block_hashes"),
}


def normalize_hash(h) -> int:
    """Int hash or base64 string of the raw hash bytes -> the low 64 bits as an int."""
    if isinstance(h, bool):
        raise ValueError("a boolean is not a block hash")
    if isinstance(h, int):
        return h & MASK64
    if isinstance(h, str):
        try:
            raw = base64.b64decode(h, validate=True)
        except (binascii.Error, ValueError):
            raise ValueError(f"not base64: {h!r}") from None
        return int.from_bytes(raw, "big") & MASK64
    raise ValueError(f"unsupported hash type {type(h).__name__}")


@dataclass
class KvEvents:
    """One KV-event stream: an `events` table plus per-event hash lists for residency."""

    events: pd.DataFrame
    hashes: dict = field(default_factory=dict)   # row position -> list of normalized hashes
    source: Path | None = None
    meta: dict = field(default_factory=dict)

    def deduped(self) -> pd.DataFrame:
        """Events with duplicate TransferInitiated/TransferCompleted (same type and
        transfer_id) dropped, keeping the first."""
        ev = self.events
        is_tr = ev["event_type"].isin(["TransferInitiated", "TransferCompleted"]) & ev["transfer_id"].notna()
        dup = is_tr & ev.duplicated(subset=["event_type", "transfer_id"], keep="first")
        return ev[~dup]

    def cpu_residency_blocks(self) -> pd.Series:
        """CPU-tier resident block count after each line (index: line's ts_s), tracked
        from BlockStored(CPU) / BlockRemoved(CPU) hashes, not from transfer sums."""
        resident: set[int] = set()
        ts_out, counts = [], []
        ev = self.events
        is_cpu = (ev["medium"] == "CPU").fillna(False).to_numpy(dtype=bool)
        etype = ev["event_type"].to_numpy(dtype=object)
        mask = is_cpu & np.isin(etype, ["BlockStored", "BlockRemoved"])
        lines, ts = ev["line"].to_numpy(), ev["ts_s"].to_numpy()
        last_line = None
        for pos in np.flatnonzero(mask):
            hs = self.hashes.get(int(pos), [])
            if etype[pos] == "BlockStored":
                resident.update(hs)
            else:
                resident.difference_update(hs)
            if last_line == lines[pos]:
                counts[-1] = len(resident)
            else:
                ts_out.append(float(ts[pos]))
                counts.append(len(resident))
                last_line = lines[pos]
        return pd.Series(counts, index=pd.Index(ts_out, name="ts_s"), name="cpu_blocks", dtype="int64")

    def offload_blocks_per_step(self) -> pd.Series:
        """Blocks moved GPU<->CPU per initiating scheduler step (deduplicated
        TransferInitiated, successful or not), indexed by step."""
        ev = self.deduped()
        tr = ev[(ev["event_type"] == "TransferInitiated") & ev["scheduler_step"].notna()
                & ev["source_medium"].isin(["GPU", "CPU"]) & ev["dest_medium"].isin(["GPU", "CPU"])
                & (ev["source_medium"] != ev["dest_medium"])]
        out = tr.groupby(tr["scheduler_step"].astype("int64"))["block_count"].sum().astype("int64")
        out.index.name = "step"
        out.name = "offload_blocks"
        return out


def _int_or_none(v, path, lineno, fld):
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, float) and not v.is_integer()):
        raise InputError(path, f"not an integer: {v!r}", record=f"line {lineno}", field=fld, expected="an integer")
    if v < 0:
        raise InputError(path, f"negative value {v}", record=f"line {lineno}", field=fld, expected=">= 0")
    return int(v)


def _str_or_none(v, path, lineno, fld):
    if v is not None and not isinstance(v, str):
        raise InputError(path, f"invalid value {v!r}", record=f"line {lineno}", field=fld, expected="a string or null")
    return v


def parse_event(ev, ts_s: float, lineno: int, path=None) -> tuple[list, list | None]:
    """One positional event -> (row in EVENT_COLUMNS order, normalized hashes or None)."""
    if not isinstance(ev, list) or not ev or not isinstance(ev[0], str):
        raise InputError(path, f"event is not a tagged array: {str(ev)[:80]}", record=f"line {lineno}",
                         field="events[]", expected='["TypeName", field, ...]')
    etype = ev[0]
    layout = LAYOUTS.get(etype)
    if layout is None:
        # Unknown event type from a newer emitter: keep the tag, no fields.
        return [lineno, ts_s, etype] + [None] * (len(EVENT_COLUMNS) - 3), None
    vals = dict(zip(layout, ev[1:]))  # trailing fields may be missing -> None
    hashes = None
    if "block_hashes" in vals and vals["block_hashes"] is not None:
        if not isinstance(vals["block_hashes"], list):
            raise InputError(path, f"invalid value {vals['block_hashes']!r}", record=f"line {lineno}",
                             field=f"{etype}.block_hashes", expected="a list of int or base64 string hashes")
        try:
            hashes = [normalize_hash(h) for h in vals["block_hashes"]]
        except (ValueError, TypeError) as exc:
            raise InputError(path, str(exc), record=f"line {lineno}", field=f"{etype}.block_hashes",
                             expected="int or base64 string hashes") from None
    for key in ("medium", "source_medium", "dest_medium", "request_id", "eviction_reason"):
        _str_or_none(vals.get(key), path, lineno, f"{etype}.{key}")
    if not isinstance(vals.get("success"), (bool, type(None))):
        raise InputError(path, f"invalid value {vals['success']!r}", record=f"line {lineno}",
                         field=f"{etype}.success", expected="true, false or null")
    medium = vals.get("medium")
    count = vals.get("block_count", vals.get("blocks_evicted"))
    if etype in ("BlockStored", "BlockRemoved") and hashes is not None:
        count = len(hashes)
    success = vals.get("success")
    row = [
        lineno, ts_s, etype, medium, vals.get("source_medium"), vals.get("dest_medium"),
        _int_or_none(count, path, lineno, f"{etype}.block_count"),
        None if hashes is None else len(hashes),
        _int_or_none(vals.get("transfer_id"), path, lineno, f"{etype}.transfer_id"),
        vals.get("request_id"), None if success is None else bool(success),
        _int_or_none(vals.get("scheduler_step"), path, lineno, f"{etype}.scheduler_step"),
        vals.get("eviction_reason"),
    ]
    return row, hashes


def read_kv_events(path, *, allow_multiple_runs: bool = False, skip_malformed_tail: bool = True) -> KvEvents:
    """Read a `kv_events.jsonl` stream. `ts` going backwards means the (append-mode)
    file holds several runs: an InputError unless `allow_multiple_runs`."""
    path = Path(path)
    rows: list[list] = []
    hashes: dict[int, list] = {}
    prev_ts = -math.inf
    n_lines = 0
    n_runs = 1
    for lineno, obj in iter_json_lines(path, skip_malformed_tail=skip_malformed_tail, kind="KV-event JSON"):
        n_lines += 1
        if not isinstance(obj, list) or len(obj) < 2 or not isinstance(obj[1], list):
            raise InputError(path, "not a KV-event batch", record=f"line {lineno}",
                             expected="a JSON array [ts, events, dp_rank?, step?] per line (kv_events.jsonl)")
        ts = obj[0]
        if isinstance(ts, bool) or not isinstance(ts, (int, float)) or not 0 <= ts < math.inf:
            raise InputError(path, f"bad timestamp {ts!r}", record=f"line {lineno}", field="ts",
                             expected="finite epoch seconds >= 0")
        if ts < prev_ts:
            if not allow_multiple_runs:
                raise InputError(path, f"ts jumps backwards ({ts} < {prev_ts}): the file holds several runs "
                                 "(the subscriber appends); split it or pass allow_multiple_runs=True",
                                 record=f"line {lineno}", field="ts", expected="non-decreasing ts")
            n_runs += 1
        prev_ts = ts
        for ev in obj[1]:
            row, hs = parse_event(ev, float(ts), lineno, path)
            if hs is not None:
                hashes[len(rows)] = hs
            rows.append(row)
    if n_lines == 0:
        raise EmptyInputError(path, "no KV-event lines", expected="JSON arrays, one batch per line")
    df = pd.DataFrame(rows, columns=EVENT_COLUMNS)
    for col in ("block_count", "num_hashes", "transfer_id", "scheduler_step"):
        df[col] = pd.array([None if v is None or v != v else int(v) for v in df[col]], dtype="Int64")
    df["success"] = pd.array(list(df["success"]), dtype="boolean")
    df["line"] = df["line"].astype("int64")
    df["ts_s"] = df["ts_s"].astype("float64")
    for col in ("event_type", "medium", "source_medium", "dest_medium", "request_id", "eviction_reason"):
        df[col] = df[col].astype("string")
    return KvEvents(events=df, hashes=hashes, source=path,
                    meta={"n_lines": n_lines, "n_events": len(df), "n_runs": n_runs})
