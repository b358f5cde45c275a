"""Sphinx configuration of the bayesblis documentation site.

Build: ``python3 -m pip install -e '.[docs]' && sphinx-build -W -b html docs OUT``.
The topic pages are MyST markdown (docs/*.md), the API reference comes from the
docstrings (autosummary over the package), and the five notebooks of notebooks/ are
copied into docs/generated/notebooks and executed at build on their small default data
(myst-nb). ``BAYESBLIS_DOCS_EXECUTE=off`` skips executing them (pages without outputs),
for a quick look at the text.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import bayesblis

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
NOTEBOOKS = ROOT / "notebooks"
GENERATED = DOCS / "generated"

project = "bayesblis"
author = "bayesblis developers"
copyright = "2026, bayesblis developers"
release = version = bayesblis.__version__

extensions = [
    "myst_nb",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx_copybutton",
]

exclude_patterns = ["_build", "**.ipynb_checkpoints", "generated/notebooks/README.md"]
templates_path = ["_templates"]
source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb"}

html_theme = "furo"
html_title = f"bayesblis {release}"

myst_enable_extensions = ["colon_fence", "dollarmath", "deflist"]
myst_heading_anchors = 4

# API reference: every module of the package, from its docstrings.
autosummary_generate = True
autosummary_imported_members = False
autodoc_default_options = {"members": True, "undoc-members": False, "show-inheritance": True}
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_preserve_defaults = True
# Docstrings are plain prose (no Google/NumPy sections, so no napoleon: it would read
# "text: more" on an attribute's first line as a type); single backticks name code.
default_role = "code"
nitpicky = False

# Notebooks: executed at build, in order, in one shared work folder (03-05 reuse the
# fit of 02), importing notebooks/nbsupport.py.
nb_execution_mode = os.environ.get("BAYESBLIS_DOCS_EXECUTE", "force")
nb_execution_timeout = 900
nb_execution_raise_on_error = True
nb_execution_show_tb = True
nb_merge_streams = True


def _copy_notebooks() -> None:
    """notebooks/*.ipynb -> docs/generated/notebooks (Sphinx reads sources only from docs/)."""
    target = GENERATED / "notebooks"
    target.mkdir(parents=True, exist_ok=True)
    for path in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")):
        dest = target / path.name
        if not dest.exists() or dest.read_bytes() != path.read_bytes():
            shutil.copyfile(path, dest)


_copy_notebooks()
os.environ.setdefault("BAYESBLIS_NOTEBOOK_WORK", tempfile.mkdtemp(prefix="bayesblis-docs-nb-"))
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (str(NOTEBOOKS), os.environ.get("PYTHONPATH", "")) if p)
os.environ.setdefault("MPLBACKEND", "Agg")


def _format_pages() -> None:
    """One page per data_specs/*.md (the file formats), included from the repository."""
    target = GENERATED / "formats"
    target.mkdir(parents=True, exist_ok=True)
    for path in sorted((ROOT / "data_specs").glob("*.md")):
        text = f"```{{include}} ../../../data_specs/{path.name}\n```\n"
        dest = target / path.name
        if not dest.exists() or dest.read_text() != text:
            dest.write_text(text)


_format_pages()
