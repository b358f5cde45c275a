"""`bayesblis calibrate` on a BLIS TraceV3 trace: the same posterior as on the same requests
written as an inference-perf folder.

The run is the bundled two-stage inference-perf sample (200 requests of Llama-2-7B), its
client times rounded to whole µs (a TraceV2 file holds integer µs) and written as a
real-mode TraceV3 pair by `io.tracev2.inference_perf_to_trace_v2`; the population is the
shared tiny fit (conftest.py)."""

import json
import shutil

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from bayesblis.io.dataset import sample_paths

CLI_SAMPLER = ("--draws", "30", "--tune", "30", "--chains", "1", "--seed", "3", "--quiet")
"""A real but short calibration (one chain): both inputs get the same sampler and seed."""


@pytest.fixture(scope="module")
def run_both_ways(tmp_path_factory):
    """(inference-perf folder, TraceV3 header path) of one run; the trace is named like the
    folder, so both sources (and their observation rows) carry the same name."""
    from bayesblis.io.tracev2 import inference_perf_to_trace_v2

    root = tmp_path_factory.mktemp("both")
    folder = root / "ip" / "sample-run"
    shutil.copytree(sample_paths()[0], folder)
    truth = json.loads((folder / "ground_truth.json").read_text())
    for rec in truth:   # whole µs, as a TraceV2 row holds them
        for key in ("ttft_s", "e2e_s"):
            if rec.get(key) is not None:
                rec[key] = round(rec[key] * 1e6) / 1e6
    (folder / "ground_truth.json").write_text(json.dumps(truth))
    header, data = inference_perf_to_trace_v2(folder, root / "tv" / "sample-run.yaml",
                                              hardware="H100")
    return folder, header


def test_the_trace_holds_the_run_and_its_server_settings(run_both_ways):
    from bayesblis.io.dataset import ingest

    folder, header = run_both_ways
    ip, tv = ingest([folder]).sources[0], ingest([header]).sources[0]
    assert tv.kind == "trace_v2" and tv.name == ip.name
    # the server block reaches the settings: kv_blocks_total_gpu among them
    assert tv.settings["kv_blocks_total_gpu"] == ip.settings["kv_blocks_total_gpu"] == 7462
    assert tv.settings["hardware"] == "H100"
    for key in ("model", "tp", "max_num_batched_tokens", "max_num_seqs", "block_size",
                "max_model_len"):
        assert tv.settings[key] == ip.settings[key], key


def test_trace_and_inference_perf_give_the_same_observations(run_both_ways):
    from bayesblis.calibrate import calibration_data
    from bayesblis.io.dataset import ingest

    folder, header = run_both_ways
    for cut in ({}, {"max_requests": 80}, {"first_seconds": 90.0}):
        c_ip, o_ip = calibration_data(ingest([folder]), hardware="H100", **cut)
        c_tv, o_tv = calibration_data(ingest([header]), **cut)   # hardware from the header
        pd.testing.assert_frame_equal(c_ip, c_tv)
        assert len(o_ip) > 20
        pd.testing.assert_frame_equal(o_ip, o_tv, check_exact=False, rtol=0, atol=1e-12)


def test_calibrate_on_a_trace_v3_run_gives_the_inference_perf_posterior(tiny_fit, run_both_ways,
                                                                        tmp_path):
    from bayesblis.cli import cli
    from bayesblis.model.store import load_posterior

    _, parent, _ = tiny_fit
    folder, header = run_both_ways
    runner = CliRunner()
    summaries = {}
    for name, inputs in (("ip", [str(folder), "--hardware", "H100"]), ("tv", [str(header)])):
        out = tmp_path / f"{name}.nc"
        r = runner.invoke(cli, ["calibrate", str(parent), *inputs, "--out", str(out),
                                "--max-requests", "120", *CLI_SAMPLER])
        assert r.exit_code == 0, r.output
        post = load_posterior(out)
        assert post.fit_info["n_obs"] > 0
        summaries[name] = {v: post.idata.posterior[v].values for v in ("beta", "alpha", "sigma_step")}
        r = runner.invoke(cli, ["coefficients", str(out), "--model", "llama-2-7b", "--hardware",
                                "H100", "--out", str(tmp_path / f"{name}.json")])
        assert r.exit_code == 0, r.output
    for v in summaries["ip"]:
        np.testing.assert_allclose(summaries["tv"][v], summaries["ip"][v], rtol=1e-9, err_msg=v)
    a, b = (json.loads((tmp_path / f"{n}.json").read_text()) for n in ("ip", "tv"))
    assert a["config"] == b["config"]
    for group in ("beta", "alpha"):
        for name, s in a[group].items():
            for stat in ("mean", "median", "lo", "hi"):
                assert b[group][name][stat] == pytest.approx(s[stat], rel=1e-9), (group, name, stat)


def test_calibrate_names_what_it_cannot_use(tiny_fit, tmp_path):
    """Inputs without a source calibration reads: the error says what they hold and what it
    reads."""
    from bayesblis.cli import cli

    _, parent, _ = tiny_fit
    kv = sample_paths()[1] / "kv_events.jsonl"
    r = CliRunner().invoke(cli, ["calibrate", str(parent), str(kv), "--out", str(tmp_path / "x.nc"),
                                 "--quiet"])
    assert r.exit_code != 0
    assert "kv_events" in str(r.exception) and "TraceV2/V3" in str(r.exception)
