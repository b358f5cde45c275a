"""Reader for BLIS TraceV2/V3 (header YAML + data CSV + optional ITL CSV).

Columns are located by header name (optional columns shift positions). Old 22-column
v2 files get defaults for the missing columns. Times become seconds (`*_s`).
"""

from __future__ import annotations

import csv
import io
import json
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


# ---------------------------------------------------------------------- server settings
SERVER_KEYS = {"model": "model", "tensor_parallel": "tp", "max_num_seqs": "max_num_seqs",
               "block_size": "block_size", "gpu_memory_utilization": "gpu_memory_utilization",
               "max_model_len": "max_model_len"}
"""BLIS `server:` keys (TraceServerConfig) -> `VllmSettings` fields."""

SERVER_EXTENSIONS = ("kv_blocks_total_gpu", "max_num_batched_tokens", "enable_prefix_caching",
                     "enable_chunked_prefill", "async_scheduling", "kv_offloading_size_gb",
                     "dtype", "ep", "hardware")
"""`server:` keys bayesblis reads beyond BLIS's own (BLIS's strict reader rejects them; a
`deployment.yaml` beside the header carries the same settings in a file BLIS never reads):
`VllmSettings` fields under their own names, and `hardware` (GPU catalog name)."""

SERVER_IGNORED = ("type",)


def server_settings(header: dict, path=None) -> dict:
    """The deployment settings of a header's `server:` block: `VllmSettings` fields (BLIS
    keys renamed, `SERVER_EXTENSIONS` as they are) plus `hardware` when given; a
    `kv_offload.cpu_bytes_to_use` becomes `kv_offloading_size_gb` (GiB). Unknown `server`
    keys are left out with a warning; invalid values raise `InputError` naming
    `server.<key>`."""
    from bayesblis.io.vllm_settings import VllmSettings

    server = header.get("server") or {}
    out: dict = {}
    for key, value in server.items():
        if value is None or value == "" or key in SERVER_IGNORED:
            continue
        if key in SERVER_KEYS:
            if value == 0:   # BLIS omits unset fields (omitempty); a 0 means "not recorded"
                continue
            out[SERVER_KEYS[key]] = value
        elif key in SERVER_EXTENSIONS:
            out[key] = value
        else:
            warnings.warn(f"{path or '<header>'}: unknown server key '{key}' left out "
                          f"(known: {sorted(SERVER_KEYS) + list(SERVER_EXTENSIONS)})",
                          InputWarning, stacklevel=2)
    offload = header.get("kv_offload") or {}
    if isinstance(offload, dict) and offload.get("cpu_bytes_to_use") and \
            "kv_offloading_size_gb" not in out:
        cpu = offload["cpu_bytes_to_use"]
        if isinstance(cpu, bool) or not isinstance(cpu, (int, float)) or cpu < 0:
            raise InputError(path, f"invalid value {cpu!r}", field="kv_offload.cpu_bytes_to_use",
                             expected="a number of bytes >= 0")
        out["kv_offloading_size_gb"] = float(cpu) / 2 ** 30
    hardware = out.pop("hardware", None)
    if hardware is not None and not isinstance(hardware, str):
        raise InputError(path, f"invalid value {hardware!r}", field="server.hardware",
                         expected="a GPU catalog name (e.g. H100)")
    try:
        VllmSettings(**out)
    except InputError as exc:
        theirs = {ours: theirs for theirs, ours in SERVER_KEYS.items()}
        raise InputError(path, exc.message, field=f"server.{theirs.get(exc.field, exc.field)}",
                         expected=exc.expected) from None
    except TypeError as exc:   # not a VllmSettings field: cannot happen for the keys above
        raise InputError(path, str(exc), field="server", expected="server settings") from None
    if hardware:
        out["hardware"] = hardware
    return out


# ---------------------------------------------------------------------- client-side view
def shared_prefix_tokens(rows: pd.DataFrame) -> np.ndarray:
    """Each trace row's shared prefix: `prefix_length` for rows of a prefix group, else 0."""
    return np.where(rows["prefix_group"].astype(str).to_numpy() != "",
                    rows["prefix_length"].to_numpy(np.int64), 0)


def prompt_tokens(rows: pd.DataFrame) -> np.ndarray:
    """Each trace row's whole prompt: `server_input_tokens` when recorded, else
    `input_tokens` (which excludes the shared prefix) + its shared prefix."""
    server_in = rows["server_input_tokens"].to_numpy(np.int64)
    return np.where(server_in > 0, server_in,
                    rows["input_tokens"].to_numpy(np.int64) + shared_prefix_tokens(rows))


CLIENT_COLUMNS = ["request_index", "arrival_s", "prompt_tokens", "output_tokens", "prefix_group",
                  "has_error", "e2e_s", "ttft_s", "stage", "prefix_tokens"]
"""The client-side request table of a trace (`client_requests`): the columns of an
inference-perf run's requests (`io.inference_perf.REQUEST_COLUMNS`) plus `prefix_tokens`."""


def client_requests(requests: pd.DataFrame, header: dict, path=None) -> pd.DataFrame:
    """A TraceV2 request table (`TraceV2.requests`, or a dataset's `trace_v2` source table)
    as the client-side request table of an inference-perf run (CLIENT_COLUMNS), sorted by
    `request_index` (= `request_id`):

    - `arrival_s`: when the request was sent, on the run's own clock. Real mode: send times
      are client epoch µs, the run starts at the median of `send_time_us - arrival_time_us`
      (its scheduled offset), rows without a send time use their scheduled arrival.
      Generated/replayed: `send_time_us`, else `arrival_time_us` (simulator clock).
    - `prompt_tokens`: `server_input_tokens` when recorded, else `prefix_length +
      input_tokens`; `prefix_tokens`: `prefix_length` of rows in a prefix group, else 0.
    - `ttft_s`, `e2e_s` from the chunk times (NaN unless `status` is ok); `has_error`:
      status other than ok.
    - `stage`: an extra integer `stage` column when the file has one (written by
      `inference_perf_to_trace_v2`), else 0 (one stage: BLIS traces do not record the load
      stages of their workload).

    A table that already has these columns is returned as it is. `path` (the data CSV)
    names the file in errors."""
    if {"arrival_s", "prompt_tokens", "request_index"} <= set(requests.columns):
        return requests
    req = requests
    arrival_us = req["arrival_time_us"].to_numpy(np.int64)
    send_us = req["send_time_us"].to_numpy(np.int64)
    has_send = send_us > 0
    if header.get("mode") == "real":
        origin = int(np.median(send_us[has_send] - arrival_us[has_send])) if has_send.any() else 0
        start_us = np.where(has_send, send_us - origin, arrival_us)
    else:
        start_us = np.where(has_send, send_us, arrival_us)
    prefix = shared_prefix_tokens(req)
    prompt = prompt_tokens(req)
    ok = (req["status"].astype(str) == "ok").to_numpy()
    stage = np.zeros(len(req), np.int64)
    if "stage" in req.columns:
        values = pd.to_numeric(req["stage"].astype(str).str.strip(), errors="coerce")
        if values.isna().any() or (values < 0).any() or (values % 1 != 0).any():
            i = int(np.flatnonzero((values.isna() | (values < 0) | (values % 1 != 0)).to_numpy())[0])
            raise InputError(path, f"invalid value {req['stage'].iloc[i]!r}",
                             record=f"request {req['request_id'].iloc[i]}", field="stage",
                             expected="an integer load stage >= 0")
        stage = values.to_numpy().astype(np.int64)
    out = pd.DataFrame({
        "request_index": req["request_id"].to_numpy(np.int64),
        "arrival_s": start_us / 1e6,
        "prompt_tokens": prompt.astype(np.int64),
        "output_tokens": req["output_tokens"].to_numpy(np.int64),
        "prefix_group": req["prefix_group"].astype(str).to_numpy(),
        "has_error": ~ok,
        "e2e_s": np.where(ok, req["e2e_s"].to_numpy(float), np.nan),
        "ttft_s": np.where(ok, req["ttft_s"].to_numpy(float), np.nan),
        "stage": stage,
        "prefix_tokens": prefix.astype(np.int64),
    })
    return out.sort_values("request_index", kind="stable", ignore_index=True)


# ---------------------------------------------------------------------- writing
def trace_v2_text(header: dict, rows: pd.DataFrame) -> tuple[str, str]:
    """(header YAML, data CSV) text of a TraceV3 trace: `rows` needs the BASE_COLUMNS (any
    others, e.g. `stage`, are written after them)."""
    import yaml

    missing = [c for c in BASE_COLUMNS if c not in rows.columns]
    if missing:
        raise ValueError(f"rows lack TraceV2 columns {missing}")
    cols = BASE_COLUMNS + [c for c in rows.columns if c not in BASE_COLUMNS]
    body = rows[cols].copy()
    if "streaming" in body:
        body["streaming"] = body["streaming"].map(lambda v: "true" if bool(v) else "false")
    buf = io.StringIO()
    body.to_csv(buf, index=False, lineterminator="\n")
    return yaml.safe_dump(header, sort_keys=False), buf.getvalue()


def write_trace_v2(header_path, header: dict, rows: pd.DataFrame) -> tuple[Path, Path]:
    """Write `<stem>.yaml` and `<stem>.csv` (atomically, each file) and return both paths."""
    from bayesblis.atomic import write_text

    header_path = Path(header_path)
    if header_path.suffix.lower() not in (".yaml", ".yml"):
        raise ValueError(f"{header_path}: a TraceV2 header path ends in .yaml")
    data_path = header_path.with_suffix(".csv")
    head, data = trace_v2_text(header, rows)
    write_text(data_path, data)
    write_text(header_path, head)
    return header_path, data_path


EPOCH_US = 1_777_000_000_000_000
"""Client epoch (µs) of the run start in traces written from an inference-perf run, whose
times are offsets from its first request."""


def inference_perf_to_trace_v2(folder, header_path, *, hardware: str | None = None,
                               epoch_us: int = EPOCH_US) -> tuple[Path, Path]:
    """Write an inference-perf run as a real-mode TraceV3 trace (`blis observe` layout).

    Every request keeps its arrival (send = epoch + `arrival_time_us`, scheduled arrival =
    `arrival_time_us`), token counts (`server_input_tokens` = the prompt,
    `input_tokens` = the prompt less the shared system prompt of prefix-group rows,
    `prefix_length` = the profile's `system_prompt_len`; `output_tokens` the client's recorded
    count, as a client-side trace records it), chunk times (send + TTFT, send +
    E2E, rounded to µs) and error flag (`status` error). The deployment goes to the
    `server:` block (BLIS keys plus `kv_blocks_total_gpu`, `max_num_batched_tokens`,
    `enable_prefix_caching`, `async_scheduling` and `hardware` when given) and the load
    stage of each request to an extra `stage` column, so that `client_requests` gives back
    the run's request table."""
    from bayesblis.io.inference_perf import read_inference_perf

    exp = read_inference_perf(folder)
    req = exp.requests
    shared = ((exp.profile.get("data") or {}).get("shared_prefix") or {})
    system = int(shared.get("system_prompt_len") or 0)
    group = req["prefix_group"].fillna("").astype(str).to_numpy()
    prompt = req["prompt_tokens"].to_numpy(np.int64)
    prefix = np.where(group != "", np.minimum(system, prompt), 0)
    arrival_us = np.round(req["arrival_s"].to_numpy(float) * 1e6).astype(np.int64)
    send = epoch_us + arrival_us
    ok = ~req["has_error"].to_numpy(bool)
    first = np.where(ok, send + np.round(np.nan_to_num(req["ttft_s"].to_numpy(float)) * 1e6), 0)
    last = np.where(ok, send + np.round(np.nan_to_num(req["e2e_s"].to_numpy(float)) * 1e6), 0)
    out_tok = req["output_tokens"].to_numpy(np.int64)   # the client's count, as observe records
    model = exp.settings.model or exp.model_name or ""
    rows = pd.DataFrame({
        "request_id": req["request_index"].to_numpy(np.int64), "client_id": "", "tenant_id": "",
        "slo_class": "", "session_id": "", "round_index": 0, "prefix_group": group,
        "prefix_length": prefix, "streaming": True, "input_tokens": prompt - prefix,
        "output_tokens": out_tok, "text_tokens": prompt - prefix, "image_tokens": 0,
        "audio_tokens": 0, "video_tokens": 0, "reason_ratio": 0.0, "model": model,
        "deadline_us": 0, "server_input_tokens": prompt, "arrival_time_us": arrival_us,
        "send_time_us": send, "first_chunk_time_us": first.astype(np.int64),
        "last_chunk_time_us": last.astype(np.int64),
        "num_chunks": np.where(ok, out_tok + 1, 0), "status": np.where(ok, "ok", "error"),
        "error_message": "", "finish_reason": np.where(ok, "length", ""),
        "stage": req["stage"].to_numpy(np.int64)})
    s = exp.settings
    server = {"type": "vllm", "model": model, "tensor_parallel": int(s.tp),
              "max_num_seqs": int(s.max_num_seqs), "block_size": int(s.block_size),
              "gpu_memory_utilization": float(s.gpu_memory_utilization)}
    if s.max_model_len:
        server["max_model_len"] = int(s.max_model_len)
    server.update({"max_num_batched_tokens": int(s.max_num_batched_tokens),
                   "enable_prefix_caching": bool(s.enable_prefix_caching),
                   "async_scheduling": bool(s.async_scheduling)})
    if s.kv_blocks_total_gpu:
        server["kv_blocks_total_gpu"] = int(s.kv_blocks_total_gpu)
    if hardware:
        server["hardware"] = str(hardware)
    header = {"trace_version": 3, "time_unit": "us", "mode": "real", "warm_up_requests": 0,
              "workload_spec": f"inference-perf:{exp.name}", "server": server}
    return write_trace_v2(header_path, header, rows)


def trace_v2_to_inference_perf(header_path, folder, *, data_csv=None,
                               hardware: str | None = None) -> Path:
    """Write a TraceV2/V3 trace as an inference-perf experiment folder (what `bayesblis
    validate` replays and scores): `requests.json` + `ground_truth.json` from
    `client_requests` (arrival, prompt, output, prefix group, error flag, TTFT, E2E),
    `exp-config.yaml` and `requests.json`'s `config` from the `server:` block
    (`server_settings`), `deployment.yaml` with the hardware (`server.hardware`, else
    `hardware`) and the settings exp-config.yaml has no key for, and `profile.yaml` with
    the load stages: those of an extra `stage` column, else one stage over the whole trace
    (rate = requests / span), and the shared prefix (`system_prompt_len`: the most common
    `prefix_length` of rows in a prefix group). Each file is written atomically; the
    folder is named after itself in the manifest of a later ingest."""
    import yaml

    from bayesblis.atomic import write_json, write_text

    header_path = Path(header_path)
    data_path = Path(data_csv) if data_csv is not None else header_path.with_suffix(".csv")
    tv = read_trace_v2(header_path, data_path)
    settings = server_settings(tv.header, header_path)
    hardware = settings.pop("hardware", None) or hardware
    req = client_requests(tv.requests, tv.header, data_path)
    if req.empty:
        raise EmptyInputError(data_path, "no requests", expected="one row per request")
    origin = float(req["arrival_s"].min())
    arrival_us = np.round((req["arrival_s"].to_numpy(float) - origin) * 1e6).astype(np.int64)
    stages = []
    for st in sorted(set(req["stage"])):
        t = arrival_us[req["stage"].to_numpy() == st] / 1e6
        stages.append({"stage": int(st), "start": float(t.min()), "n": int(len(t)),
                       "last": float(t.max())})
    load = []
    for i, st in enumerate(stages):
        begin = 0.0 if i == 0 else stages[i]["start"]
        end = stages[i + 1]["start"] if i + 1 < len(stages) else st["last"] + 1e-3
        duration = max(end - begin, 1e-3)
        load.append({"rate": st["n"] / duration, "duration": duration})
    grouped = req["prefix_group"].astype(str) != ""
    system = int(req.loc[grouped, "prefix_tokens"].mode().iloc[0]) if grouped.any() else 0
    ok = ~req["has_error"].to_numpy(bool)
    model = settings.get("model") or ""
    config = {"tensor_parallelism": int(settings.get("tp", 1)),
              "max_num_seqs": int(settings.get("max_num_seqs", 256)),
              "max_num_batched_tokens": int(settings.get("max_num_batched_tokens", 2048)),
              "block_size": int(settings.get("block_size", 16))}
    if settings.get("kv_blocks_total_gpu"):
        config["kv_blocks_total_gpu"] = int(settings["kv_blocks_total_gpu"])
    requests = [{"index": int(i), "arrival_time_us": int(a), "input_tokens": int(p),
                 "output_tokens": int(o), "prefix_group": str(g), "has_error": bool(e)}
                for i, a, p, o, g, e in zip(req["request_index"], arrival_us, req["prompt_tokens"],
                                            req["output_tokens"], req["prefix_group"],
                                            req["has_error"])]
    truth = [{"index": int(i), "has_error": not bool(k),
              "e2e_s": float(e2e) if k else None, "ttft_s": float(ttft) if k else None}
             for i, k, e2e, ttft in zip(req["request_index"], ok, req["e2e_s"], req["ttft_s"])]
    exp_config = {k: v for k, v in {
        "model": model, "tensor_parallelism": config["tensor_parallelism"],
        "max_model_len": settings.get("max_model_len"),
        "max_num_batched_tokens": config["max_num_batched_tokens"],
        "max_num_seqs": config["max_num_seqs"], "block_size": config["block_size"],
        "gpu_memory_utilization": settings.get("gpu_memory_utilization"),
        "enable_prefix_caching": settings.get("enable_prefix_caching"),
        "enable_chunked_prefill": settings.get("enable_chunked_prefill"),
        "async_scheduling": settings.get("async_scheduling"),
        "dtype": settings.get("dtype")}.items() if v is not None}
    profile = {"load": {"type": "constant", "stages": load},
               "data": {"type": "shared_prefix", "shared_prefix": {"system_prompt_len": system}},
               "server": {"type": "vllm", "model_name": model},
               "source": {"trace_v2": str(header_path)}}
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    write_json(folder / "requests.json", {"experiment": folder.name, "model_id": model,
                                          "config": config, "requests": requests})
    write_json(folder / "ground_truth.json", truth)
    write_text(folder / "exp-config.yaml", yaml.safe_dump(exp_config, sort_keys=False))
    write_text(folder / "profile.yaml", json.dumps(profile) + "\n")
    from bayesblis.io.vllm_settings import VllmSettings

    vllm = {k: v for k, v in VllmSettings(**settings).to_dict().items() if v is not None}
    deployment = {"name": folder.name, **({"hardware": str(hardware)} if hardware else {}),
                  "vllm": vllm}
    write_text(folder / "deployment.yaml", yaml.safe_dump(deployment, sort_keys=False))
    return folder


def as_inference_perf_folders(paths, root, *, hardware: str | None = None) -> list[Path]:
    """`paths` with each TraceV2/V3 file (header .yaml or data .csv; a pair given twice is
    written once) replaced by an inference-perf folder under `root`, named after the trace
    (`trace_v2_to_inference_perf`); other paths unchanged, in order."""
    from bayesblis.io.dataset import detect_kind

    out, done = [], set()
    for p in map(Path, paths):
        if p.is_file() and detect_kind(p) == "trace_v2":
            header = p if p.suffix.lower() in (".yaml", ".yml") else (
                p.with_suffix(".yaml") if p.with_suffix(".yaml").is_file() else p.with_suffix(".yml"))
            if header.resolve() in done:
                continue
            done.add(header.resolve())
            name, n = header.stem, 2
            while (Path(root) / name).exists():
                name, n = f"{header.stem}-{n}", n + 1
            out.append(trace_v2_to_inference_perf(header, Path(root) / name, hardware=hardware))
        else:
            out.append(p)
    return out
