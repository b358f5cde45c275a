"""The GPUs of the kernel database resolve to catalog datasheets, with their interconnect."""

from __future__ import annotations

import pytest

from bayesblis.catalog.gpus import load_gpu

KERNEL_DB_GPUS = {  # folder, device string in the files -> catalog name, NVLink per direction (B/s)
    ("h100_sxm", "NVIDIA H100 80GB HBM3"): ("H100-SXM", 450e9),
    ("a100_sxm", "NVIDIA A100-SXM4-80GB"): ("A100-SXM-80GB", 300e9),
    ("h200_sxm", "NVIDIA H200"): ("H200-SXM", 450e9),
    ("l40s", "NVIDIA L40S"): ("L40S", None),
}


@pytest.mark.parametrize("names, expected", list(KERNEL_DB_GPUS.items()))
def test_folder_and_device_names_resolve_with_interconnect(names, expected):
    folder, device = names
    name, nvlink = expected
    gpu = load_gpu(folder)
    assert gpu.name == name and load_gpu(device).name == name
    if nvlink is None:  # PCIe only: GPU-to-GPU traffic over PCIe Gen4 x16
        assert not gpu.has_nvlink and gpu.interconnect_bandwidth_bytes_per_s == gpu.pcie_bandwidth_bytes_per_s == 32e9
    else:
        assert gpu.has_nvlink and gpu.nvlink_bandwidth_bytes_per_s == nvlink
    assert gpu.peak_flops("bf16") > 0 and gpu.hbm_bandwidth_bytes_per_s > 0 and gpu.memory_bytes > 0


def test_datasheet_figures_of_the_new_gpus():
    a100, l40s, h200 = load_gpu("A100-SXM-80GB"), load_gpu("L40S"), load_gpu("H200-SXM")
    assert (a100.peak_flops("bf16"), a100.hbm_bandwidth_bytes_per_s) == (312e12, 2.039e12)
    assert not a100.supports("fp8")
    assert (l40s.peak_flops("bf16"), l40s.peak_flops("fp8"), l40s.hbm_bandwidth_bytes_per_s) == (362.05e12, 733e12, 864e9)
    assert (h200.peak_flops("bf16"), h200.hbm_bandwidth_bytes_per_s, h200.memory_bytes) == (989.4e12, 4.8e12, 141 * 2**30)
