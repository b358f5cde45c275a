"""Step-tracing tables (BATCH_SUMMARY records as parquet/CSV) and step periods."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bayesblis.errors import InputError
from bayesblis.io.step_traces import decode_context_estimate, read_step_traces, step_periods

REAL = Path(__file__).resolve().parents[3] / "shared" / "data" / "real" / "h100-step-traces" / \
    "batch_summary_steps.parquet"


def records(run="run-a", ids=(10, 11, 12, 20, 21), start_ms=(0.0, 17.0, 35.0, 200.0, 218.0),
            prefill=(0, 0, 1, 0, 0), running=(32, 32, 33, 40, 40)):
    n = len(ids)
    return pd.DataFrame({
        "step.id": list(ids), "step.ts_start_ns": [int(t * 1e6) + 10**12 for t in start_ms],
        "step.ts_end_ns": [int(t * 1e6) + 10**12 + 900_000 for t in start_ms], "step.duration_us": [900] * n,
        "queue.running_depth": list(running), "queue.waiting_depth": [0] * n,
        "batch.num_prefill_reqs": list(prefill), "batch.num_decode_reqs": [r - p for r, p in zip(running, prefill)],
        "batch.scheduled_tokens": [r - p + 480 * p for r, p in zip(running, prefill)],
        "batch.prefill_tokens": [480 * p for p in prefill], "batch.decode_tokens": [r - p for r, p in zip(running, prefill)],
        "batch.num_finished": [0] * n, "batch.num_preempted": [0] * n, "kv.usage_gpu_ratio": [0.04] * n,
        "kv.blocks_total_gpu": [30000] * n, "kv.blocks_free_gpu": [28800] * n,
        "experiment_id": [run] * n, "model": ["llama-2-70b"] * n, "workload": ["general"] * n, "tp": [4] * n})


def test_reads_parquet_and_csv_alike(tmp_path):
    table = pd.concat([records(), records("run-b", start_ms=(0.0, 20.0, 40.0, 300.0, 321.0))])
    table.sample(frac=1, random_state=0).to_parquet(tmp_path / "steps.parquet")
    table.to_csv(tmp_path / "steps.csv", index=False)
    a = read_step_traces(tmp_path / "steps.parquet")
    b = read_step_traces(tmp_path / "steps.csv")
    pd.testing.assert_frame_equal(a, b, check_dtype=False)
    assert list(a["run"].unique()) == ["run-a", "run-b"] and list(a["step_id"][:5]) == [10, 11, 12, 20, 21]
    assert a["ts_start_s"].iloc[1] - a["ts_start_s"].iloc[0] == pytest.approx(0.017)
    assert a["running_depth"].iloc[0] == 32 and a["kv_blocks_total"].iloc[0] == 30000
    assert set(a["model"]) == {"llama-2-70b"}
    no_run = records().drop(columns="experiment_id")
    no_run.to_parquet(tmp_path / "one.parquet")
    assert set(read_step_traces(tmp_path / "one.parquet")["run"]) == {"one"}


def test_periods_from_consecutive_step_ids(tmp_path):
    records().to_parquet(tmp_path / "s.parquet")
    steps = read_step_traces(tmp_path / "s.parquet")
    p = step_periods(steps)
    assert list(p["step_id"]) == [10, 11, 20]  # 12 -> 20 is 8 steps apart
    assert p["period_s"].to_numpy() == pytest.approx([0.017, 0.018, 0.018])
    assert list(p["decode_only"]) == [True, False, True] and list(p["steady"]) == [True, False, True]
    wide = step_periods(steps, max_gap=8)
    assert wide.loc[wide["step_id"] == 12, "period_s"].iloc[0] == pytest.approx(0.165 / 8)
    est = decode_context_estimate(p)
    assert est[0] == pytest.approx(0.04 * 30000 * 16 - 8 * 32)


def test_malformed_tables_name_file_row_and_column(tmp_path):
    bad = records().drop(columns="batch.num_prefill_reqs")
    bad.to_parquet(tmp_path / "a.parquet")
    with pytest.raises(InputError) as e:
        read_step_traces(tmp_path / "a.parquet")
    assert e.value.field == "batch.num_prefill_reqs" and "missing column" in str(e.value)
    bad = records()
    bad["queue.running_depth"] = bad["queue.running_depth"].astype(float)
    bad.loc[2, "queue.running_depth"] = -1.0
    bad.to_parquet(tmp_path / "b.parquet")
    with pytest.raises(InputError) as e:
        read_step_traces(tmp_path / "b.parquet")
    assert e.value.record == "row 2" and e.value.field == "queue.running_depth"
    bad = records(ids=(10, 11, 11, 20, 21))
    bad.to_csv(tmp_path / "c.csv", index=False)
    with pytest.raises(InputError, match="recorded twice"):
        read_step_traces(tmp_path / "c.csv")
    bad = records(start_ms=(0.0, 17.0, 5.0, 200.0, 218.0))
    bad.to_parquet(tmp_path / "d.parquet")
    with pytest.raises(InputError) as e:
        read_step_traces(tmp_path / "d.parquet")
    assert e.value.field == "step.ts_start_ns"
    (tmp_path / "e.csv").write_text("")
    with pytest.raises(InputError, match="empty"):
        read_step_traces(tmp_path / "e.csv")
    with pytest.raises(InputError, match=r"\.parquet or \.csv"):
        read_step_traces(tmp_path / "e.json")


@pytest.mark.skipif(not REAL.is_file(), reason="shared h100-step-traces not present")
def test_real_step_traces_periods():
    steps = read_step_traces(REAL)
    assert len(steps) == 20112 and steps["run"].nunique() == 3
    p = step_periods(steps)
    assert p.groupby("run").size().to_dict() == {"20260217-202857-llama-2-70b-tp4-general": 593,
                                                 "20260217-203421-llama-2-70b-hf-tp4-codegen": 658,
                                                 "20260218-150304-codellama-34b-tp2-general": 716}
    d = p[p["decode_only"] & p["steady"] & p["run"].str.contains("llama-2-70b")]
    low = d[(d["running_depth"] >= 10) & (d["running_depth"] <= 20)]["period_s"].median()
    assert 0.0160 < low < 0.0175  # README: about 16.8 ms at 10-20 in flight
