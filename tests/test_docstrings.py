"""Every docstring of the package parses as reStructuredText without a warning, as the
documentation site's API reference needs (`sphinx-build -W` in .ci/run): a `|word|` is a
substitution, a `*` or `**` opens emphasis, a backtick must close."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import docutils.core
import docutils.utils
import pytest

import bayesblis


def _modules():
    yield bayesblis
    for info in pkgutil.walk_packages(bayesblis.__path__, "bayesblis."):
        if info.name.rsplit(".", 1)[-1].startswith("_"):
            continue
        yield importlib.import_module(info.name)


def _docstrings(module):
    yield module.__name__, module.__doc__
    for name, obj in vars(module).items():
        if name.startswith("_") or getattr(obj, "__module__", None) != module.__name__:
            continue
        if inspect.isclass(obj) or inspect.isfunction(obj):
            yield f"{module.__name__}.{name}", obj.__doc__
        if inspect.isclass(obj):
            for attr, member in vars(obj).items():
                if not attr.startswith("_") and inspect.isfunction(member):
                    yield f"{module.__name__}.{name}.{attr}", member.__doc__


def _problems(text: str) -> list[str]:
    messages: list[str] = []

    class Collect:
        def write(self, line):
            messages.append(line.strip())

    docutils.core.publish_doctree(
        inspect.cleandoc(text),
        settings_overrides={"report_level": docutils.utils.Reporter.WARNING_LEVEL,
                            "halt_level": docutils.utils.Reporter.SEVERE_LEVEL + 1,
                            "warning_stream": Collect(), "default_role": "code"})
    return [m for m in messages if m]


def test_every_docstring_is_valid_restructuredtext():
    bad = {}
    for module in _modules():
        for name, doc in _docstrings(module):
            if doc:
                problems = _problems(doc)
                if problems:
                    bad[name] = problems
    assert not bad, "docstrings that break the API reference:\n" + "\n".join(
        f"{name}: {problems}" for name, problems in bad.items())
