"""Kernel-db reader (AIConfigurator layout): tidy tables, units, provenance, malformed
input, ingest."""

from __future__ import annotations

import warnings
from pathlib import Path

import pandas as pd
import pytest

from bayesblis.errors import BayesBlisError, EmptyInputError, InputError
from bayesblis.io.dataset import Dataset, detect_kind, ingest
from bayesblis.io.kernel_db import OPERATORS, is_kernel_db_folder, read_kernel_db

REAL = Path(__file__).resolve().parents[3] / "shared" / "data" / "kernel-db"

H100 = "NVIDIA H100 80GB HBM3"


def _meta(framework, version, tables, provenance="legacy"):
    lines = ["schema_version: 1", f"provenance: {provenance}", "runtime:", f"  framework: {framework}",
             f"  version: '{version}'", "tables:"]
    lines += [f"  {t}:\n    status: complete" for t in tables]
    return "\n".join(lines) + "\n"


def _common(device, version, op_name, source, n):
    return {"framework": ["VLLM"] * n, "version": [version] * n, "device": [device] * n,
            "op_name": [op_name] * n, "kernel_source": [source] * n}


def write_db(root: Path, *, device=H100, gpu="h100_sxm") -> Path:
    """A tiny kernel-db: every table on one GPU (vLLM 0.14.0, NCCL 2.27.3), GEMM also on L40S."""
    v = root / gpu / "gemm" / "vllm" / "0.14.0"
    v.mkdir(parents=True)
    pd.DataFrame({**_common(device, "0.14.0", "gemm", "vllm_default", 3),
                  "gemm_dtype": ["bfloat16", "bfloat16", "fp8"], "m": [1, 4096, 1],
                  "n": [8192] * 3, "k": [8192] * 3, "latency": [0.05, 0.28, 0.03]}
                 ).to_parquet(v / "gemm_perf.parquet")
    (v / "collection_meta.yaml").write_text(_meta("vllm", "0.14.0", ["gemm_perf"]))
    a = root / gpu / "attention" / "vllm" / "0.14.0"
    a.mkdir(parents=True)
    shape = {"num_heads": [16, 16], "num_key_value_heads": [2, 2], "head_dim": [128, 128], "beam_width": [1, 1],
             "attn_dtype": ["bfloat16"] * 2, "kv_cache_dtype": ["bfloat16", "fp8"]}
    pd.DataFrame({**_common(device, "0.14.0", "generation_attention", "vllm_flash_attn", 2),
                  "batch_size": [32, 64], "isl": [1, 1], **shape, "step": [1023, 4095],
                  "latency": [0.02, 0.09]}).to_parquet(a / "generation_attention_perf.parquet")
    pd.DataFrame({**_common(device, "0.14.0", "context_attention", "vllm_flash_attn", 2),
                  "batch_size": [1, 2], "isl": [2048, 512], **shape, "step": [0, 0],
                  "latency": [0.4, 0.1]}).to_parquet(a / "context_attention_perf.parquet")
    (a / "collection_meta.yaml").write_text(
        _meta("vllm", "0.14.0", ["generation_attention_perf", "context_attention_perf"]))
    (a / "reuse.yaml").write_text("schema_version: 1\nreuse:\n- table: context_attention_perf\n"
                                  "  from_version: 0.24.0\n  reason: forward-fill\n")
    c = root / gpu / "comm" / "vllm" / "0.14.0"
    c.mkdir(parents=True)
    pd.DataFrame({**_common(device, "0.14.0", "all_reduce", "vLLM_custom_graph", 2),
                  "allreduce_dtype": ["bfloat16"] * 2, "num_gpus": [4, 4], "message_size": [8192, 65536],
                  "latency": [0.0049, 0.0071], "backend": ["vllm_graph"] * 2}
                 ).to_parquet(c / "custom_allreduce_perf.parquet")
    (c / "collection_meta.yaml").write_text(_meta("vllm", "0.14.0", ["custom_allreduce_perf"]))
    n = root / gpu / "comm" / "nccl" / "2.27.3"
    n.mkdir(parents=True)
    pd.DataFrame({"nccl_dtype": ["half", "int8"], "num_gpus": [2, 2], "message_size": [1024, 1024],
                  "kernel_source": ["NCCL"] * 2, "op_name": ["all_reduce", "all_gather"],
                  "latency": [0.006, 0.005]}).to_parquet(n / "nccl_perf.parquet")
    (n / "collection_meta.yaml").write_text(_meta("nccl", "2.27.3", ["nccl_perf"]))
    m = root / gpu / "moe" / "vllm" / "0.14.0"
    m.mkdir(parents=True)
    pd.DataFrame({**_common(device, "0.14.0", "moe", "vllm_fused_moe", 1), "moe_dtype": ["fp8"],
                  "num_tokens": [8], "hidden_size": [4096], "inter_size": [14336], "topk": [2],
                  "num_experts": [8], "moe_tp_size": [1], "moe_ep_size": [1], "distribution": ["balanced"],
                  "latency": [0.15]}).to_parquet(m / "moe_perf.parquet")
    (m / "collection_meta.yaml").write_text(_meta("vllm", "0.14.0", ["moe_perf"]))
    lg = root / "l40s" / "gemm" / "vllm" / "0.14.0"
    lg.mkdir(parents=True)
    pd.DataFrame({**_common("NVIDIA L40S", "0.14.0", "gemm", "vllm_default", 1), "gemm_dtype": ["bfloat16"],
                  "m": [1], "n": [8192], "k": [8192], "latency": [0.2]}).to_parquet(lg / "gemm_perf.parquet")
    (lg / "collection_meta.yaml").write_text(_meta("vllm", "0.14.0", ["gemm_perf"], provenance="collected"))
    return root


@pytest.fixture
def db_root(tmp_path):
    return write_db(tmp_path / "kernel-db")


def test_reads_a_tidy_table_per_operator_with_units_and_provenance(db_root):
    db = read_kernel_db(db_root)
    assert set(db.tables) == set(OPERATORS)
    g = db["gemm"]
    assert set(g["gpu"]) == {"H100-SXM", "L40S"}
    h = g[(g["gpu"] == "H100-SXM") & (g["m"] == 4096)].iloc[0]
    assert h["latency_us"] == pytest.approx(280.0)  # 0.28 ms
    assert h["dtype"] == "bf16" and h["framework_version"] == "0.14.0" and h["provenance"] == "legacy"
    assert h["device"] == H100 and h["file"] == "h100_sxm/gemm/vllm/0.14.0/gemm_perf.parquet"
    assert g[g["gpu"] == "L40S"]["provenance"].iloc[0] == "collected"
    dec = db["decode_attention"]
    assert list(dec["kv_len_tokens"]) == [1024, 4096]  # step + the one new token
    assert list(dec["num_kv_heads"]) == [2, 2] and list(dec["kv_cache_dtype"]) == ["bf16", "fp8"]
    pre = db["prefill_attention"]
    assert list(pre["prompt_tokens"]) == [2048, 512] and set(pre["reuse_from_version"]) == {"0.24.0"}
    assert dec["reuse_from_version"].isna().all()
    ar = db["custom_allreduce"]
    assert list(ar["message_bytes"]) == [16384, 131072]  # bf16 elements x 2
    assert ar["latency_us"].iloc[0] == pytest.approx(4.9)
    nccl = db["nccl"]
    assert list(nccl["dtype"]) == ["fp16", "int8"] and list(nccl["message_bytes"]) == [2048, 1024]
    assert nccl["device"].isna().all() and set(nccl["framework"]) == {"nccl"}  # no device column
    moe = db["moe"]
    assert moe.iloc[0][["tp", "ep", "topk", "num_experts"]].tolist() == [1, 1, 2, 8]
    assert len(db.files) == 7 and db.files["n_rows"].sum() == sum(len(t) for t in db.tables.values())
    assert db.files.set_index("table").loc["context_attention_perf", "reuse_reason"] == "forward-fill"


def test_one_gpu_folder_and_filters(db_root):
    one = read_kernel_db(db_root / "l40s")
    assert list(one.tables) == ["gemm"] and one.files["file"].iloc[0].startswith("l40s/")
    only = read_kernel_db(db_root, gpus=["H100-SXM"], versions=["2.27.3"])
    assert list(only.tables) == ["nccl"]
    with pytest.raises(EmptyInputError):
        read_kernel_db(db_root, versions=["9.9"])


def test_detected_and_ingested_into_a_dataset(db_root, tmp_path):
    assert is_kernel_db_folder(db_root) and is_kernel_db_folder(db_root / "h100_sxm")
    assert detect_kind(db_root) == "kernel_db" and detect_kind(db_root / "h100_sxm") == "kernel_db"
    assert not is_kernel_db_folder(db_root / "h100_sxm" / "gemm")
    ds = ingest([db_root])
    (src,) = ds.sources
    assert src.kind == "kernel_db" and set(src.tables) == set(OPERATORS) | {"kernel_files"}
    assert src.meta["gpus"] == ["H100-SXM", "L40S"]
    assert len(src.inputs) == 7 + 6 + 1  # tables, collection_meta.yaml files, reuse.yaml
    back = Dataset.load(ds.save(tmp_path / "ds"))
    pd.testing.assert_frame_equal(back["kernel-db"].tables["gemm"], src.tables["gemm"],
                                  check_dtype=False, check_categorical=False)  # an all-NA category column reads back object-typed
    assert back["kernel-db"].tables["gemm"]["gpu"].dtype == "category"
    from bayesblis.design import build_model_data

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(BayesBlisError, match="no observations"):
            build_model_data(back)  # nothing to fit from kernel tables alone (yet)
    assert any("kernel_db" in str(w.message) for w in caught)


def _rewrite(path: Path, **changes):
    table = pd.read_parquet(path)
    for column, value in changes.items():
        if value is None:
            table = table.drop(columns=column)
        else:
            table[column] = value
    table.to_parquet(path)


def test_malformed_inputs_name_file_field_and_expected(db_root):
    gemm = db_root / "h100_sxm" / "gemm" / "vllm" / "0.14.0" / "gemm_perf.parquet"
    _rewrite(gemm, m=None)
    with pytest.raises(InputError) as e:
        read_kernel_db(db_root)
    assert e.value.path == str(gemm) and e.value.field == "m" and "missing column" in str(e.value)

    write_db(db_root.parent / "b")
    gemm = db_root.parent / "b" / "h100_sxm" / "gemm" / "vllm" / "0.14.0" / "gemm_perf.parquet"
    _rewrite(gemm, latency=[0.05, -1.0, 0.03])
    with pytest.raises(InputError) as e:
        read_kernel_db(db_root.parent / "b")
    assert e.value.field == "latency" and e.value.record == "row 1" and "positive latency in ms" in str(e.value)

    write_db(db_root.parent / "c")
    gemm = db_root.parent / "c" / "h100_sxm" / "gemm" / "vllm" / "0.14.0" / "gemm_perf.parquet"
    _rewrite(gemm, n=[8192, 8192.5, 8192])
    with pytest.raises(InputError, match="not an integer") as e:
        read_kernel_db(db_root.parent / "c")
    assert e.value.field == "n"

    write_db(db_root.parent / "d")
    gemm = db_root.parent / "d" / "h100_sxm" / "gemm" / "vllm" / "0.14.0" / "gemm_perf.parquet"
    gemm.write_bytes(b"PAR1 not really")
    with pytest.raises(InputError, match="not a readable parquet file"):
        read_kernel_db(db_root.parent / "d")


def test_meta_and_device_checks(tmp_path):
    root = write_db(tmp_path / "e")
    meta = root / "h100_sxm" / "moe" / "vllm" / "0.14.0" / "collection_meta.yaml"
    meta.write_text(_meta("vllm", "0.15.0", ["moe_perf"]))
    with pytest.raises(InputError) as e:
        read_kernel_db(root)
    assert e.value.field == "runtime.version" and "'0.14.0'" in str(e.value)
    meta.write_text("runtime: [1, 2\n")
    with pytest.raises(InputError, match="not valid YAML"):
        read_kernel_db(root)

    root = write_db(tmp_path / "f", device="NVIDIA A100-SXM4-80GB")  # A100 rows in the H100 folder
    with pytest.raises(InputError) as e:
        read_kernel_db(root)
    assert e.value.field == "device" and "H100-SXM device" in str(e.value)

    with pytest.raises(InputError, match="no kernel-db tables"):
        read_kernel_db(tmp_path / "e" / "h100_sxm" / "gemm")


@pytest.mark.skipif(not REAL.is_dir(), reason="shared kernel-db not present")
def test_real_kernel_db_custom_allreduce_points():
    db = read_kernel_db(REAL, gpus=["H100-SXM"], versions=["0.14.0"])
    ar = db["custom_allreduce"]
    graph = ar[(ar["num_gpus"] == 4) & (ar["backend"] == "vllm_graph")].set_index("message_elements")
    # README: 1 and 32 tokens of an 8192-wide model at TP4: 4.9 and 11.4 us
    assert graph.loc[8192, "latency_us"] == pytest.approx(4.9, abs=0.1)
    assert graph.loc[32 * 8192, "latency_us"] == pytest.approx(11.4, abs=0.2)
    assert set(db.files["gpu"]) == {"H100-SXM"} and set(db.files["framework_version"]) == {"0.14.0"}
