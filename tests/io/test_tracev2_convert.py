"""BLIS TraceV2/V3 traces as client traces: the header's server block, the client-side request
table, and conversion to and from inference-perf folders (what calibrate, validate and check
read)."""

import warnings

import numpy as np
import pandas as pd
import pytest
import yaml
from click.testing import CliRunner

from bayesblis.errors import InputError, InputWarning
from bayesblis.io.dataset import ingest, sample_paths
from bayesblis.io.inference_perf import read_inference_perf
from bayesblis.io.tracev2 import (client_requests, inference_perf_to_trace_v2, read_trace_v2,
                                  server_settings, trace_v2_to_inference_perf)

SAMPLE_IP = sample_paths()[0]
SAMPLE_TV = sample_paths()[2]


@pytest.fixture()
def trace(tmp_path):
    header, _ = inference_perf_to_trace_v2(SAMPLE_IP, tmp_path / "run.yaml", hardware="H100")
    return header


def test_an_inference_perf_run_survives_a_trace_v3_round_trip(trace, tmp_path):
    head = yaml.safe_load(trace.read_text())
    assert head["trace_version"] == 3 and head["mode"] == "real"
    assert head["server"]["kv_blocks_total_gpu"] == 7462 and head["server"]["tensor_parallel"] == 1
    tv = read_trace_v2(trace, trace.with_suffix(".csv"))       # the strict reader takes it
    assert (tv.requests["prefix_length"][tv.requests["prefix_group"] != ""] == 50).all()
    back = trace_v2_to_inference_perf(trace, tmp_path / "back")
    a, b = read_inference_perf(SAMPLE_IP), read_inference_perf(back)
    cols = ["request_index", "prompt_tokens", "prefix_group", "has_error", "stage"]
    pd.testing.assert_frame_equal(a.requests[cols], b.requests[cols])
    # the client's recorded output counts, which fits use (client_windows.FIT_ON_RECORDED_COUNTS)
    np.testing.assert_array_equal(a.requests["output_tokens"], b.requests["output_tokens"])
    shifted = a.requests["arrival_s"] - a.requests["arrival_s"].min()
    np.testing.assert_allclose(b.requests["arrival_s"], shifted, atol=1e-6)
    np.testing.assert_allclose(b.requests["ttft_s"], a.requests["ttft_s"], atol=1e-6)
    np.testing.assert_allclose(b.requests["e2e_s"], a.requests["e2e_s"], atol=1e-6)
    assert b.profile["data"]["shared_prefix"]["system_prompt_len"] == 50
    src_a, src_b = ingest([SAMPLE_IP]).sources[0], ingest([back]).sources[0]
    assert src_b.settings["hardware"] == "H100"
    assert {k: v for k, v in src_b.settings.items() if k != "hardware"} == \
        {k: v for k, v in src_a.settings.items() if k != "hardware"}


def test_the_client_table_of_a_real_trace_is_on_the_run_clock():
    tv = read_trace_v2(SAMPLE_TV, SAMPLE_TV.with_suffix(".csv"))
    req = client_requests(tv.requests, tv.header)
    assert list(req["request_index"]) == sorted(tv.requests["request_id"])
    # send times are epoch µs; arrivals come out as offsets near the scheduled ones
    np.testing.assert_allclose(req["arrival_s"], tv.requests.sort_values("request_id")["arrival_time_s"],
                               atol=0.05)
    ok = tv.requests.sort_values("request_id")["status"].eq("ok").to_numpy()
    assert (req["has_error"].to_numpy() == ~ok).all()
    assert req.loc[~req["has_error"], "ttft_s"].gt(0).all()
    assert client_requests(req, tv.header) is req                   # already converted


def test_generated_traces_use_the_simulator_clock_and_the_prompt_without_server_counts(trace, tmp_path):
    rows = read_trace_v2(trace, trace.with_suffix(".csv")).requests
    rows = rows.assign(server_input_tokens=0, send_time_us=0, arrival_time_us=rows["arrival_time_us"] + 5)
    req = client_requests(rows, {"mode": "generated"})
    np.testing.assert_allclose(req["arrival_s"], rows["arrival_time_us"] / 1e6)
    np.testing.assert_array_equal(req["prompt_tokens"], rows["input_tokens"] + rows["prefix_length"])


def test_server_settings_take_blis_keys_and_extensions():
    header = {"server": {"type": "vllm", "model": "llama-2-7b", "tensor_parallel": 2,
                         "max_num_seqs": 0, "kv_blocks_total_gpu": 9000,
                         "max_num_batched_tokens": 4096, "hardware": "A100"},
              "kv_offload": {"cpu_bytes_to_use": 2 * 2 ** 30}}
    s = server_settings(header, "h.yaml")
    assert s == {"model": "llama-2-7b", "tp": 2, "kv_blocks_total_gpu": 9000,
                 "max_num_batched_tokens": 4096, "kv_offloading_size_gb": 2.0, "hardware": "A100"}
    with pytest.warns(InputWarning, match="unknown server key 'color'"):
        server_settings({"server": {"color": "red"}}, "h.yaml")
    with pytest.raises(InputError) as exc:
        server_settings({"server": {"max_num_seqs": -3}}, "h.yaml")
    assert exc.value.field == "server.max_num_seqs" and "h.yaml" in str(exc.value)
    with pytest.raises(InputError) as exc:
        server_settings({"server": {"kv_blocks_total_gpu": "many"}}, "h.yaml")
    assert exc.value.field == "server.kv_blocks_total_gpu"


def test_a_deployment_yaml_beside_the_header_names_the_hardware(tmp_path):
    header, _ = inference_perf_to_trace_v2(SAMPLE_IP, tmp_path / "run.yaml")
    assert ingest([header]).sources[0].settings["hardware"] is None
    (tmp_path / "run.deployment.yaml").write_text(yaml.safe_dump(
        {"hardware": "H100-SXM", "vllm": {"max_num_seqs": 64}}))
    s = ingest([header]).sources[0].settings
    assert s["hardware"] == "H100-SXM" and s["max_num_seqs"] == 64
    assert s["kv_blocks_total_gpu"] == 7462 and s["max_model_len"] == 4096   # the header's


def test_a_bad_stage_column_names_the_request(trace):
    csv = trace.with_suffix(".csv")
    text = csv.read_text().splitlines()
    cells = text[3].split(",")
    cells[-1] = "late"
    text[3] = ",".join(cells)
    csv.write_text("\n".join(text) + "\n")
    tv = read_trace_v2(trace, csv)
    with pytest.raises(InputError) as exc:
        client_requests(tv.requests, tv.header, csv)
    assert exc.value.field == "stage" and "'late'" in str(exc.value) and str(csv) in str(exc.value)
    with pytest.raises(InputError, match="run.csv, record request"):      # through ingest
        from bayesblis.design import build_model_data
        build_model_data(ingest([trace]))


def test_validate_takes_trace_v2_files_as_inference_perf_folders(trace, monkeypatch, tmp_path):
    import bayesblis.validate as validate
    from bayesblis.cli import cli

    seen = {}

    def fake_run_validation(dirs, **kwargs):
        seen["runs"] = [read_inference_perf(d) for d in dirs]
        seen["hardware"] = kwargs["hardware"]
        return {"records": []}

    monkeypatch.setattr(validate, "run_validation", fake_run_validation)
    monkeypatch.setattr(validate, "format_table", lambda report: "table")
    r = CliRunner().invoke(cli, ["validate", str(trace), str(trace.with_suffix(".csv")),
                                 str(SAMPLE_IP), "--out", str(tmp_path / "v.json")])
    assert r.exit_code == 0, r.output + repr(r.exception)
    names = [e.name for e in seen["runs"]]
    assert names == ["run", SAMPLE_IP.name]                     # the pair once, then the folder
    assert len(seen["runs"][0].requests) == len(seen["runs"][1].requests)


def test_check_ingests_raw_traces_given_as_its_dataset(trace, tmp_path):
    from bayesblis.cli.check import dataset_folder
    from bayesblis.io.dataset import Dataset

    folder = dataset_folder(str(trace), tmp_path)
    ds = Dataset.load(folder)
    assert [s.kind for s in ds.sources] == ["trace_v2"]
    assert ds.sources[0].settings["kv_blocks_total_gpu"] == 7462
    assert dataset_folder(folder, tmp_path / "other") == folder       # a dataset as it is
    assert dataset_folder(None, tmp_path) is None


def test_design_reads_a_trace_as_the_inference_perf_run_it_came_from(trace):
    from bayesblis.design import build_model_data

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = build_model_data(ingest([SAMPLE_IP]), hardware="H100").obs
        b = build_model_data(ingest([trace])).obs
    assert len(a) == len(b) > 50
    cols = [c for c in a.columns if c not in ("source", "run")]    # named after the file
    pd.testing.assert_frame_equal(a[cols], b[cols], check_exact=False, rtol=1e-4, atol=1e-5)


def test_a_header_without_server_model_takes_the_rows_model(trace):
    head = yaml.safe_load(trace.read_text())
    del head["server"]["model"]
    trace.write_text(yaml.safe_dump(head))
    assert ingest([trace]).sources[0].settings["model"] == "meta-llama/Llama-2-7b-hf"
