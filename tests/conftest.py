"""Suite-wide: keep tests that share an expensive fixture on one pytest-xdist worker.

The suite runs on two workers (`-n 2 --dist loadgroup`, pyproject.toml). A session- or
module-scoped fixture is computed once per worker that needs it, so a real fit shared by
three modules would run twice if those modules were split. Tests are joined into one
xdist group when they use a common session- or module-scoped fixture defined under tests/
(transitively); tests that share none stay free to go to either worker.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

TESTS_DIR = Path(__file__).resolve().parent


def _shared_fixtures(item) -> list[tuple[str, str]]:
    """(name, defining file) of the session/module-scoped tests/ fixtures `item` uses."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return []
    shared = []
    for name in info.names_closure:
        for fdef in info.name2fixturedefs.get(name, ()):
            if fdef.scope not in ("session", "package", "module"):
                continue
            try:
                src = Path(inspect.getfile(fdef.func)).resolve()
            except (TypeError, OSError):
                continue
            if TESTS_DIR in src.parents:
                key = str(src) if fdef.scope != "module" else f"{src}::{item.path}"
                shared.append((name, key))
    return shared


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the xdist_group marks
def pytest_collection_modifyitems(config, items):
    """Union-find over tests and the shared fixtures they use; one xdist group per set."""
    parent: dict = {}

    def find(x):
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for item in items:
        node = find(("item", item.nodeid))
        for key in _shared_fixtures(item):
            fixture = find(("fixture",) + key)
            if fixture != node:
                parent[node] = fixture
                node = fixture
    for item in items:
        keys = _shared_fixtures(item)
        if keys:
            root = find(("item", item.nodeid))
            item.add_marker(pytest.mark.xdist_group(name=f"{root[1]}@{Path(root[2]).name}"))
