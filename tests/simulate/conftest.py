"""Fixtures of the simulator tests."""

from __future__ import annotations

import pytest

@pytest.fixture(scope="session")
def deployment():
    from bayesblis.features.physics import Deployment

    return Deployment("llama-2-7b", "H100-SXM", tp=1)


@pytest.fixture(scope="session")
def constants(deployment):
    from bayesblis.simulate.engine import deployment_constants

    return deployment_constants(deployment)


@pytest.fixture(scope="session")
def beta_names():
    from bayesblis.features.beta import BETA_FEATURES

    return BETA_FEATURES
