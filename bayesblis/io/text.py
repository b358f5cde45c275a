"""Checked reading of text inputs. Every reader opens its text, JSON, YAML and CSV files
through here, so unreadable or undecodable bytes, empty files and truncated or invalid
JSON/YAML become one-line `InputError` errors naming the file, the line (and byte offset for
undecodable bytes) and what was expected -- never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

from bayesblis.errors import EmptyInputError, InputError


def decode_utf8(data: bytes, path, *, expected: str, offset_bytes: int = 0, line: int = 1) -> str:
    """`data` decoded as UTF-8 (a leading BOM dropped); InputError naming the byte offset
    (`offset_bytes` = where `data` starts in the file, `line` = its line number)."""
    try:
        return data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        at_byte = offset_bytes + exc.start
        at_line = line + data.count(b"\n", 0, exc.start)
        raise InputError(path, f"undecodable byte 0x{data[exc.start]:02x} at byte offset {at_byte}: "
                               f"not UTF-8 text (a binary or differently encoded file?)",
                         record=f"line {at_line}", expected=f"{expected}, UTF-8 encoded") from None


def read_text_checked(path, *, expected: str = "a text file", allow_empty: bool = False) -> str:
    """The UTF-8 text of `path`; InputError if unreadable or undecodable, EmptyInputError
    if blank (unless `allow_empty`)."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise InputError(path, "file not found", expected=expected) from None
    except IsADirectoryError:
        raise InputError(path, "is a folder, not a file", expected=expected) from None
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}", expected=expected) from None
    text = decode_utf8(data, path, expected=expected)
    if not allow_empty and not text.strip():
        raise EmptyInputError(path, "empty file", expected=expected)
    return text


def parse_json_text(text: str, path, *, expected: str):
    """JSON value of `text`; InputError naming line and column (and 'truncated' when the
    text ends inside a value)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        # an unterminated string runs to the end of the text
        truncated = exc.pos >= len(text.rstrip()) or exc.msg.startswith("Unterminated string")
        message = ("truncated JSON: the file ends inside a value" if truncated
                   else f"not valid JSON: {exc.msg}")
        raise InputError(path, message, record=f"line {exc.lineno}, column {exc.colno}",
                         expected=expected) from None


def load_json_checked(path, *, expected: str = "a JSON document"):
    """The JSON value in `path` (decoding, emptiness and syntax checked)."""
    return parse_json_text(read_text_checked(path, expected=expected), path, expected=expected)


def parse_yaml_text(text: str, path, *, expected: str):
    """YAML value of `text`; a YAML syntax error becomes a one-line InputError with its line."""
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc)
        raise InputError(path, f"not valid YAML: {problem}",
                         record=None if mark is None else f"line {mark.line + 1}, column {mark.column + 1}",
                         expected=expected) from None


def load_yaml_checked(path, *, expected: str = "a YAML document"):
    """The YAML value in `path` (decoding, emptiness and syntax checked)."""
    return parse_yaml_text(read_text_checked(path, expected=expected), path, expected=expected)


def type_name(value) -> str:
    """'a string', 'a list', 'null', ... for error messages about wrong types."""
    if value is None:
        return "null"
    names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
             list: "a list", dict: "a mapping"}
    return names.get(type(value), f"a {type(value).__name__}")
