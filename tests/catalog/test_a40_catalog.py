"""A40 datasheet (operator profiles of issue #18 are timed on it)."""

import json
from pathlib import Path

import pytest

from bayesblis.catalog.gpus import list_gpus, load_gpu
from bayesblis.errors import UnknownHardwareError
from bayesblis.features.physics import Deployment

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("alias", ["A40", "a40", "NVIDIA A40", "A40-48GB"])
def test_a40_in_catalog_with_aliases(alias):
    assert "A40" in list_gpus()
    assert load_gpu(alias).name == "A40"


def test_a40_dense_figures_and_pcie_interconnect():
    g = load_gpu("A40")
    assert g.peak_flops("bf16") == pytest.approx(149.7e12)  # dense; 299.4 with sparsity
    assert g.peak_flops("fp16") == g.peak_flops("bf16")
    assert g.hbm_bandwidth_bytes_per_s == pytest.approx(696e9)
    assert g.memory_bytes == 48 * 2**30
    assert not g.has_nvlink  # GPU-to-GPU traffic over PCIe Gen4 x16, per direction
    assert g.interconnect_bandwidth_bytes_per_s == g.pcie_bandwidth_bytes_per_s == 32e9
    assert g.mfu_prefill is None and g.mfu_decode is None
    with pytest.raises(UnknownHardwareError, match="fp8"):  # Ampere: no FP8 tensor cores
        g.peak_flops("fp8")
    sources = json.loads((ROOT / "bayesblis" / "catalog" / "gpus" / "a40.json").read_text())["sources"]
    assert any("PCIe Gen4 x16" in s for s in sources)


def test_a40_deployment_auto_dtype_and_kv_blocks():
    d = Deployment("llama-2-7b", "A40", tp=2, dtype="auto")
    assert d.compute_dtype == "fp16" and d.peak_flops_per_s == pytest.approx(149.7e12)
    assert d.interconnect_bandwidth_bytes_per_s == 32e9
    assert d.kv_cache_blocks(0.9) > 0
