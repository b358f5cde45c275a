"""Dask paths give the serial results: multi-file ingest and chunked simulation draws.

Each Dask test starts a 2-worker LocalCluster (scheduler='local'), a few seconds each.
"""

from __future__ import annotations

import json
import socket

import pandas as pd
import pytest
import yaml
from click.testing import CliRunner

from bayesblis.cli import cli, main
from bayesblis.distributed import map_tasks
from bayesblis.errors import BayesBlisError

ALPHA = {"alpha_const_s": 2000.0, "alpha_prompt_s": 0.5, "alpha_output_s": 20.0}
BETA = {"prefill_compute_s": 2.2, "decode_compute_s": 1.0, "weight_traffic_s": 1.15,
        "kv_traffic_s": 1.4, "kv_token_layer_s": 0.2, "tp_comm_s": 1.1, "tp_sync_s": 8.0, "ep_comm_s": 1.0, "offload_s": 1.0,
        "layer_overhead_s": 30.0, "request_overhead_s": 4.0, "step_overhead_s": 100.0}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_map_tasks_serial_keeps_order_and_reports_progress():
    seen = []
    assert map_tasks(abs, [3, -1, -2], progress=seen.append) == [3, 1, 2]
    assert seen == [1, 2, 3]


def test_ingest_local_cluster_equals_serial():
    from bayesblis.io.dataset import ingest, sample_paths

    paths = sample_paths()
    serial = ingest(paths)
    ticks = []
    dask = ingest(paths, scheduler="local",
                  progress=lambda items: (ticks.append(i) or i for i in items))
    assert len(ticks) == len(serial) == 3
    assert dask.names() == serial.names()
    for a, b in zip(serial.sources, dask.sources):
        assert (a.kind, a.settings, a.extra, a.inputs, a.meta) == (b.kind, b.settings, b.extra,
                                                                   b.inputs, b.meta)
        assert sorted(a.tables) == sorted(b.tables)
        for name in a.tables:
            pd.testing.assert_frame_equal(a.tables[name], b.tables[name])


def test_simulate_local_cluster_equals_serial(tmp_path):
    sc = {"model": "llama-2-7b", "hardware": "H100-SXM",
          "vllm": {"max_num_batched_tokens": 512, "max_num_seqs": 32, "max_model_len": 2048},
          "workload": {"stages": [{"rate": 6, "duration": 10}, {"rate": 12, "duration": 5}],
                       "prompt_tokens": {"dist": "uniform", "min": 100, "max": 600},
                       "output_tokens": {"dist": "uniform", "min": 10, "max": 80}}}
    scenario = tmp_path / "sc.yaml"
    scenario.write_text(yaml.safe_dump(sc))
    coef = tmp_path / "c.json"
    coef.write_text(json.dumps({"alpha": ALPHA, "beta": BETA, "noise_sigma": 0.1, "noise_nu": 5}))
    results = {}
    for name, extra in (("serial", []),
                        ("dask", ["--scheduler", "local", "--chunk-size", "2"])):
        out = tmp_path / f"{name}.json"
        r = CliRunner().invoke(cli, ["simulate", str(scenario), "--coefficients", str(coef),
                                     "--draws", "5", "--seed", "3", "--out", str(out), *extra],
                               catch_exceptions=False)
        assert r.exit_code == 0, r.output
        results[name] = json.loads(out.read_text())
    a, b = results["serial"], results["dask"]
    assert a["summary"]["e2e_mean_s"]["lo"] < a["summary"]["e2e_mean_s"]["hi"]  # draws differ
    for key in ("summary", "stages", "counts"):
        assert a[key] == b[key]
    a["metadata"].pop("wall_s"), b["metadata"].pop("wall_s")
    assert a["metadata"] == b["metadata"]


def test_unreachable_scheduler_is_a_clear_error():
    address = f"tcp://127.0.0.1:{_free_port()}"
    with pytest.raises(BayesBlisError, match=f"cannot reach the Dask scheduler at {address}"):
        map_tasks(abs, [1, 2], scheduler=address, timeout_s=1)


def test_bad_scheduler_option_is_a_clear_cli_error(tmp_path, capsys):
    from bayesblis.io.dataset import sample_paths

    with pytest.raises(SystemExit) as exc:
        main(["ingest", str(sample_paths()[0]), "--out", str(tmp_path / "ds"),
              "--scheduler", "somewhere:8786"])
    assert exc.value.code == 2
    assert "unknown scheduler 'somewhere:8786'" in capsys.readouterr().err
