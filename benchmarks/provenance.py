"""What every benchmark result records about the code it ran (the git commit), and where the
benchmarks read the shared data."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def git_commit() -> str | None:
    """HEAD of the repository the benchmarks live in; None outside a git checkout."""
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def shared_data_dir() -> Path:
    """The shared data folder: $BAYESBLIS_DATA, else ../shared/data beside the repository."""
    return Path(os.environ.get("BAYESBLIS_DATA", REPO.parent / "shared" / "data"))
