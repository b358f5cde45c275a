"""What long-running commands show in the terminal: progress displays on or off."""

from __future__ import annotations

import os
import sys


def show_progress(quiet: bool = False, stream=None) -> bool:
    """Progress displays (nutpie's NUTS table of draws, divergences, elapsed and remaining
    time; ADVI's iteration bar; tqdm bars) are drawn only for a person: not under
    ``--quiet``, not when the stream is not a terminal (a pipe, a log file) and not in CI
    (``CI`` set to anything but ``""``/``0``/``false``)."""
    if quiet or os.environ.get("CI", "").lower() not in ("", "0", "false"):
        return False
    stream = sys.stderr if stream is None else stream
    return bool(getattr(stream, "isatty", lambda: False)())


def progress_bar(iterable=None, *, quiet: bool = False, shown: bool | None = None, **kwargs):
    """A tqdm bar on stderr drawn only when `show_progress(quiet)` says so (or `shown`, a
    caller's own decision); `kwargs` go to tqdm (``desc``, ``unit``, ``total``, ...)."""
    from tqdm import tqdm

    if shown is None:
        shown = show_progress(quiet)
    return tqdm(iterable, disable=not shown, file=sys.stderr, **kwargs)
