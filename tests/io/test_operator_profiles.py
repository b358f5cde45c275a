"""Operator-profiles reader: tidy tables, model mapping, malformed input, ingest."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from bayesblis.errors import InputError
from bayesblis.io.operator_profiles import (LINEAR_OPERATORS, is_operator_profiles_folder,
                                            read_operator_profiles)
from profile_helpers import SHAPES, TOKENS, linear_time_s, write_profiles


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return write_profiles(tmp_path_factory.mktemp("profiles") / "vidur")


def test_reads_tidy_compute_and_all_reduce_rows(folder):
    prof = read_operator_profiles(folder)
    c = prof.compute
    assert set(c["gpu"]) == {"A100-SXM-80GB", "H100-SXM"}
    assert set(c["model"]) == {"llama-2-7b", "tiny-2b"}  # catalog preset / derived from shapes
    assert set(c["operator"]) >= set(LINEAR_OPERATORS) | {"mlp_act", "input_layernorm"}
    assert len(c) == 2 * 2 * 2 * len(TOKENS) * 10  # gpus x models x tp x tokens x operators
    one = c[(c["gpu"] == "H100-SXM") & (c["model"] == "llama-2-7b") & (c["tp"] == 2)
            & (c["num_tokens"] == 1024) & (c["operator"] == "mlp_act")]
    assert one["time_s_mean"].iloc[0] == pytest.approx(0.01e-3)  # ms -> s
    assert one["line"].iloc[0] == 2 + len(TOKENS) + TOKENS.index(1024)
    lin = prof.linear_layer_times()
    row = lin[(lin["gpu"] == "A100-SXM-80GB") & (lin["model"] == "tiny-2b") & (lin["tp"] == 1)
              & (lin["num_tokens"] == 4096)]
    assert row["time_s"].iloc[0] == pytest.approx(
        linear_time_s("a100", SHAPES["acme/tiny-2b"], 1, 4096), rel=1e-9)
    ar = prof.all_reduce
    assert set(ar["topology"]) == {"dgx"} and set(ar["gpu"]) == {"A100-SXM-80GB", "H100-SXM"}
    assert {"num_workers", "devices_per_node", "size_bytes", "time_s_mean"} <= set(ar.columns)
    assert ar["size_bytes"].min() == 2048


def test_model_mapping_catalog_and_derived(folder):
    models = read_operator_profiles(folder).models
    assert models["llama-2-7b"].n_layers == 32  # the preset
    tiny = models["tiny-2b"]  # not in the catalog: dense, non-gated, from the shape columns
    assert (tiny.family, tiny.arch, tiny.gated_mlp, tiny.hidden_size, tiny.head_dim) == (
        "tiny", "dense", False, 2048, 128)
    assert tiny.dense_layer_matmul_params == 4 * 2048**2 + 2 * 2048 * 8192


def test_real_profiles_folder_maps_every_model():
    from pathlib import Path

    real = Path(__file__).resolve().parents[3] / "shared" / "data" / "operator-profiles"
    if not real.is_dir():
        pytest.skip("shared operator profiles absent")
    assert is_operator_profiles_folder(real)
    # one small file per GPU is enough to check names (the whole folder takes seconds)
    from bayesblis.io.operator_profiles import profile_model

    phi = profile_model("microsoft/phi-2", dict(n_head=32, n_kv_head=32, n_embd=2560,
                                                n_expanded_embd=10240, vocab_size=51200,
                                                use_gated_mlp=False))
    assert (phi.name, phi.family, phi.n_layers, phi.gated_mlp) == ("phi-2", "phi", 32, False)
    qwen = profile_model("Qwen/Qwen-72B", dict(n_head=64, n_kv_head=64, n_embd=8192,
                                               n_expanded_embd=24576, vocab_size=152064,
                                               use_gated_mlp=True))
    assert (qwen.name, qwen.family, qwen.n_layers) == ("qwen-72b", "qwen", 80)


def _copy(folder, tmp_path):
    import shutil

    dst = tmp_path / "p"
    shutil.copytree(folder, dst)
    return dst, dst / "compute" / "a100" / "meta-llama" / "Llama-2-7b-hf" / "mlp.csv"


def _edit(path, fn):
    table = pd.read_csv(path, dtype=str, keep_default_na=False)
    fn(table)
    table.to_csv(path, index=False)


@pytest.mark.parametrize("edit, line, field, words", [
    (lambda t: t.drop(columns=["time_stats.mlp_up_proj.mean"], inplace=True), None,
     "time_stats.mlp_up_proj.mean", "missing column"),
    (lambda t: t.__setitem__("time_stats.attn_pre_proj.mean", ["0.5"] * 3 + [""] + ["0.5"] * (len(t) - 4)),
     5, "time_stats.attn_pre_proj.mean", "not a finite number"),
    (lambda t: t.__setitem__("time_stats.attn_post_proj.median", ["nan"] + ["0.1"] * (len(t) - 1)),
     2, "time_stats.attn_post_proj.median", "not a finite number"),
    (lambda t: t.__setitem__("time_stats.mlp_down_proj.mean", ["0.2"] * 6 + ["-0.1"] + ["0.2"] * (len(t) - 7)),
     8, "time_stats.mlp_down_proj.mean", "non-positive"),
    (lambda t: t.__setitem__("time_stats.mlp_down_proj.mean", ["0"] * len(t)), 2,
     "time_stats.mlp_down_proj.mean", "non-positive"),
    (lambda t: t.__setitem__("num_tokens", ["1.5"] + list(t["num_tokens"][1:])), 2, "num_tokens",
     "not an integer"),
    (lambda t: t.__setitem__("n_embd", ["4096"] * 9 + ["5120"] + ["4096"] * (len(t) - 10)), 11,
     "n_embd", "differs"),
    (lambda t: t.__setitem__("use_gated_mlp", ["maybe"] * len(t)), 2, "use_gated_mlp", "boolean"),
    (lambda t: t.__setitem__("n_expanded_embd", ["12000"] * len(t)), None, "n_expanded_embd",
     "catalog preset"),
])
def test_malformed_compute_file_names_file_line_and_column(folder, tmp_path, edit, line, field, words):
    root, path = _copy(folder, tmp_path)
    _edit(path, edit)
    with pytest.raises(InputError) as info:
        read_operator_profiles(root)
    err = info.value
    assert err.path == str(path) and err.field == field and words in str(err)
    assert err.record == (f"line {line}" if line else None)


def test_undecodable_bytes_and_bad_csv(folder, tmp_path):
    root, path = _copy(folder, tmp_path)
    raw = path.read_bytes().split(b"\n")
    raw[3] = raw[3][:10] + b"\xff\xfe" + raw[3][10:]
    path.write_bytes(b"\n".join(raw))
    with pytest.raises(InputError, match=r"mlp\.csv, record line 4: undecodable byte 0xff"):
        read_operator_profiles(root)
    path.write_text("a,b\n1,2\n3,4,5,6\n")
    with pytest.raises(InputError, match=r"not a valid CSV table") as info:
        read_operator_profiles(root)
    assert info.value.record == "line 3"
    path.write_text("")
    with pytest.raises(InputError, match="empty file"):
        read_operator_profiles(root)


def test_malformed_all_reduce_and_layout(folder, tmp_path):
    root, _ = _copy(folder, tmp_path)
    ar = root / "network" / "h100_dgx" / "all_reduce.csv"
    _edit(ar, lambda t: t.__setitem__("time_stats.all_reduce.mean", ["0.1"] * 4 + ["inf"] + ["0.1"] * (len(t) - 5)))
    with pytest.raises(InputError) as info:
        read_operator_profiles(root)
    assert (info.value.path, info.value.record, info.value.field) == (
        str(ar), "line 6", "time_stats.all_reduce.mean")
    _edit(ar, lambda t: t.drop(columns=["size"], inplace=True))
    with pytest.raises(InputError, match="missing column") as info:
        read_operator_profiles(root)
    assert info.value.field == "size"
    from profile_helpers import all_reduce_table

    all_reduce_table("h100").to_csv(ar)
    (root / "network" / "h100_dgx").rename(root / "network" / "tpu9_dgx")
    with pytest.raises(InputError, match="GPU folder 'tpu9' is not a catalog GPU"):
        read_operator_profiles(root)
    with pytest.raises(InputError, match="not an operator-profiles folder"):
        read_operator_profiles(tmp_path / "p" / "compute")


def test_ingest_detects_folder_and_round_trips(folder, tmp_path):
    from bayesblis.io.dataset import Dataset, detect_kind, ingest

    assert detect_kind(folder) == "operator_profiles"
    assert detect_kind(folder.parent) == "parent"
    ds = ingest([folder])
    (src,) = ds.sources
    assert (src.kind, src.name) == ("operator_profiles", "vidur")
    assert set(src.tables) == {"operators", "all_reduce"}
    back = Dataset.load(ds.save(tmp_path / "ds"))["vidur"]
    pd.testing.assert_frame_equal(back.tables["operators"], src.tables["operators"])
    from bayesblis.io.operator_profiles import profiles_from_source

    assert profiles_from_source(back).models["tiny-2b"].gated_mlp is False
    assert np.isfinite(back.tables["all_reduce"]["time_s_mean"]).all()


def test_ingested_manifest_follows_the_dataset_schema(folder, tmp_path):
    import json
    from pathlib import Path

    jsonschema = pytest.importorskip("jsonschema")
    from referencing import Registry, Resource

    from bayesblis.io.dataset import ingest

    specs = Path(__file__).resolve().parents[2] / "data_specs"
    schemas = {n: json.loads((specs / f"{n}.schema.json").read_text()) for n in ("dataset", "vllm-settings")}
    reg = Registry().with_resources([(f"bayesblis.dataset-manifest/{n}.schema.json", Resource.from_contents(s))
                                     for n, s in schemas.items()])
    out = ingest([folder]).save(tmp_path / "ds")
    jsonschema.Draft202012Validator(schemas["dataset"], registry=reg).validate(
        json.loads((out / "manifest.json").read_text()))
