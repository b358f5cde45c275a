"""Sphinx configuration of the bayesblis documentation site.

Build: ``python3 -m pip install -e '.[docs]' && sphinx-build -W -b html docs OUT``.
The topic pages are MyST markdown (docs/*.md), the API reference comes from the
docstrings (autosummary over the package), and the five notebooks of notebooks/ are
copied into docs/generated/notebooks and executed at build on their small default data
(myst-nb), or taken already executed from ``BAYESBLIS_DOCS_NOTEBOOKS`` (CI: the copies its
test run wrote). ``BAYESBLIS_DOCS_EXECUTE=off`` skips executing them (pages without
outputs), for a quick look at the text.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(ROOT))  # document the source tree being built, not another install

import bayesblis  # noqa: E402

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

exclude_patterns = ["_build", "**.ipynb_checkpoints", "generated/more-pages.md"]
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
# fit of 02), importing notebooks/nbsupport.py. Where BAYESBLIS_DOCS_NOTEBOOKS names a folder
# of notebooks already executed (tests/test_notebooks.py writes them there when
# BAYESBLIS_NOTEBOOK_EXECUTED_DIR is set, as .ci/run does), those are rendered as they are.
nb_execution_mode = os.environ.get("BAYESBLIS_DOCS_EXECUTE", "force")
nb_execution_timeout = 900
nb_execution_raise_on_error = True
nb_execution_show_tb = True
nb_merge_streams = True
nb_execution_excludepatterns: list[str] = []
EXECUTED = os.environ.get("BAYESBLIS_DOCS_NOTEBOOKS")


def _copy_notebooks() -> None:
    """notebooks/*.ipynb -> docs/generated/notebooks (Sphinx reads sources only from docs/);
    an executed copy from BAYESBLIS_DOCS_NOTEBOOKS where there is one (not run again)."""
    target = GENERATED / "notebooks"
    target.mkdir(parents=True, exist_ok=True)
    for path in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")):
        source = path
        if EXECUTED and (Path(EXECUTED) / path.name).is_file():
            source = Path(EXECUTED) / path.name
            nb_execution_excludepatterns.append(f"generated/notebooks/{path.name}")
        dest = target / path.name
        if not dest.exists() or dest.read_bytes() != source.read_bytes():
            shutil.copyfile(source, dest)


_copy_notebooks()
_WORK = tempfile.TemporaryDirectory(prefix="bayesblis-docs-nb-")  # removed when the build ends
os.environ.setdefault("BAYESBLIS_NOTEBOOK_WORK", _WORK.name)
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (str(NOTEBOOKS), os.environ.get("PYTHONPATH", "")) if p)


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


INDEXED = {"index", "usage", "model", "accuracy", "calibration", "operator-profiles",
           "large-traces", "sampler", "limits", "history", "notebooks", "formats",
           "architecture", "api"}
"""The pages index.md lists itself."""


def _more_pages() -> None:
    """Any other page under docs/ (docs/blis.md, ...) in a toctree index.md includes, so a
    new page needs no edit of the index to be built and found."""
    pages = (p.relative_to(DOCS).with_suffix("").as_posix() for p in DOCS.rglob("*.md"))
    extra = sorted(p for p in pages
                   if p not in INDEXED and not p.startswith(("generated/", "_build/")))
    text = ("```{toctree}\n:caption: More\n:maxdepth: 1\n\n" + "\n".join(extra) + "\n```\n"
            if extra else "")
    dest = GENERATED / "more-pages.md"
    if not dest.exists() or dest.read_text() != text:
        dest.write_text(text)


_more_pages()


def setup(app):
    """JSON examples in data_specs/ elide with `...`, which the strict JSON lexer rejects:
    highlight `json` blocks with the JavaScript lexer (the same tokens, elisions allowed)."""
    from pygments.lexers import JavascriptLexer

    app.add_lexer("json", JavascriptLexer)
