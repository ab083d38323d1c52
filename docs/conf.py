"""Sphinx configuration of gpuscale's documentation.

Build: ``sphinx-build -W --keep-going -b html docs docs/_build/html`` (``pip install ".[docs]"``);
``tests/test_docs.py`` builds it the same way.

The notebooks live in the repository's ``notebooks/``; the build copies them into ``docs/notebooks/``
(git-ignored) and renders them as they are committed, without executing them.
"""

from __future__ import annotations

import pathlib
import shutil
import sys

DOCS = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS / "_ext"))


def _copy_notebooks() -> None:
    """``notebooks/*.ipynb`` into ``docs/notebooks/``: a copy only where the notebook changed, so
    an unchanged notebook is not read again."""
    out = DOCS / "notebooks"
    out.mkdir(exist_ok=True)
    sources = sorted((DOCS.parent / "notebooks").glob("*.ipynb"))
    for nb in sources:
        copy = out / nb.name
        if not copy.is_file() or copy.read_bytes() != nb.read_bytes():
            shutil.copyfile(nb, copy)
    for stale in set(out.glob("*.ipynb")) - {out / nb.name for nb in sources}:
        stale.unlink()


_copy_notebooks()

import gpuscale  # noqa: E402

project = "gpuscale"
author = "gpuscale contributors"
copyright = "gpuscale contributors"
release = gpuscale.__version__
version = release

extensions = [
    "myst_nb",  # Markdown pages (MyST, myst-parser's features) and the notebooks
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
    "sphinx_click",
    "gpuscale_docs",
    "gpuscale_bench",
]

source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb"}
root_doc = "index"
exclude_patterns = ["_build", "bench-*", "Thumbs.db", ".DS_Store"]

# Markdown: heading anchors for `page.md#a-heading` links; a link that resolves nowhere is a
# warning, and the build treats warnings as errors (-W), so broken internal links fail it.
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 4
suppress_warnings = []

# Notebooks: rendered as committed (without outputs), never executed at build time.
nb_execution_mode = "off"

# Python API: the docstrings are prose with Sphinx roles and, here and there, numpydoc sections.
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options: dict[str, bool] = {}
napoleon_google_docstring = False
napoleon_numpy_docstring = True

html_theme = "pydata_sphinx_theme"
html_title = "gpuscale"
html_static_path: list[str] = []
html_theme_options = {
    "navigation_depth": 3,
    "show_toc_level": 2,
    "navbar_align": "left",
    "secondary_sidebar_items": ["page-toc"],
    "footer_start": ["copyright"],
    "footer_end": [],
}
html_sidebars = {"**": ["sidebar-nav-bs"]}

# The CLI's help texts are plain text written for a terminal: `code` in single backticks and a
# glob like *.tls.pem. Read as reStructuredText, single backticks are code and a lone * is text.
default_role = "literal"


def _plain_help(app, ctx, lines):
    for i, line in enumerate(lines):
        if not line.lstrip().startswith(".. "):
            lines[i] = line.replace("*", r"\*")


def setup(app):
    for event in ("description", "options", "arguments", "epilog"):
        app.connect(f"sphinx-click-process-{event}", _plain_help)
