"""The analyst notebooks (notebooks/*.ipynb) run top to bottom without a cell error.

Each notebook is executed in a fresh kernel (nbclient + ipykernel) on the tiny synthetic
fleet, with smaller settings than its defaults (CI_PARAMETERS: fewer windows, draws and
simulated seconds) injected papermill-style: a cell tagged ``injected-parameters`` after
the cell tagged ``parameters``. BAYESBLIS_NOTEBOOK_DEFAULTS=1 runs them at their own
defaults instead. They share one work folder for the session (BAYESBLIS_NOTEBOOK_WORK), in
order, so 03 and 04 reuse the posterior 02 saved (the same injected settings name the same
file); each one regenerates what is missing, so any one also runs alone
(`pytest tests/test_notebooks.py -k 03`). With BAYESBLIS_NOTEBOOK_EXECUTED_DIR set, each
executed notebook is written there (CI's documentation build renders them, docs/conf.py).
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

import nbformat
import nbclient
import ipykernel  # noqa: F401  (the kernel the notebooks run in)
from jupyter_client.manager import AsyncKernelManager

NOTEBOOKS_DIR = Path(__file__).resolve().parents[1] / "notebooks"
NOTEBOOKS = sorted(NOTEBOOKS_DIR.glob("[0-9][0-9]_*.ipynb"))
CELL_TIMEOUT_S = 900
"""Per cell: generous, the shared CI machine can be slow to compile the model."""
CI_PARAMETERS = {"MAX_OBS_PER_CONFIG": 60, "DRAWS": 30, "SIM_DRAWS": 8, "DURATION_S": 10.0,
                 "CALIBRATION_WINDOWS": 100, "CALIBRATION_DRAWS": 100}
"""Test settings of the parameters the notebooks define (each notebook gets those it has).
DRAWS x CHAINS (2) stays >= 50: notebook 02's posterior-predictive plot shows 50 draws.
CALIBRATION_WINDOWS (notebook 05): 100 windows per calibration instead of every window of
the 10 s run (its calibration cell: 57 s instead of 75 s)."""


def with_test_parameters(nb):
    """`nb` with a cell setting CI_PARAMETERS inserted after its ``parameters`` cell
    (papermill's convention), unless BAYESBLIS_NOTEBOOK_DEFAULTS=1."""
    tagged = [i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1, "a notebook needs exactly one cell tagged 'parameters'"
    if os.environ.get("BAYESBLIS_NOTEBOOK_DEFAULTS") == "1":
        return nb
    defined = set(re.findall(r"^([A-Z_][A-Z0-9_]*)\s*=", nb.cells[tagged[0]].source, re.M))
    lines = [f"{name} = {value!r}" for name, value in CI_PARAMETERS.items() if name in defined]
    if lines:
        cell = nbformat.v4.new_code_cell("\n".join(["# test settings (tests/test_notebooks.py)",
                                                    *lines]))
        cell.metadata["tags"] = ["injected-parameters"]
        nb.cells.insert(tagged[0] + 1, cell)
    return nb


def test_every_planned_notebook_exists():
    names = [p.name[:2] for p in NOTEBOOKS]
    assert names == ["01", "02", "03", "04", "05"], names


def test_notebooks_are_stored_without_outputs():
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        for cell in nb.cells:
            if cell.cell_type == "code":
                assert not cell.get("outputs") and cell.get("execution_count") is None, \
                    f"{path.name}: clear the outputs before committing"


@pytest.fixture(scope="module")
def work_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("notebooks-work")
    old = os.environ.get("BAYESBLIS_NOTEBOOK_WORK")
    os.environ["BAYESBLIS_NOTEBOOK_WORK"] = str(folder)
    yield folder
    if old is None:
        os.environ.pop("BAYESBLIS_NOTEBOOK_WORK", None)
    else:
        os.environ["BAYESBLIS_NOTEBOOK_WORK"] = old


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_top_to_bottom(path, work_dir):
    nb = with_test_parameters(nbformat.read(path, as_version=4))
    # Unix sockets, not TCP ports: a kernel picking a free port can race another process
    # of the parallel suite (a dask cluster, another kernel) for it ("Address already in use").
    km = AsyncKernelManager(kernel_name="python3", transport="ipc",
                            ip=str(work_dir / f"kernel-{path.stem[:2]}"))
    client = nbclient.NotebookClient(
        nb, km=km, timeout=CELL_TIMEOUT_S, kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOKS_DIR)}})  # cwd: imports nbsupport
    started = time.perf_counter()
    try:
        client.execute()
    except nbclient.exceptions.CellExecutionError as exc:
        pytest.fail(f"{path.name}: a cell failed\n{exc}", pytrace=False)
    print(f"{path.name}: {time.perf_counter() - started:.0f} s")
    executed = os.environ.get("BAYESBLIS_NOTEBOOK_EXECUTED_DIR")
    if executed:  # the documentation build renders these instead of running them again
        Path(executed).mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, Path(executed) / path.name)
