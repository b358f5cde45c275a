"""GPU datasheets: the `GpuSpec` record, the built-in catalog and datasheet validation.

A datasheet is a JSON file following data_specs/gpu-datasheet.md. All figures are
*dense* (no structured sparsity) and in SI units: FLOP/s, bytes/s, bytes.
Interconnect bandwidths are per GPU and per direction (unidirectional).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Mapping

from bayesblis.errors import InputError, UnknownHardwareError
from bayesblis.io.text import load_json_checked

CATALOG_DIR = Path(__file__).with_name("gpus")
SCHEMA_ID = "bayesblis.gpu-datasheet/1"
DTYPES = ("bf16", "fp16", "fp8", "int8", "tf32")
"""Compute dtypes a datasheet may list under `peak_dense_flops_per_s`."""

_DTYPE_ALIASES = {
    "bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float8": "fp8",
    "fp8_e4m3": "fp8", "fp8_e5m2": "fp8", "e4m3": "fp8", "float8_e4m3fn": "fp8",
}


def normalize_dtype(dtype: str) -> str:
    """Canonical compute-dtype name ('bfloat16' -> 'bf16', 'float8' -> 'fp8', ...)."""
    key = str(dtype).strip().lower()
    return _DTYPE_ALIASES.get(key, key)


@dataclass(frozen=True)
class GpuSpec:
    """One GPU model's public datasheet figures (dense, SI units, per GPU)."""

    name: str
    peak_flops_per_s: Mapping[str, float]
    hbm_bandwidth_bytes_per_s: float
    memory_bytes: float
    nvlink_bandwidth_bytes_per_s: float
    pcie_bandwidth_bytes_per_s: float
    aliases: tuple[str, ...] = ()
    has_nvlink: bool = True
    mfu_prefill: float | None = None
    mfu_decode: float | None = None
    vendor: str = ""
    architecture: str = ""
    source: str = field(default="", compare=False)

    def __post_init__(self):
        object.__setattr__(self, "peak_flops_per_s",
                           MappingProxyType(dict(self.peak_flops_per_s)))
        object.__setattr__(self, "aliases", tuple(self.aliases))

    def __hash__(self):
        return hash((self.name, tuple(sorted(self.peak_flops_per_s.items())),
                     self.hbm_bandwidth_bytes_per_s, self.memory_bytes))

    def supports(self, dtype: str) -> bool:
        """True if the GPU has tensor-core throughput for `dtype`."""
        return self.peak_flops_per_s.get(normalize_dtype(dtype), 0.0) > 0.0

    def peak_flops(self, dtype: str) -> float:
        """Peak dense FLOP/s for `dtype`; raises UnknownHardwareError if unsupported."""
        key = normalize_dtype(dtype)
        value = self.peak_flops_per_s.get(key, 0.0)
        if not value or value <= 0:
            supported = sorted(k for k, v in self.peak_flops_per_s.items() if v > 0)
            raise UnknownHardwareError(
                f"GPU {self.name} has no peak FLOP/s for dtype '{dtype}' "
                f"(supported: {', '.join(supported)})")
        return float(value)

    @property
    def interconnect_bandwidth_bytes_per_s(self) -> float:
        """GPU-to-GPU bandwidth per direction: NVLink, or PCIe when there is none."""
        return self.nvlink_bandwidth_bytes_per_s

    def to_dict(self) -> dict:
        """The datasheet JSON form of this spec (inverse of `gpu_from_dict`)."""
        return {
            "schema": SCHEMA_ID,
            "name": self.name,
            "aliases": list(self.aliases),
            "vendor": self.vendor,
            "architecture": self.architecture,
            "peak_dense_flops_per_s": dict(self.peak_flops_per_s),
            "hbm_bandwidth_bytes_per_s": self.hbm_bandwidth_bytes_per_s,
            "memory_bytes": self.memory_bytes,
            "nvlink_bandwidth_bytes_per_s":
                self.nvlink_bandwidth_bytes_per_s if self.has_nvlink else None,
            "pcie_bandwidth_bytes_per_s": self.pcie_bandwidth_bytes_per_s,
            "mfu_prefill": self.mfu_prefill,
            "mfu_decode": self.mfu_decode,
        }


def _positive(path, data, key, *, allow_none=False, allow_zero=False, required=True):
    if key not in data or data[key] is None:
        if allow_none or not required:
            return None
        raise InputError(path, "missing required field", field=key,
                         expected="a positive number")
    value = data[key]
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    ok = ok and (value > 0 or (allow_zero and value == 0))
    if not ok:
        raise InputError(path, f"invalid value {value!r}", field=key,
                         expected="a non-negative number" if allow_zero else "a positive number")
    return float(value)


def gpu_from_dict(data: Mapping, path="<dict>") -> GpuSpec:
    """Validate a datasheet mapping and build a GpuSpec; errors name `path` and field."""
    if not isinstance(data, Mapping):
        raise InputError(path, "datasheet is not a JSON object", expected="an object")
    name = data.get("name")
    if not isinstance(name, str) or not name.strip():
        raise InputError(path, "missing or empty GPU name", field="name", expected="a string")
    aliases = data.get("aliases", [])
    if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
        raise InputError(path, "aliases must be a list of strings", field="aliases",
                         expected="a list of strings")
    flops = data.get("peak_dense_flops_per_s")
    if not isinstance(flops, Mapping) or not flops:
        raise InputError(path, "missing peak FLOP/s table", field="peak_dense_flops_per_s",
                         expected=f"an object with keys among {', '.join(DTYPES)}")
    peak = {}
    for key in flops:
        dtype = normalize_dtype(key)
        if dtype not in DTYPES:
            raise InputError(path, f"unknown dtype '{key}'",
                             field=f"peak_dense_flops_per_s.{key}",
                             expected=f"one of {', '.join(DTYPES)}")
        value = _positive(path, flops, key, allow_none=True, allow_zero=True)
        peak[dtype] = value or 0.0
    if not any(v > 0 for v in peak.values()):
        raise InputError(path, "no dtype with a positive peak", field="peak_dense_flops_per_s",
                         expected="at least one positive FLOP/s figure")
    hbm = _positive(path, data, "hbm_bandwidth_bytes_per_s")
    mem = _positive(path, data, "memory_bytes")
    pcie = _positive(path, data, "pcie_bandwidth_bytes_per_s")
    nvlink = _positive(path, data, "nvlink_bandwidth_bytes_per_s", allow_none=True)
    mfu = {}
    for key in ("mfu_prefill", "mfu_decode"):
        value = _positive(path, data, key, required=False)
        if value is not None and value > 1:
            raise InputError(path, f"invalid value {value!r}", field=key,
                             expected="a fraction in (0, 1]")
        mfu[key] = value
    return GpuSpec(
        name=name.strip(), aliases=tuple(aliases), peak_flops_per_s=peak,
        hbm_bandwidth_bytes_per_s=hbm, memory_bytes=mem,
        nvlink_bandwidth_bytes_per_s=nvlink if nvlink is not None else pcie,
        has_nvlink=nvlink is not None, pcie_bandwidth_bytes_per_s=pcie,
        vendor=str(data.get("vendor", "")), architecture=str(data.get("architecture", "")),
        source=str(path), **mfu)


def read_gpu_datasheet(path) -> GpuSpec:
    """Read and validate one datasheet JSON file."""
    path = Path(path)
    data = load_json_checked(path, expected="a GPU datasheet JSON object (data_specs/gpu-datasheet.md)")
    return gpu_from_dict(data, path)


def _key(name: str) -> str:
    return "".join(ch for ch in str(name).lower() if ch.isalnum())


@lru_cache(maxsize=1)
def _catalog() -> tuple[dict[str, GpuSpec], dict[str, str]]:
    specs, index = {}, {}
    for path in sorted(CATALOG_DIR.glob("*.json")):
        spec = read_gpu_datasheet(path)
        specs[spec.name] = spec
        for alias in (spec.name, *spec.aliases):
            index[_key(alias)] = spec.name
    return specs, index


def list_gpus() -> list[str]:
    """Canonical names of the built-in GPU datasheets."""
    return sorted(_catalog()[0])


def load_gpu(name_or_path) -> GpuSpec:
    """A GpuSpec from a catalog name/alias (case-insensitive) or a datasheet JSON path.

    Raises UnknownHardwareError (listing known names) for an unknown name and
    InputError (naming file and field) for an invalid datasheet file.
    """
    if isinstance(name_or_path, GpuSpec):
        return name_or_path
    text = str(name_or_path)
    path = Path(text)
    if text.lower().endswith(".json") or path.is_file():
        return read_gpu_datasheet(path)
    specs, index = _catalog()
    canonical = index.get(_key(text))
    if canonical is None:
        known = ", ".join(f"{n} (aliases: {', '.join(specs[n].aliases)})" for n in sorted(specs))
        raise UnknownHardwareError(
            f"unknown GPU '{text}': not in the built-in catalog and not a datasheet file. "
            f"Known GPUs: {known}. Pass a path to a JSON datasheet "
            f"(data_specs/gpu-datasheet.md) for other hardware.")
    return specs[canonical]
