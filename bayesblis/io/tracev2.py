"""Reader for BLIS TraceV2/V3 (header YAML + data CSV + optional ITL CSV).

Columns are located by header name (optional columns shift positions). Old 22-column
v2 files get defaults for the missing columns. Times become seconds (`*_s`).
"""

from __future__ import annotations

import csv
import io
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from bayesblis.errors import EmptyInputError, InputError, InputWarning
from bayesblis.io.text import load_yaml_checked, read_text_checked, type_name

HEADER_KEYS = {
    "trace_version", "time_unit", "created_at", "mode", "warm_up_requests", "workload_seed",
    "workload_spec", "session_context_growth", "server", "network", "goodput_slo_targets",
    "kv_offload", "observed_kv_metrics",
}
REQUIRED_HEADER = ("trace_version", "mode")
MODES = ("real", "generated", "replayed")

STR_COLS = ["client_id", "tenant_id", "slo_class", "session_id", "prefix_group", "model",
            "status", "error_message", "finish_reason", "x_request_id", "adapter"]
INT_COLS = ["request_id", "round_index", "prefix_length", "input_tokens", "output_tokens",
            "text_tokens", "image_tokens", "audio_tokens", "video_tokens", "server_input_tokens",
            "num_chunks", "vllm_priority"]
US_COLS = ["deadline_us", "slo_target_us", "arrival_time_us", "send_time_us",
           "first_chunk_time_us", "last_chunk_time_us", "think_time_us"]
BASE_COLUMNS = [
    "request_id", "client_id", "tenant_id", "slo_class", "session_id", "round_index",
    "prefix_group", "prefix_length", "streaming", "input_tokens", "output_tokens",
    "text_tokens", "image_tokens", "audio_tokens", "video_tokens", "reason_ratio", "model",
    "deadline_us", "server_input_tokens", "arrival_time_us", "send_time_us",
    "first_chunk_time_us", "last_chunk_time_us", "num_chunks", "status", "error_message",
    "finish_reason",
]
OPTIONAL_COLUMNS = ["vllm_priority", "slo_target_us", "x_request_id", "adapter", "think_time_us"]
OLD_V2_MISSING = ["prefix_length", "model", "deadline_us", "server_input_tokens", "finish_reason"]
REQUIRED_COLUMNS = ["request_id", "input_tokens", "output_tokens", "arrival_time_us", "status"]
DEFAULTS = {c: "" for c in STR_COLS} | {c: 0 for c in INT_COLS + US_COLS} | {
    "streaming": False, "reason_ratio": 0.0, "status": "ok"}


@dataclass
class TraceV2:
    """A TraceV2/V3 trace: header dict, per-request table (times in s), ITL table."""

    header: dict
    requests: pd.DataFrame
    itl: pd.DataFrame | None = None
    source: Path | None = None
    meta: dict = field(default_factory=dict)

    @property
    def mode(self) -> str:
        return self.header.get("mode", "")

    def ok(self) -> pd.DataFrame:
        """Rows with status 'ok' (the only ones with valid latencies)."""
        return self.requests[self.requests["status"] == "ok"]

    def by_status(self, *statuses: str) -> pd.DataFrame:
        return self.requests[self.requests["status"].isin(statuses)]

    def after_warm_up(self) -> pd.DataFrame:
        """Rows with request_id >= warm_up_requests (what `blis calibrate` keeps)."""
        return self.requests[self.requests["request_id"] >= int(self.header.get("warm_up_requests") or 0)]

    def itl_s(self) -> pd.DataFrame:
        """Per-chunk gaps (request_id, chunk_index, itl_s) from the ITL table."""
        if self.itl is None or self.itl.empty:
            return pd.DataFrame(columns=["request_id", "chunk_index", "itl_s"])
        itl = self.itl.sort_values(["request_id", "chunk_index"])
        gaps = itl.groupby("request_id")["timestamp_s"].diff()
        out = itl.assign(itl_s=gaps).dropna(subset=["itl_s"])
        return out[["request_id", "chunk_index", "itl_s"]].reset_index(drop=True)


def read_header(path) -> dict:
    """Parse and check the header YAML; unknown keys are kept with a warning."""
    path = Path(path)
    header = load_yaml_checked(path, expected="a TraceV2 header (YAML mapping)")
    if not isinstance(header, dict):
        raise InputError(path, f"not a YAML mapping but {type_name(header)}", expected="a TraceV2 header")
    for key in REQUIRED_HEADER:
        if key not in header:
            raise InputError(path, "required key missing", field=key, expected="a TraceV2/V3 header")
    if header["trace_version"] not in (2, 3):
        raise InputError(path, f"unsupported version {header['trace_version']!r}", field="trace_version",
                         expected="2 or 3")
    if header["mode"] not in MODES:
        raise InputError(path, f"unknown mode {header['mode']!r}", field="mode", expected=" / ".join(MODES))
    if not isinstance(header.get("server") or {}, dict):
        raise InputError(path, f"not a mapping but {type_name(header['server'])}", field="server",
                         expected="server settings (model, tensor_parallel, ...)")
    warm_up = header.get("warm_up_requests")
    if warm_up is not None and (isinstance(warm_up, bool) or not isinstance(warm_up, int) or warm_up < 0):
        raise InputError(path, f"invalid value {warm_up!r}", field="warm_up_requests", expected="an integer >= 0")
    unknown = sorted(set(header) - HEADER_KEYS)
    if unknown:
        warnings.warn(f"{path}: unknown TraceV2 header key(s) {unknown} kept as-is", InputWarning, stacklevel=2)
    return header


def read_trace_v2(header_yaml, data_csv, itl_csv=None) -> TraceV2:
    """Read a TraceV2/V3 trace. `itl_csv` defaults to `<data_csv>.itl.csv` if present."""
    header_path, data_path = Path(header_yaml), Path(data_csv)
    header = read_header(header_path)
    raw = _read_csv(data_path, "a TraceV2 data CSV with a header row")
    missing = [c for c in REQUIRED_COLUMNS if c not in raw.columns]
    if missing:
        raise InputError(data_path, f"column(s) {missing} missing (found {list(raw.columns)[:8]}...)",
                         record="header row", field=missing[0], expected="a TraceV2 data CSV header")
    extra = [c for c in raw.columns if c not in BASE_COLUMNS and c not in OPTIONAL_COLUMNS]
    old_v2 = all(c not in raw.columns for c in OLD_V2_MISSING)
    out = pd.DataFrame(index=raw.index)
    for col in BASE_COLUMNS + OPTIONAL_COLUMNS:
        if col not in raw.columns:
            if col in OPTIONAL_COLUMNS and col not in ("vllm_priority",):
                continue
            out[col] = DEFAULTS[col]
            continue
        s = raw[col]
        if col in STR_COLS:
            out[col] = s.astype(str)
        elif col == "streaming":
            low = s.str.strip().str.lower()
            bad = ~low.isin(["true", "false", ""])
            if bad.any():
                _raise_bad(bad, s, data_path, col, "true/false")
            out[col] = low == "true"
        elif col == "reason_ratio":
            out[col] = _numeric(s, data_path, col, float, "a number in [0, 1]")
        else:
            out[col] = _numeric(s, data_path, col, int, "an integer >= 0")
    for col in extra:
        out[col] = raw[col]
    if len(out) == 0:
        raise EmptyInputError(data_path, "no rows", expected="one row per request")
    for col in INT_COLS + US_COLS:
        if col in out and (out[col] < 0).any():
            _raise_bad(out[col] < 0, out[col], data_path, col, "a value >= 0")
    # seconds
    for col in US_COLS:
        if col in out:
            out[col.removesuffix("_us") + "_s"] = out[col].astype("float64") / 1e6
    mode = header["mode"]
    ok = out["status"] == "ok"
    first = out["first_chunk_time_us"].astype("float64")
    last = out["last_chunk_time_us"].astype("float64")
    start = out["send_time_us"].astype("float64")
    if mode != "real":
        start = start.where(start > 0, out["arrival_time_us"].astype("float64"))
    have = ok & (first > 0) & (last > 0)
    out["ttft_s"] = np.where(have, (first - start) / 1e6, np.nan)
    out["e2e_s"] = np.where(have, (last - start) / 1e6, np.nan)
    for bad, col, message in ((have & (out["ttft_s"] < 0), "first_chunk_time_us", "first chunk before the start"),
                              (have & (out["e2e_s"] < out["ttft_s"]), "last_chunk_time_us",
                               "last chunk before the first")):
        if bad.any():
            i = int(np.flatnonzero(bad.to_numpy())[0])
            raise InputError(data_path, f"{message} (start {int(start.iloc[i])} us, first chunk {int(first.iloc[i])} us, "
                             f"last chunk {int(last.iloc[i])} us)", record=f"line {i + 2}, request {out['request_id'].iloc[i]}",
                             field=col, expected="start <= first_chunk_time_us <= last_chunk_time_us, start = "
                             + ("send_time_us" if mode == "real" else "send_time_us, else arrival_time_us"))
    itl = None
    if itl_csv is None:
        cand = Path(str(data_path) + ".itl.csv")
        itl_csv = cand if cand.is_file() else None
    if itl_csv is not None:
        itl = read_itl(itl_csv)
    meta = {"old_v2_22_columns": old_v2, "extra_columns": extra, "n_rows": len(out)}
    return TraceV2(header=header, requests=out.reset_index(drop=True), itl=itl, source=data_path, meta=meta)


def read_itl(path) -> pd.DataFrame:
    """ITL CSV -> (request_id, chunk_index, timestamp_us, timestamp_s); checks order."""
    path = Path(path)
    df = _read_csv(path, "an ITL CSV request_id,chunk_index,timestamp_us")
    for col in ("request_id", "chunk_index", "timestamp_us"):
        if col not in df.columns:
            raise InputError(path, "column missing", record="header row", field=col,
                             expected="request_id,chunk_index,timestamp_us")
    out = pd.DataFrame({c: _numeric(df[c], path, c, int, "an integer >= 0")
                        for c in ("request_id", "chunk_index", "timestamp_us")})
    out["timestamp_s"] = out["timestamp_us"] / 1e6
    srt = out.sort_values(["request_id", "chunk_index"])
    d = srt.groupby("request_id")["timestamp_us"].diff()
    if (d < 0).any():
        i = d[d < 0].index[0]
        raise InputError(path, "chunk timestamps go backwards", record=f"line {i + 2}, request {out.loc[i, 'request_id']}",
                         field="timestamp_us", expected="non-decreasing timestamps per request")
    return out


def _read_csv(path: Path, expected: str) -> pd.DataFrame:
    """All cells of a CSV as strings; errors for undecodable bytes, an empty file, and rows
    whose field count differs from the header's (a truncated last row, a stray comma)."""
    text = read_text_checked(path, expected=expected)
    rows = csv.reader(io.StringIO(text))
    n_cols = len(next(rows))
    for row in rows:
        if row and len(row) != n_cols:
            raise InputError(path, f"{len(row)} fields but the header has {n_cols}", record=f"line {rows.line_num}",
                             expected="one value per header column (a truncated or hand-edited file?)")
    try:
        df = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False, na_filter=False)
    except pd.errors.ParserError as exc:
        raise InputError(path, f"malformed CSV: {exc}", expected=expected) from None
    return df


def _numeric(s: pd.Series, path, col, kind, expected):
    s2 = s.str.strip()
    s2 = s2.where(s2 != "", "0")
    num = pd.to_numeric(s2, errors="coerce")
    bad = num.isna() | ~np.isfinite(num.astype("float64"))
    if kind is int:
        bad |= (num.astype("float64") % 1 != 0)
    if bad.any():
        _raise_bad(bad, s, path, col, expected)
    return num.astype("int64") if kind is int else num.astype("float64")


def _raise_bad(mask, values, path, col, expected):
    i = int(np.flatnonzero(np.asarray(mask))[0])
    value = values.iloc[i]
    value = value.item() if isinstance(value, np.generic) else value
    message = f"negative value {value}" if isinstance(value, int) and value < 0 else f"invalid value {value!r}"
    raise InputError(path, message, record=f"line {i + 2}", field=col, expected=expected)
