"""Bad input, one test per class: every reader raises an InputError naming the file, the
record and the field and saying what was expected; `bayesblis ingest` prints it as one
`error:` line and exits with code 2 (never a traceback), and a failed ingest leaves a good
existing dataset alone. Each malformed input is a bundled sample copied to tmp_path and
broken in one place."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from bayesblis.errors import (EmptyInputError, InputError, InputWarning, UnknownArchitectureError,
                              UnknownHardwareError)
from bayesblis.io.dataset import Dataset, ingest
from bayesblis.io.inference_perf import read_inference_perf
from bayesblis.io.otel import read_otel
from bayesblis.io.tracev2 import read_trace_v2

BINARY = b"\xff\xfe\x00\x81 not text \x80\x9f"


# -- helpers ------------------------------------------------------------------------------
def sample_copy(samples: Path, tmp_path: Path, name: str) -> Path:
    """A writable copy of one bundled sample (inference-perf-2stage, otel-run, tracev2)."""
    return Path(shutil.copytree(samples / name, tmp_path / name))


def edit_json(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def ingest_fails(target: Path, out: Path, capsys) -> str:
    """Run `bayesblis ingest TARGET --out OUT`; assert exit code 2 and a one-line error; return it."""
    from bayesblis.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["ingest", str(target), "--out", str(out), "--quiet"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    errors = [line for line in err.splitlines() if not line.startswith("warning: ")]
    assert len(errors) == 1 and errors[0].startswith("error: "), err
    return errors[0]


def ingest_ok(target: Path, out: Path, capsys) -> str:
    """Run `bayesblis ingest`, assert success, return stderr (warnings)."""
    from bayesblis.cli import main

    main(["ingest", str(target), "--out", str(out), "--quiet"])
    return capsys.readouterr().err


# -- 1. undecodable bytes -----------------------------------------------------------------
@pytest.mark.parametrize("sample, file, target", [
    ("inference-perf-2stage", "profile.yaml", ""),
    ("inference-perf-2stage", "exp-config.yaml", ""),
    ("inference-perf-2stage", "requests.json", ""),
    ("inference-perf-2stage", "stage_0_lifecycle_metrics.json", ""),
    ("otel-run", "traces.json", ""),
    ("otel-run", "kv_events.jsonl", ""),
    ("otel-run", "deployment.yaml", ""),
    ("tracev2", "trace.yaml", "trace.yaml"),
    ("tracev2", "trace.csv", "trace.yaml"),
    ("tracev2", "trace.csv.itl.csv", "trace.yaml"),
])
def test_binary_file(samples, tmp_path, capsys, sample, file, target):
    folder = sample_copy(samples, tmp_path, sample)
    # the first line kept, then a line of bytes that are not UTF-8, then the rest: the
    # error names the line and the byte offset
    good = (folder / file).read_bytes()
    first = good[: good.index(b"\n") + 1] if b"\n" in good.rstrip() else b""  # requests.json: one line
    (folder / file).write_bytes(first + BINARY + b"\n" + good[len(first):])
    line = ingest_fails(folder / target, tmp_path / "ds", capsys)
    n = 2 if first else 1
    assert f"{folder / file}, record line {n}: undecodable byte 0xff at byte offset {len(first)}" in line
    assert "not UTF-8 text" in line and "UTF-8 encoded)" in line
    assert not (tmp_path / "ds").exists()


def test_binary_profile_exits_2_from_the_installed_command(samples, tmp_path):
    """The tester's case: a binary profile.yaml, run as a real process."""
    folder = sample_copy(samples, tmp_path, "inference-perf-2stage")
    (folder / "profile.yaml").write_bytes(BINARY)
    run = subprocess.run([sys.executable, "-m", "bayesblis", "ingest", str(folder), "--out",
                          str(tmp_path / "ds"), "--quiet"], capture_output=True, text=True, timeout=120)
    assert run.returncode == 2
    assert run.stderr.count("\n") == 1 and "Traceback" not in run.stderr
    assert run.stderr.startswith(f"error: {folder / 'profile.yaml'}, record line 1: undecodable byte 0xff "
                                 f"at byte offset 0")


# -- 2. truncated JSON / JSONL / CSV ------------------------------------------------------
def test_truncated_json(samples, tmp_path, capsys):
    folder = sample_copy(samples, tmp_path, "inference-perf-2stage")
    text = (folder / "ground_truth.json").read_text()
    (folder / "ground_truth.json").write_text(text[: len(text) // 2])
    with pytest.raises(InputError) as exc:
        read_inference_perf(folder)
    assert exc.value.path == str(folder / "ground_truth.json")
    assert exc.value.record.startswith("line 1, column ")
    assert exc.value.message == "truncated JSON: the file ends inside a value"
    assert "truncated JSON" in ingest_fails(folder, tmp_path / "ds", capsys)

    # a TraceV2 CSV cut mid-row: the short row is named, not padded with zeros
    tv = sample_copy(samples, tmp_path, "tracev2")
    text = (tv / "trace.csv").read_text()
    (tv / "trace.csv").write_text(text[: len(text) // 2])
    with pytest.raises(InputError) as exc:
        read_trace_v2(tv / "trace.yaml", tv / "trace.csv")
    assert exc.value.record == f"line {text[: len(text) // 2].count(chr(10)) + 1}"
    assert "fields but the header has 28" in exc.value.message

    # a JSONL stream cut mid-line keeps its complete lines (warning), as documented
    otel = sample_copy(samples, tmp_path, "otel-run")
    text = (otel / "traces.json").read_text()
    (otel / "traces.json").write_text(text[: len(text) - 40])
    with pytest.warns(InputWarning, match="record line 9, .* skipped as a truncated last line"):
        assert len(read_otel(otel / "traces.json").requests) > 0


# -- 3. empty files -----------------------------------------------------------------------
@pytest.mark.parametrize("sample, file, target", [
    ("inference-perf-2stage", "requests.json", ""),
    ("inference-perf-2stage", "exp-config.yaml", ""),
    ("otel-run", "kv_events.jsonl", ""),
    ("otel-run", "deployment.yaml", ""),
    ("tracev2", "trace.csv", "trace.yaml"),
])
def test_empty_file(samples, tmp_path, capsys, sample, file, target):
    folder = sample_copy(samples, tmp_path, sample)
    (folder / file).write_text("  \n")
    line = ingest_fails(folder / target, tmp_path / "ds", capsys)
    assert line.startswith(f"error: {folder / file}: ")
    assert "empty file" in line or "no KV-event lines" in line
    with pytest.raises(EmptyInputError):
        ingest([folder / target])


# -- 4. missing required field --------------------------------------------------------------
def test_missing_required_field(samples, tmp_path, capsys):
    folder = sample_copy(samples, tmp_path, "inference-perf-2stage")
    edit_json(folder / "requests.json", lambda d: d["requests"][3].pop("input_tokens"))
    with pytest.raises(InputError) as exc:
        read_inference_perf(folder)
    e = exc.value
    assert (e.path, e.record, e.field, e.message, e.expected) == (
        str(folder / "requests.json"), "index 3", "requests[].input_tokens", "field missing", "an integer >= 0")
    assert ingest_fails(folder, tmp_path / "ds", capsys) == f"error: {e}"


# -- 5. wrong types -------------------------------------------------------------------------
@pytest.mark.parametrize("file, change, record, field, expected", [
    ("requests.json", lambda d: d["requests"][0].update(arrival_time_us="226189"), "index 0",
     "requests[].arrival_time_us", "a finite number of µs >= 0"),
    ("requests.json", lambda d: d.update(requests={"0": {}}), None, "requests", "a list of per-request objects"),
    ("requests.json", lambda d: d.update(config=[16]), None, "config", "a mapping of vLLM settings"),
    ("requests.json", lambda d: d["config"].update(block_size="16"), None, "config.block_size",
     "a positive integer"),
    ("ground_truth.json", lambda d: d[5].update(e2e_s=[0.5]), "index 5", "e2e_s",
     "a number of seconds (or null for an error row)"),
])
def test_wrong_type(samples, tmp_path, capsys, file, change, record, field, expected):
    folder = sample_copy(samples, tmp_path, "inference-perf-2stage")
    edit_json(folder / file, change)
    with pytest.raises(InputError) as exc:
        read_inference_perf(folder)
    e = exc.value
    assert (e.path, e.record, e.field, e.expected) == (str(folder / file), record, field, expected)
    assert ingest_fails(folder, tmp_path / "ds", capsys) == f"error: {e}"


def test_wrong_type_in_yaml_and_otlp(samples, tmp_path):
    # a list where a mapping is expected
    otel = sample_copy(samples, tmp_path, "otel-run")
    (otel / "deployment.yaml").write_text("vllm: [--max-num-seqs, 32]\n")
    with pytest.raises(InputError, match="field 'vllm': not a mapping but a list"):
        ingest([otel])
    (otel / "deployment.yaml").write_text("hardware: [H100]\n")
    with pytest.raises(InputError, match="field 'hardware': invalid value \\['H100'\\] \\(expected a string\\)"):
        ingest([otel])
    # an OTLP int that is not an int
    (otel / "deployment.yaml").unlink()
    text = (otel / "traces.json").read_text()
    (otel / "traces.json").write_text(text.replace('"scheduler.step","value":{"intValue":"2"}',
                                                   '"scheduler.step","value":{"intValue":"two"}', 1))
    with pytest.raises(InputError) as exc:
        read_otel(otel / "traces.json")
    assert exc.value.field == "scheduler.step" and exc.value.record.startswith("line 1, request cmpl-")
    assert "undecodable value {'intValue': 'two'}" in exc.value.message


# -- 6. NaN / infinity in numeric fields ------------------------------------------------------
def test_nan(samples, tmp_path, capsys):
    folder = sample_copy(samples, tmp_path, "inference-perf-2stage")
    edit_json(folder / "requests.json", lambda d: d["requests"][7].update(arrival_time_us=float("nan")))
    with pytest.raises(InputError) as exc:
        read_inference_perf(folder)
    e = exc.value
    assert (e.record, e.field, e.message) == ("index 7", "requests[].arrival_time_us", "invalid value nan")
    ingest_fails(folder, tmp_path / "ds", capsys)

    folder = sample_copy(samples, tmp_path / "inf", "inference-perf-2stage")
    edit_json(folder / "ground_truth.json", lambda d: d[2].update(e2e_s=float("inf")))
    with pytest.raises(InputError) as exc:
        read_inference_perf(folder)
    assert (exc.value.record, exc.value.field) == ("index 2", "e2e_s/ttft_s")

    otel = sample_copy(samples, tmp_path, "otel-run")
    text = (otel / "traces.json").read_text()
    (otel / "traces.json").write_text(text.replace('{"doubleValue":5000.058}', '{"doubleValue":"NaN"}', 1))
    with pytest.raises(InputError, match="field 'ts.monotonic': non-finite value nan"):
        read_otel(otel / "traces.json")


# -- 7. negative times ------------------------------------------------------------------------
def test_negative_time(samples, tmp_path, capsys):
    """The tester's case: a negative arrival_time_us was accepted silently."""
    folder = sample_copy(samples, tmp_path, "inference-perf-2stage")
    edit_json(folder / "requests.json", lambda d: d["requests"][4].update(arrival_time_us=-1000))
    with pytest.raises(InputError) as exc:
        read_inference_perf(folder)
    e = exc.value
    assert (e.path, e.record, e.field, e.message, e.expected) == (
        str(folder / "requests.json"), "index 4", "requests[].arrival_time_us", "invalid value -1000",
        "a finite number of µs >= 0")
    assert ingest_fails(folder, tmp_path / "ds", capsys) == f"error: {e}"

    tv = sample_copy(samples, tmp_path, "tracev2")
    lines = (tv / "trace.csv").read_text().splitlines()
    cols = lines[0].split(",")
    row = lines[2].split(",")
    row[cols.index("arrival_time_us")] = "-200000"
    (tv / "trace.csv").write_text("\n".join(lines[:2] + [",".join(row)] + lines[3:]) + "\n")
    with pytest.raises(InputError) as exc:
        read_trace_v2(tv / "trace.yaml", tv / "trace.csv")
    assert (exc.value.record, exc.value.field, exc.value.message) == (
        "line 3", "arrival_time_us", "negative value -200000")


# -- 8. times out of order ----------------------------------------------------------------------
def test_non_monotone_times(samples, tmp_path, capsys):
    # OTEL: a step that starts before an earlier step
    otel = sample_copy(samples, tmp_path, "otel-run")
    lines = (otel / "traces.json").read_text().splitlines()
    export = json.loads(lines[4])
    for ev in export["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["events"]:
        attrs = {a["key"]: a["value"] for a in ev["attributes"]}
        if ev["name"] == "step.BATCH_SUMMARY" and attrs["step.id"] == {"intValue": "6"}:
            attrs["step.ts_start_ns"]["intValue"] = "5000000000000"
    lines[4] = json.dumps(export)
    (otel / "traces.json").write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError) as exc:
        read_otel(otel / "traces.json")
    e = exc.value
    assert (e.record, e.field, e.expected) == ("line 5, step 6", "step.ts_start_ns",
                                               "step start times non-decreasing with step.id")
    assert e.message == "step 6 starts at 5000.000000 s, before step 3 (5000.060000 s)"
    assert ingest_fails(otel, tmp_path / "ds", capsys) == f"error: {e}"

    # inference-perf: finish before first token
    folder = sample_copy(samples, tmp_path, "inference-perf-2stage")
    edit_json(folder / "ground_truth.json", lambda d: d[9].update(e2e_s=0.01, ttft_s=0.03))
    with pytest.raises(InputError) as exc:
        read_inference_perf(folder)
    assert (exc.value.record, exc.value.field) == ("index 9", "e2e_s/ttft_s")
    assert exc.value.expected == "finite 0 <= ttft_s <= e2e_s for a request without error"

    # TraceV2 (real mode): first chunk before the request was sent
    tv = sample_copy(samples, tmp_path, "tracev2")
    rows = (tv / "trace.csv").read_text().splitlines()
    cols = rows[0].split(",")
    row = rows[1].split(",")
    row[cols.index("send_time_us")] = str(int(row[cols.index("first_chunk_time_us")]) + 5)
    (tv / "trace.csv").write_text("\n".join(rows[:1] + [",".join(row)] + rows[2:]) + "\n")
    with pytest.raises(InputError) as exc:
        read_trace_v2(tv / "trace.yaml", tv / "trace.csv")
    assert (exc.value.record, exc.value.field) == ("line 2, request 2", "first_chunk_time_us")
    assert exc.value.message.startswith("first chunk before the start")


# -- 9. unknown model: ingest warns, fit/simulate/coefficients/plan refuse ----------------------
def test_unknown_model(samples, tmp_path, capsys):
    """The tester's case: an unknown model in exp-config.yaml was accepted silently."""
    from bayesblis.cli import main
    from bayesblis.design import deployment_for_source

    folder = sample_copy(samples, tmp_path, "inference-perf-2stage")
    cfg = folder / "exp-config.yaml"
    cfg.write_text(cfg.read_text().replace("meta-llama/Llama-2-7b-hf", "acme/Unheard-9b"))
    err = ingest_ok(folder, tmp_path / "ds", capsys)
    assert err.startswith(f"warning: {cfg}, field 'model': unknown model 'acme/Unheard-9b'")
    assert err.count("\n") == 1 and "ingested anyway" in err
    ds = Dataset.load(tmp_path / "ds")
    assert ds[folder.name].settings["model"] == "acme/Unheard-9b"  # the traces are valid: kept

    refusal = ["unknown model 'acme/Unheard-9b'", "Known presets: codellama-34b", "llama-2-7b",
               "config.json", "deployment.yaml"]
    with pytest.raises(UnknownArchitectureError) as exc:
        deployment_for_source(ds[folder.name], "H100")
    assert str(exc.value).startswith(f"source '{folder.name}': ") and all(w in str(exc.value) for w in refusal)

    scenario = tmp_path / "scenario.yaml"
    scenario.write_text("model: acme/Unheard-9b\nhardware: H100-SXM\n"
                        "workload: {stages: [{rate: 1, duration: 2}], prompt_tokens: 10, output_tokens: 2}\n")
    not_a_posterior = tmp_path / "posterior.nc"
    not_a_posterior.write_bytes(b"never read: the model is checked first")
    for argv in (["fit", str(tmp_path / "ds"), "--hardware", "H100", "--out", str(tmp_path / "p.nc")],
                 ["simulate", str(scenario), "--coefficients", str(not_a_posterior), "--out", str(tmp_path / "r.json")],
                 ["coefficients", str(not_a_posterior), "--model", "acme/Unheard-9b", "--hardware", "H100",
                  "--out", str(tmp_path / "c.json")],
                 ["plan", str(scenario), "--posterior", str(not_a_posterior), "--slo", "ttft_p90<0.2",
                  "--out", str(tmp_path / "plan.json")]):
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        assert exit_.value.code == 2, argv
        err = capsys.readouterr().err
        assert err.count("error: ") == 1 and all(w in err for w in refusal), (argv, err)
    assert not (tmp_path / "p.nc").exists() and not (tmp_path / "plan.json").exists()

    # the fix the message names: model: <config.json> in a deployment.yaml beside the traces
    shutil.copy(samples.parents[1] / "catalog" / "models" / "llama-2-7b.json", folder / "config.json")
    (folder / "deployment.yaml").write_text("model: config.json\nhardware: H100\n")
    assert "warning" not in ingest_ok(folder, tmp_path / "ds", capsys)
    source = Dataset.load(tmp_path / "ds")[folder.name]
    assert source.settings["model"] == str((folder / "config.json").resolve())
    assert deployment_for_source(source).model.n_layers == 32


# -- 10. unknown GPU: ingest warns, fit refuses ----------------------------------------------
def test_unknown_gpu(samples, tmp_path, capsys):
    from bayesblis.cli import main
    from bayesblis.design import deployment_for_source

    otel = sample_copy(samples, tmp_path, "otel-run")
    dep = otel / "deployment.yaml"
    dep.write_text(dep.read_text().replace("H100-SXM-80GB", "B300-Imaginary"))
    err = ingest_ok(otel, tmp_path / "ds", capsys)
    assert err.startswith(f"warning: {dep}, field 'hardware': unknown GPU 'B300-Imaginary'")
    source = Dataset.load(tmp_path / "ds")["toy-otel-run"]
    with pytest.raises(UnknownHardwareError) as exc:
        deployment_for_source(source)
    assert str(exc.value).startswith("source 'toy-otel-run': unknown GPU 'B300-Imaginary'")
    assert "Known GPUs: A100-SXM-80GB" in str(exc.value) and "JSON datasheet" in str(exc.value)

    tv = sample_copy(samples, tmp_path, "tracev2")
    main(["ingest", str(tv / "trace.yaml"), "--hardware", "TPU-v9", "--out", str(tmp_path / "ds2"), "--quiet"])
    assert capsys.readouterr().err.startswith("warning: option --hardware: unknown GPU 'TPU-v9'")


# -- a failed ingest never replaces a good dataset ----------------------------------------------
def test_failed_ingest_keeps_the_existing_dataset(samples, tmp_path, capsys):
    out = tmp_path / "ds"
    ingest_ok(samples / "inference-perf-2stage", out, capsys)
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}

    folder = sample_copy(samples, tmp_path, "inference-perf-2stage")
    edit_json(folder / "requests.json", lambda d: d["requests"][4].update(arrival_time_us=-1000))
    ingest_fails(folder, out, capsys)
    after = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert after == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds", "inference-perf-2stage"]  # no temp left
    assert len(Dataset.load(out)) == 1


def test_no_warnings_for_the_bundled_samples(samples):
    from bayesblis.io.dataset import sample_paths

    with warnings.catch_warnings():
        warnings.simplefilter("error", InputWarning)
        assert len(ingest(sample_paths())) == 3


def test_input_errors_survive_pickling():
    """Errors raised on Dask workers (`ingest --scheduler`) reach the CLI with their fields."""
    import pickle

    e = pickle.loads(pickle.dumps(EmptyInputError("/x/requests.json", "no requests", field="requests")))
    assert type(e) is EmptyInputError and (e.path, e.field, e.message) == ("/x/requests.json", "requests",
                                                                           "no requests")
    assert str(e) == "/x/requests.json, field 'requests': no requests"
