"""Progress display of `bayesblis fit`: drawn for a person at a terminal, off under
--quiet, in CI and when the output is not a terminal."""

import io
import os
import pty
import selectors
import subprocess
import sys
import time

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


def _start_fit_in_a_terminal(dataset, out, *extra):
    """Start `bayesblis fit` with stdout and stderr on a pseudo-terminal: (process, the
    terminal's reading end)."""
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    main, child = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; from bayesblis.cli import main; sys.exit(main())", "fit", str(dataset), "--out", str(out),
         "--hardware", "H100", "--draws", "40", "--tune", "40", "--chains", "1",
         "--max-obs-per-config", "30", "--nuts-backend", "jax", "--laplace", "off", *extra],
        stdout=child, stderr=child, stdin=subprocess.DEVNULL, env=env)
    os.close(child)
    return proc, main


def _fits_in_terminals(*runs):
    """Run the `bayesblis fit`s of `runs` ((dataset, out, *extra) each) side by side, each
    on its own pseudo-terminal (independent processes: their compiling overlaps); return
    their outputs in order."""
    started = [_start_fit_in_a_terminal(*run) for run in runs]
    chunks = {fd: [] for _, fd in started}
    deadline = time.monotonic() + 600
    with selectors.DefaultSelector() as sel:
        for _, fd in started:
            sel.register(fd, selectors.EVENT_READ)
        while sel.get_map():
            ready = sel.select(timeout=max(0.0, deadline - time.monotonic()))
            assert ready or time.monotonic() < deadline, "the fits did not finish in 600 s"
            for key, _ in ready:
                try:
                    data = os.read(key.fd, 65536)
                except OSError:  # the child closed the terminal
                    data = b""
                if data:
                    chunks[key.fd].append(data)
                else:
                    sel.unregister(key.fd)
                    os.close(key.fd)
    outputs = []
    for proc, fd in started:
        text = b"".join(chunks[fd]).decode(errors="replace")
        assert proc.wait(timeout=600) == 0, text
        outputs.append(text)
    return outputs


def test_fit_draws_nutpie_progress_in_a_terminal_and_not_with_quiet(tmp_path):
    from click.testing import CliRunner

    from bayesblis.cli import cli

    r = CliRunner().invoke(cli, ["ingest", "--sample", "--quiet", "--out", str(tmp_path / "ds")])
    assert r.exit_code == 0, r.output
    shown, quiet = _fits_in_terminals((tmp_path / "ds", tmp_path / "a.nc"),
                                      (tmp_path / "ds", tmp_path / "b.nc", "--quiet"))
    # nutpie's terminal table: draws done, divergences so far, elapsed and remaining time
    for column in ("Draws", "Divergences", "Elapsed", "Remaining"):
        assert column in shown, shown
    assert "diagnostics (nuts" in shown
    assert "Divergences" not in quiet and "diagnostics (nuts" in quiet
    for noise in ("Traceback", "ERROR", "BLAS", "ArviZ is undergoing", "Sampling: ["):
        assert noise not in shown + quiet, noise
