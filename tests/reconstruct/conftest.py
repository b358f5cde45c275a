"""Fixtures of the reconstruction tests (tests/reconstruct is on sys.path for helpers)."""

from __future__ import annotations

import pytest

from recon_helpers import SAMPLE


@pytest.fixture(scope="session")
def sample_trace():
    from bayesblis.io.otel import read_otel

    return read_otel(SAMPLE / "traces.json")


@pytest.fixture(scope="session")
def deployment():
    from bayesblis.features.physics import Deployment

    return Deployment("llama-2-7b", "H100-SXM", tp=1)


@pytest.fixture(scope="session")
def sample_batches(sample_trace):
    from bayesblis.reconstruct import journey_batches

    return journey_batches(sample_trace, 64, snapshots="check")
