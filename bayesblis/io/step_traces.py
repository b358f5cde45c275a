"""Step-tracing tables: vLLM's OpenTelemetry ``step.BATCH_SUMMARY`` records exported as
one row per record (parquet or CSV, attribute names as columns), and the engine's step
periods derived from them.

`read_step_traces(path)` returns the OTEL reader's step table (`io.otel.STEP_COLUMNS`:
``step_id``, ``ts_start_s``, ``ts_end_s``, ``duration_us``, ``running_depth``, ...) with a
``run`` column first (``experiment_id`` when the file has one, else the file's stem) and
the file's ``model``, ``workload``, ``tp`` kept when present; sorted by run and step.

In vLLM's step tracing, ``step.ts_start_ns`` and ``step.ts_end_ns`` bracket ``schedule()``,
so ``step.duration_us`` is the scheduler's CPU time, not the step. The step *period* is the
time between the starts of consecutive steps: for two records of one run with step ids k
and k + g, ``(ts_start[k+g] - ts_start[k]) / g`` is the mean period of the g steps between
them, exact for g = 1 (`step_periods`). Tracing is usually sampled (e.g. a hash of the step
id keeps one step in ten), so consecutive records are a small share of all.

Malformed input raises `InputError` naming the file, the row and the column.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from bayesblis.errors import EmptyInputError, InputError
from bayesblis.io.otel import STEP_COLUMNS, _STEP_ATTRS

ATTRIBUTES = {"step_id": "step.id", "ts_start_ns": "step.ts_start_ns", "ts_end_ns": "step.ts_end_ns",
              **_STEP_ATTRS, "kv_usage_ratio": "kv.usage_gpu_ratio"}
"""Tidy name -> OTEL attribute (the column name in the file)."""
REQUIRED = ("step.id", "step.ts_start_ns", "queue.running_depth", "batch.num_prefill_reqs",
            "batch.prefill_tokens", "batch.num_decode_reqs")
RUN_COLUMNS = ("model", "workload", "tp")
"""Columns kept as they are when the file has them."""
PERIOD_COLUMNS = ("run", "step_id", "gap_steps", "period_s", "running_depth", "waiting_depth",
                  "num_prefill_reqs", "prefill_tokens", "num_decode_reqs", "decode_tokens",
                  "kv_usage_ratio", "kv_blocks_total", "running_depth_next", "num_prefill_reqs_next",
                  "decode_only", "steady")


def _read_table(path: Path) -> pd.DataFrame:
    suffix = path.suffix.lower()
    try:
        if suffix == ".parquet":
            table = pd.read_parquet(path)
        elif suffix == ".csv":
            from bayesblis.io.text import read_text_checked
            import io

            table = pd.read_csv(io.StringIO(read_text_checked(path, expected="a CSV of step.BATCH_SUMMARY records")))
        else:
            raise InputError(path, f"unknown file type '{suffix}'", expected="a .parquet or .csv file")
    except InputError:
        raise
    except Exception as exc:  # pyarrow / the CSV parser
        raise InputError(path, f"not a readable table: {' '.join(str(exc).split())[:200]}",
                         expected="a parquet or CSV table of step.BATCH_SUMMARY attributes") from None
    if table.empty:
        raise EmptyInputError(path, "no rows", expected="step.BATCH_SUMMARY records")
    return table


def _numbers(path: Path, table: pd.DataFrame, column: str, *, integer: bool) -> np.ndarray:
    values = pd.to_numeric(table[column], errors="coerce").to_numpy(float)
    bad = ~np.isfinite(values) | (values < 0)
    if integer:
        bad |= values != np.round(values)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise InputError(path, f"bad value {table[column].iloc[i]!r}", record=f"row {i}", field=column,
                         expected=f"a non-negative {'integer' if integer else 'number'}")
    return values


def read_step_traces(path) -> pd.DataFrame:
    """The tidy step table of a parquet or CSV file of BATCH_SUMMARY records (module doc)."""
    path = Path(path)
    raw = _read_table(path)
    for column in REQUIRED:
        if column not in raw.columns:
            raise InputError(path, "missing column", field=column,
                             expected="the step.BATCH_SUMMARY attribute (data_specs/otel-traces.md)")
    out = pd.DataFrame(index=raw.index)
    if "experiment_id" in raw.columns:
        run = raw["experiment_id"].astype("string")
        if run.isna().any():
            i = int(np.flatnonzero(run.isna().to_numpy())[0])
            raise InputError(path, "empty experiment_id", record=f"row {i}", field="experiment_id",
                             expected="a run name on every row")
        out["run"] = run.astype(str)
    else:
        out["run"] = path.stem
    for name in STEP_COLUMNS:
        attr = "step.ts_start_ns" if name == "ts_start_s" else "step.ts_end_ns" if name == "ts_end_s" \
            else ATTRIBUTES[name]
        if attr not in raw.columns:
            out[name] = np.nan
            continue
        values = _numbers(path, raw, attr, integer=name != "kv_usage_ratio")
        out[name] = values * 1e-9 if name in ("ts_start_s", "ts_end_s") else values
    for column in RUN_COLUMNS:
        if column in raw.columns:
            out[column] = raw[column].to_numpy()
    out["step_id"] = out["step_id"].astype(np.int64)
    dup = out.duplicated(["run", "step_id"]).to_numpy()
    if dup.any():
        i = int(np.flatnonzero(dup)[0])
        raise InputError(path, f"step {out['step_id'].iloc[i]} recorded twice in run {out['run'].iloc[i]!r}",
                         record=f"row {i}", field="step.id", expected="one BATCH_SUMMARY per step and run")
    out = out.sort_values(["run", "step_id"], kind="stable")
    back = (out.groupby("run", sort=False)["ts_start_s"].diff() < 0).to_numpy()
    if back.any():
        i = int(np.flatnonzero(back)[0])
        row = out.index[i]
        raise InputError(path, f"step {out['step_id'].iloc[i]} starts before the step recorded before it",
                         record=f"row {row}", field="step.ts_start_ns",
                         expected="step start times non-decreasing with step.id within a run")
    return out.reset_index(drop=True)


def step_periods(steps: pd.DataFrame, *, max_gap: int = 1) -> pd.DataFrame:
    """One row per pair of records of one run whose step ids differ by at most `max_gap`:
    ``period_s`` = start-to-start time over the gap, the first record's batch (its
    running and waiting depth, prefill and decode requests and tokens, KV usage), the next
    record's running depth and prefill requests, ``decode_only`` (no prefill at either
    end) and ``steady`` (same running depth at both ends)."""
    if max_gap < 1:
        raise ValueError("max_gap must be >= 1")
    steps = steps.sort_values(["run", "step_id"], kind="stable")
    nxt = steps.groupby("run", sort=False).shift(-1)
    gap = (nxt["step_id"] - steps["step_id"]).to_numpy(float)
    keep = np.isfinite(gap) & (gap >= 1) & (gap <= max_gap)
    first, second = steps[keep], nxt[keep]
    out = pd.DataFrame({
        "run": first["run"].to_numpy(), "step_id": first["step_id"].to_numpy(np.int64),
        "gap_steps": gap[keep].astype(np.int64),
        "period_s": (second["ts_start_s"].to_numpy(float) - first["ts_start_s"].to_numpy(float)) / gap[keep]})
    for column in PERIOD_COLUMNS[4:12]:
        out[column] = first[column].to_numpy()
    out["running_depth_next"] = second["running_depth"].to_numpy()
    out["num_prefill_reqs_next"] = second["num_prefill_reqs"].to_numpy()
    out["decode_only"] = (out["num_prefill_reqs"] == 0) & (out["num_prefill_reqs_next"] == 0)
    out["steady"] = out["running_depth"] == out["running_depth_next"]
    for column in RUN_COLUMNS:
        if column in steps.columns:
            out[column] = first[column].to_numpy()
    return out.reset_index(drop=True)


def decode_context_estimate(periods: pd.DataFrame, block_size: int = 16) -> np.ndarray:
    """Tokens in the KV cache of the running requests, from the GPU KV usage: usage x blocks
    x `block_size`, less half a block per running request (the partly filled last block).
    Prefix blocks several requests share are counted once, so with shared prefixes this is
    low by (sharers - 1) x the prefix per shared block; per-request lengths are not traced."""
    usage = periods["kv_usage_ratio"].to_numpy(float)
    blocks = periods["kv_blocks_total"].to_numpy(float)
    running = periods["running_depth"].to_numpy(float)
    if not np.isfinite(usage).all() or not np.isfinite(blocks).all():
        raise ValueError("KV usage (kv.usage_gpu_ratio) and kv.blocks_total_gpu are needed on every pair")
    return np.maximum(usage * blocks * block_size - 0.5 * block_size * running, 0.0)
