"""Read a YAML (or JSON) file that must hold a mapping, with errors naming the file."""

from __future__ import annotations

from pathlib import Path

from bayesblis.errors import InputError
from bayesblis.io.text import load_yaml_checked, type_name


def read_mapping(path, expected: str) -> dict:
    """The mapping in `path`; InputError (naming the file and `expected`) otherwise
    (undecodable, empty, invalid YAML or not a mapping)."""
    path = Path(path)
    data = load_yaml_checked(path, expected=expected)
    if not isinstance(data, dict):
        raise InputError(path, f"not a mapping but {type_name(data)}", expected=expected)
    return data
