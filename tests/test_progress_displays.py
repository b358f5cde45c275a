"""Progress bars follow `console.show_progress`: drawn on a terminal, never into a pipe,
under --quiet or in CI."""

import io
import os
import subprocess
import sys

import pytest

from bayesblis import console

CLI = [sys.executable, "-c", "import sys; from bayesblis.cli import main; sys.exit(main())"]


class _Tty(io.StringIO):
    def isatty(self):
        return True


@pytest.mark.parametrize("ci, quiet, shown", [("", False, True), ("true", False, False),
                                              ("", True, False)])
def test_progress_bar_drawn_only_for_a_person(monkeypatch, ci, quiet, shown):
    monkeypatch.setenv("CI", ci)
    stream = _Tty()
    monkeypatch.setattr(sys, "stderr", stream)
    bar = console.progress_bar(range(3), quiet=quiet, desc="work", unit="item", ncols=80)
    assert bar.disable is (not shown)
    list(bar)
    assert ("work" in stream.getvalue()) is shown


def test_progress_bar_off_into_a_pipe(monkeypatch):
    monkeypatch.setenv("CI", "")
    stream = io.StringIO()  # not a terminal, like a pipe or a log file
    monkeypatch.setattr(sys, "stderr", stream)
    list(console.progress_bar(range(3), desc="work"))
    assert stream.getvalue() == ""
    assert not console.progress_bar(range(3), shown=False).n  # a caller's decision holds


def _ingest_on_terminal(out):
    """`bayesblis ingest --sample` with stdout and stderr on a pseudo-terminal of 120
    columns (tqdm draws nothing on a terminal of width 0); its output."""
    import fcntl
    import pty
    import struct
    import termios

    main, child = pty.openpty()
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    proc = subprocess.Popen([*CLI, "ingest", "--sample", "--out", str(out)], stdout=child,
                            stderr=child, stdin=subprocess.DEVNULL, env=env)
    os.close(child)
    chunks = []
    while True:
        try:
            data = os.read(main, 65536)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(main)
    assert proc.wait(timeout=300) == 0
    return b"".join(chunks).decode(errors="replace")


def test_ingest_draws_its_bar_on_a_terminal_and_not_into_a_pipe(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    piped = subprocess.run([*CLI, "ingest", "--sample", "--out", str(tmp_path / "piped")],
                           capture_output=True, text=True, env=env, timeout=300)
    assert piped.returncode == 0, piped.stderr
    assert "ingest:" not in piped.stderr and "\r" not in piped.stderr, piped.stderr
    assert "source(s)" in piped.stdout
    shown = _ingest_on_terminal(tmp_path / "shown")
    assert "ingest:" in shown and "input" in shown, shown
