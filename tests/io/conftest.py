"""Fixtures for the input-layer tests: the shared real data (skipped if absent), the
bundled samples, and the OTEL/KV line builders of tests/fixtures/make_samples.py."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SHARED_DATA = REPO.parent / "shared" / "data"
REAL_IP = SHARED_DATA / "real" / "h100-inference-perf"
SAMPLES = REPO / "bayesblis" / "data" / "samples"
sys.path.insert(0, str(REPO / "tests" / "fixtures"))


@pytest.fixture(scope="session")
def real_ip_dir() -> Path:
    if not REAL_IP.is_dir():
        pytest.skip(f"shared real data not found at {REAL_IP}")
    return REAL_IP


@pytest.fixture(scope="session")
def real_experiments(real_ip_dir) -> list[Path]:
    return sorted(p for p in real_ip_dir.iterdir() if p.is_dir())


@pytest.fixture(scope="session")
def samples() -> Path:
    assert SAMPLES.is_dir(), "bundled samples missing: run tests/fixtures/make_samples.py"
    return SAMPLES


@pytest.fixture(scope="session")
def builders():
    import make_samples

    return make_samples
