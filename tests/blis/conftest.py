"""BLIS end-to-end tests (`blis` marker): they build BLIS from ../shared/blis/src with Go
(about 50 s from a cold Go build cache) and run it, so they stay out of the default run
and have a CI step of their own: `python3 -m pytest tests/blis -m blis -n 0`.
Tests here without the marker (no Go, no BLIS) run in the default suite."""

from __future__ import annotations

import pytest


def pytest_configure(config):
    config.addinivalue_line("markers", "blis: builds and runs BLIS (opt-in: pytest -m blis)")


def pytest_collection_modifyitems(config, items):
    if "blis" in (config.getoption("markexpr") or ""):
        return
    skip = pytest.mark.skip(reason="builds and runs BLIS (~1-2 min): its own CI step, "
                                   "python3 -m pytest tests/blis -m blis -n 0")
    for item in items:
        if item.get_closest_marker("blis") is not None:
            item.add_marker(skip)
