"""GPU catalog: built-in datasheets, aliases, validation errors."""

import json
from pathlib import Path

import pytest

from bayesblis.catalog.gpus import GpuSpec, list_gpus, load_gpu
from bayesblis.errors import InputError, UnknownHardwareError

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data"


def test_catalog_lists_required_gpus():
    assert {"H100-SXM", "H200-SXM", "A100-SXM-80GB", "L40S"} <= set(list_gpus())


@pytest.mark.parametrize("alias, name", [
    ("H100", "H100-SXM"), ("h100-sxm", "H100-SXM"), ("H100_SXM", "H100-SXM"),
    ("H200", "H200-SXM"), ("A100", "A100-SXM-80GB"), ("a100-80", "A100-SXM-80GB"),
    ("A100-SXM", "A100-SXM-80GB"), ("l40s", "L40S"),
])
def test_aliases_case_insensitive(alias, name):
    assert load_gpu(alias).name == name


def test_h100_dense_figures():
    g = load_gpu("H100")
    # dense = half the datasheet's sparse 1979 TFLOPS
    assert g.peak_flops("bf16") == pytest.approx(989.4e12)
    assert g.peak_flops("bfloat16") == g.peak_flops("bf16")
    assert g.peak_flops("fp8") == pytest.approx(1978.9e12)
    assert g.hbm_bandwidth_bytes_per_s == pytest.approx(3.35e12)
    assert g.memory_bytes == 80 * 2**30
    assert g.nvlink_bandwidth_bytes_per_s == pytest.approx(450e9)  # 900 GB/s bidirectional
    assert g.mfu_prefill == 0.45 and g.mfu_decode == 0.30


def test_a100_has_no_fp8_and_error_is_clear():
    g = load_gpu("A100")
    assert not g.supports("fp8")
    with pytest.raises(UnknownHardwareError, match=r"A100-SXM-80GB.*fp8.*supported: bf16"):
        g.peak_flops("fp8")


def test_l40s_uses_pcie_as_interconnect():
    g = load_gpu("L40S")
    assert not g.has_nvlink
    assert g.interconnect_bandwidth_bytes_per_s == g.pcie_bandwidth_bytes_per_s == 32e9
    assert g.peak_flops("fp8") == pytest.approx(733e12)  # dense, not BLIS's sparse 1466


def test_h200_guesses_h100_mfu():
    h200, h100 = load_gpu("H200"), load_gpu("H100")
    assert h200.hbm_bandwidth_bytes_per_s == pytest.approx(4.8e12)
    assert (h200.mfu_prefill, h200.mfu_decode) == (h100.mfu_prefill, h100.mfu_decode)


def test_unknown_gpu_lists_known_names():
    with pytest.raises(UnknownHardwareError) as info:
        load_gpu("B200")
    text = str(info.value)
    assert "B200" in text and "H100-SXM" in text and "L40S" in text


def _sheet(**overrides):
    data = load_gpu("H100").to_dict()
    data.update(overrides)
    return data


def test_datasheet_file_roundtrip(tmp_path):
    path = tmp_path / "my-gpu.json"
    path.write_text(json.dumps(_sheet(name="MyGPU", aliases=[])))
    g = load_gpu(str(path))
    assert isinstance(g, GpuSpec) and g.name == "MyGPU"
    assert g.peak_flops("bf16") == load_gpu("H100").peak_flops("bf16")


@pytest.mark.parametrize("field, value", [
    ("hbm_bandwidth_bytes_per_s", None), ("hbm_bandwidth_bytes_per_s", -1),
    ("memory_bytes", "80GB"), ("pcie_bandwidth_bytes_per_s", 0), ("mfu_decode", 1.5),
])
def test_invalid_datasheet_names_file_and_field(tmp_path, field, value):
    data = _sheet()
    if value is None:
        del data[field]
    else:
        data[field] = value
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(InputError) as info:
        load_gpu(path)
    assert "bad.json" in str(info.value) and field in str(info.value)


def test_invalid_dtype_key_and_bad_json(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(_sheet(peak_dense_flops_per_s={"fp4": 1e15})))
    with pytest.raises(InputError, match=r"peak_dense_flops_per_s\.fp4"):
        load_gpu(path)
    path.write_text("{not json")
    with pytest.raises(InputError, match="bad.json"):
        load_gpu(path)
    with pytest.raises(InputError, match="missing.json"):
        load_gpu(tmp_path / "missing.json")


@pytest.mark.skipif(not (SHARED / "hardware").is_dir(), reason="shared data absent")
def test_catalog_agrees_with_public_reference_tables():
    sparse = json.loads((SHARED / "hardware" / "h100-sxm.json").read_text())
    h100 = load_gpu("H100")
    assert sparse["compute"]["with_sparsity"]
    assert h100.peak_flops("bf16") == pytest.approx(sparse["compute"]["bf16_tensor_core"] / 2 * 1e12, rel=1e-3)
    assert h100.peak_flops("tf32") == pytest.approx(sparse["compute"]["tf32_tensor_core"] / 2 * 1e12, rel=1e-3)
    assert h100.hbm_bandwidth_bytes_per_s == pytest.approx(sparse["memory"]["bandwidth_tb_s"] * 1e12)
    assert h100.nvlink_bandwidth_bytes_per_s == pytest.approx(sparse["interconnect"]["nvlink_bandwidth_gb_s"] / 2 * 1e9)
    blis = json.loads((SHARED / "hardware" / "blis_hardware_config.json").read_text())
    for key, name in [("H100", "H100"), ("A100-SXM", "A100"), ("A100-80", "A100"), ("L40S", "L40S")]:
        g = load_gpu(name)
        row = blis[key]
        assert g.peak_flops("bf16") == pytest.approx(row["TFlopsPeak"] * 1e12, rel=1e-3)
        assert g.hbm_bandwidth_bytes_per_s == pytest.approx(row["BwPeakTBs"] * 1e12)
        assert g.memory_bytes == row["MemoryGiB"] * 2**30
        assert (g.mfu_prefill, g.mfu_decode) == (row["mfuPrefill"], row["mfuDecode"])


def test_builtin_datasheets_follow_the_json_schema():
    import jsonschema
    root = Path(__file__).resolve().parents[2]
    schema = json.loads((root / "data_specs" / "gpu-datasheet.schema.json").read_text())
    for path in sorted((root / "bayesblis" / "catalog" / "gpus").glob("*.json")):
        jsonschema.validate(json.loads(path.read_text()), schema)
    jsonschema.validate(load_gpu("L40S").to_dict(), schema)
