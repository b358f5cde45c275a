"""Named exceptions for errors a user can act on, rooted in BayesBlisError."""

from __future__ import annotations


class BayesBlisError(Exception):
    """Base of every error bayesblis raises on purpose."""


class InputError(BayesBlisError, ValueError):
    """A file's content is not what was expected.

    The message names the file, the record (line, request id or row) and the field,
    and says what was expected.
    """

    def __init__(self, path, message: str, *, record=None, field: str | None = None,
                 expected: str | None = None):
        self.path = str(path) if path is not None else None
        self.message = _one_line(message)
        self.record = record
        self.field = field
        self.expected = None if expected is None else _one_line(expected)
        message, expected = self.message, self.expected
        parts = [self.path or "<input>"]
        if record is not None:
            parts.append(f"record {record}")
        if field is not None:
            parts.append(f"field '{field}'")
        text = ": ".join([", ".join(parts), message])
        if expected is not None:
            text += f" (expected {expected})"
        super().__init__(text)

    def at(self, path, *, field_prefix: str = "") -> "InputError":
        """The same error attributed to `path` (for checks that ran before the file was known)."""
        field = None if self.field is None else field_prefix + self.field
        return type(self)(path, self.message, record=self.record, field=field, expected=self.expected)

    def __reduce__(self):  # pickle by fields: errors raised on Dask workers reach the CLI intact
        return _rebuild_input_error, (type(self), self.path, self.message, self.record, self.field,
                                      self.expected)


def _rebuild_input_error(cls, path, message, record, field, expected):
    return cls(path, message, record=record, field=field, expected=expected)


def _one_line(text) -> str:
    """Collapse newlines (YAML and CSV parser messages have them): errors print as one line."""
    return " ".join(str(text).split())


class InputWarning(UserWarning):
    """Input that is read but will need attention later (e.g. a model not in the catalog);
    the CLI prints it as one `warning:` line."""


class EmptyInputError(InputError):
    """A file or folder holds no records."""


class UnknownHardwareError(BayesBlisError, KeyError):
    """A GPU name is not in the catalog and no datasheet file was given."""

    def __str__(self):  # KeyError quotes its message; keep it readable
        return str(self.args[0]) if self.args else "unknown hardware"


class UnknownArchitectureError(BayesBlisError, KeyError):
    """A model config.json names an architecture bayesblis cannot derive physics for."""

    def __str__(self):
        return str(self.args[0]) if self.args else "unknown architecture"


class ModelVersionError(BayesBlisError):
    """A saved posterior was written by another model version."""


class UnseenLevelError(BayesBlisError):
    """A configuration has levels (GPU, model family, ...) the posterior never saw,
    and the caller did not allow population-level predictions."""


class FitNotDoneError(BayesBlisError):
    """A method needs a fitted model; call fit() or load() first."""
