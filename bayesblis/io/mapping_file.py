"""Read a YAML (or JSON) file that must hold a mapping, with errors naming the file."""

from __future__ import annotations

from pathlib import Path

from bayesblis.errors import InputError


def read_mapping(path, expected: str) -> dict:
    """The mapping in `path`; InputError (naming the file and `expected`) otherwise."""
    import yaml

    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise InputError(path, f"not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise InputError(path, "not a mapping", expected=expected)
    return data
