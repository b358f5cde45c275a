"""Progress display of `bayesblis fit`: drawn for a person at a terminal, off under
--quiet, in CI and when the output is not a terminal."""

import io

import pytest

from bayesblis.console import show_progress


class _Tty(io.StringIO):
    def isatty(self):
        return True


@pytest.mark.parametrize("quiet, ci, tty, shown", [
    (False, "", True, True),
    (True, "", True, False),
    (False, "true", True, False),
    (False, "1", True, False),
    (False, "false", True, True),
    (False, "", False, False),
])
def test_progress_is_shown_only_to_a_person_at_a_terminal(monkeypatch, quiet, ci, tty, shown):
    monkeypatch.setenv("CI", ci)
    stream = _Tty() if tty else io.StringIO()
    assert show_progress(quiet, stream=stream) is shown


def test_fit_draws_nutpie_progress_in_a_terminal_and_not_with_quiet(cli_fits):
    """`bayesblis fit` on a pseudo-terminal, as a person runs it and with --quiet (the
    `cli_fits` fixture: tests/model/conftest.py; test_cli_fit.py checks their files)."""
    shown, quiet = cli_fits["shown"][0], cli_fits["quiet"][0]
    # nutpie's terminal table: draws done, divergences so far, elapsed and remaining time
    for column in ("Draws", "Divergences", "Elapsed", "Remaining"):
        assert column in shown, shown
    assert "diagnostics (nuts" in shown
    assert "Divergences" not in quiet and "diagnostics (nuts" in quiet
    for noise in ("Traceback", "ERROR", "BLAS", "ArviZ is undergoing", "Sampling: ["):
        assert noise not in shown + quiet, noise
