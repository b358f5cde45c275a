"""build_model_data: sources -> configurations + observation table (ModelData)."""

from __future__ import annotations

import sys
import types
import warnings

import numpy as np
import pandas as pd
import pytest

from bayesblis.design import build_model_data, deployment_for_source, describe
from bayesblis.errors import BayesBlisError
from bayesblis.io.dataset import Dataset, ingest, ingest_one
from bayesblis.model.data import ModelData

from recon_helpers import SAMPLE


@pytest.fixture(scope="module")
def otel_source():
    return ingest_one("otel_run", SAMPLE)


def _dataset(*sources):
    return Dataset(sources=list(sources))


def test_sample_otel_run_gives_valid_model_data(otel_source):
    md = build_model_data(_dataset(otel_source))
    assert isinstance(md, ModelData)
    assert list(md.configs["config"]) == ["llama-2-7b|H100-SXM|tp1|ep1|fp16"]
    assert md.kinds() == sorted(["step_gap", "decode_window", "queue_to_first_token",
                                 "arrival_to_queue", "post_decode"])
    assert len(md.obs) == 35 and set(md.obs["source"]) == {"toy-otel-run"}
    assert md.index_of(md.obs).max() == 0


def test_sources_of_one_config_share_a_row(otel_source):
    import copy

    twin = copy.copy(otel_source)
    twin.name = "toy-otel-run-2"
    md = build_model_data(_dataset(otel_source, twin))
    assert len(md.configs) == 1 and len(md.obs) == 70
    assert set(md.obs["source"]) == {"toy-otel-run", "toy-otel-run-2"}


def test_hardware_argument_and_missing_hardware(otel_source):
    import copy

    bare = copy.copy(otel_source)
    bare.settings = {**otel_source.settings, "hardware": None}
    with pytest.raises(BayesBlisError, match="hardware is unknown"):
        build_model_data(_dataset(bare))
    md = build_model_data(_dataset(bare), hardware="A100-SXM-80GB")
    assert md.configs["hardware"].iloc[0].startswith("A100")
    # the source's own hardware wins over the fallback argument
    assert deployment_for_source(otel_source, "L40S").gpu.name.startswith("H100")


def test_a_sources_sampler_follows_its_models_defaults_and_the_generation_config(otel_source):
    import copy

    assert otel_source.settings["model"] == "meta-llama/Llama-2-7b-hf"   # top-p 0.9: sorts
    assert deployment_for_source(otel_source).sampler == "sort"
    off = copy.copy(otel_source)
    off.settings = {**otel_source.settings, "generation_config": "vllm"}
    assert deployment_for_source(off).sampler == "plain"
    mixtral = copy.copy(otel_source)
    mixtral.settings = {**otel_source.settings, "model": "mixtral-8x7b", "tp": 2}
    assert deployment_for_source(mixtral).sampler == "plain"             # no defaults known


def test_kinds_filter_and_subsampling(otel_source):
    md = build_model_data(_dataset(otel_source), kinds=["step_gap", "post_decode"])
    assert md.kinds() == ["post_decode", "step_gap"]
    a = build_model_data(_dataset(otel_source), max_obs_per_config=10, seed=3)
    b = build_model_data(_dataset(otel_source), max_obs_per_config=10, seed=3)
    c = build_model_data(_dataset(otel_source), max_obs_per_config=10, seed=4)
    assert len(a.obs) == 10
    pd.testing.assert_frame_equal(a.obs, b.obs)
    assert not a.obs["y_s"].equals(c.obs["y_s"]) or not a.obs["kind"].equals(c.obs["kind"])


def test_describe_counts_per_config_and_kind(otel_source):
    d = describe(build_model_data(_dataset(otel_source)))
    assert list(d.columns) == ["config", "kind", "n_obs", "n_steps", "median_y_s"]
    counts = dict(zip(d["kind"], d["n_obs"]))
    assert counts == {"arrival_to_queue": 8, "decode_window": 6, "post_decode": 7,
                      "queue_to_first_token": 8, "step_gap": 6}
    assert d.loc[d["kind"] == "step_gap", "n_steps"].item() == 18


def test_inference_perf_sources_use_client_windows(monkeypatch, otel_source):
    from bayesblis.io.dataset import sample_paths

    ds = ingest(sample_paths()[:2])                         # inference-perf and OTEL
    monkeypatch.setitem(sys.modules, "bayesblis.client_windows", None)    # not importable
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        md = build_model_data(ds)
    assert any("client_windows is not available" in str(w.message) for w in caught)
    assert set(md.obs["source"]) == {"toy-otel-run"}

    seen = {}

    def client_observations(source, deployment):
        seen["source"] = source.name
        seen["config"] = deployment.config_key
        return pd.DataFrame({"kind": ["client_decode"] * 2, "y_s": [0.5, 0.7], "n_steps": [40, 50],
                             "f_step_overhead_s": [40e-6, 50e-6], "request_id": ["a", "b"]})

    monkeypatch.setitem(sys.modules, "bayesblis.client_windows",
                        types.SimpleNamespace(client_observations=client_observations))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        md = build_model_data(ds, hardware="H100")
    assert seen["source"] == "inference-perf-2stage"
    client = md.obs[md.obs["kind"] == "client_decode"]
    assert len(client) == 2 and set(client["source"]) == {"inference-perf-2stage"}
    assert (client["f_decode_compute_s"] == 0).all()                      # missing features = 0
    assert np.isfinite(md.obs.filter(like="f_").to_numpy(float)).all()


def test_no_usable_source_is_an_error(monkeypatch):
    from bayesblis.io.dataset import sample_paths

    ds = ingest(sample_paths()[2:])               # TraceV3 only: every request in the warm-up
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(BayesBlisError, match="hardware is unknown"):
            build_model_data(ds)                  # the sample's server block names no GPU
        with pytest.raises(BayesBlisError, match="no observations"):
            build_model_data(ds, hardware="H100")


def test_observation_rows_match_the_schema(otel_source):
    import json

    import jsonschema
    from recon_helpers import REPO

    schema = json.loads((REPO / "data_specs" / "observations.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    v = jsonschema.Draft202012Validator(schema)
    md = build_model_data(_dataset(otel_source))
    rows = json.loads(md.obs.to_json(orient="records"))
    for row in rows:
        v.validate(row)
    with pytest.raises(jsonschema.ValidationError):
        v.validate({**rows[0], "y_s": 0})


def test_saved_and_loaded_dataset_gives_the_same_rows(otel_source, tmp_path):
    a = build_model_data(_dataset(otel_source))
    loaded = Dataset.load(_dataset(otel_source).save(tmp_path / "ds"))
    b = build_model_data(loaded)
    cols = ["kind", "n_steps", "y_s"] + [c for c in a.obs.columns if c.startswith(("f_", "a_"))]
    pd.testing.assert_frame_equal(a.obs[cols], b.obs[cols], check_dtype=False)


def test_bundled_samples_with_the_client_windows_module():
    import bayesblis.client_windows  # noqa: F401
    from bayesblis.io.dataset import sample_paths

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        md, summary = build_model_data(ingest(sample_paths()), hardware="H100-SXM", return_summary=True)
    assert len(md.configs) == 1                                   # both sources: llama-2-7b on H100
    assert set(md.obs["source"]) == {"inference-perf-2stage", "toy-otel-run"}
    # the TraceV3 sample is read as a client trace: 12 requests in its first seconds, all
    # inside the warm-up, so no window
    assert summary["trace"]["config"] == md.configs["config"].iloc[0]
    assert summary["trace"]["skipped"].startswith("no usable window")
    assert {"step_gap", "decode_window"} <= set(md.kinds())
