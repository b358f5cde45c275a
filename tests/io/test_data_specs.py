"""The data_specs JSON Schemas are valid and accept the bundled samples."""

import json
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]

jsonschema = pytest.importorskip("jsonschema")
SPECS = REPO / "data_specs"
MINE = ["otel-traces", "kv-events", "inference-perf", "trace-v2", "vllm-settings", "dataset"]


def _schema(name):
    return json.loads((SPECS / f"{name}.schema.json").read_text())


@pytest.mark.parametrize("name", MINE)
def test_schema_is_valid_and_documented(name):
    jsonschema.Draft202012Validator.check_schema(_schema(name))
    assert (SPECS / f"{name}.md").is_file()


def _validator(name):
    from referencing import Registry, Resource

    # sibling-file refs ("vllm-settings.schema.json") resolve against the referrer's $id
    reg = Registry().with_resources(
        [(f"bayesblis.dataset-manifest/{n}.schema.json", Resource.from_contents(_schema(n))) for n in MINE])
    return jsonschema.Draft202012Validator(_schema(name), registry=reg)


def test_samples_validate(samples, tmp_path):
    v = _validator("otel-traces")
    for line in (samples / "otel-run" / "traces.json").read_text().splitlines():
        v.validate(json.loads(line))
    v = _validator("kv-events")
    for line in (samples / "otel-run" / "kv_events.jsonl").read_text().splitlines():
        v.validate(json.loads(line))
    _validator("inference-perf").validate(json.loads((samples / "inference-perf-2stage" / "requests.json").read_text()))
    _validator("trace-v2").validate(yaml.safe_load((samples / "tracev2" / "trace.yaml").read_text()))
    from bayesblis.io.dataset import ingest, sample_paths

    out = ingest(sample_paths()).save(tmp_path / "ds")
    _validator("dataset").validate(json.loads((out / "manifest.json").read_text()))
    with pytest.raises(jsonschema.ValidationError):
        _validator("kv-events").validate(json.loads('[1.0, [["BlockRemoved", [1], "TAPE"]]]'))
