"""Sphinx configuration of the torchlens_nb documentation.

Build: ``make docs`` (``sphinx-build -W -b html docs docs/_build/html``); warnings are errors,
so an autodoc import error, a bad cross-reference or a malformed docstring fails the build
(``tests/docs/conftest.py`` runs the same build for the tests). Pages are Markdown (MyST); the API
reference is generated from the docstrings (Google style, read by napoleon). The offline panel
exports shown in the pages are written at build time by ``_ext/panel_exports.py``.
"""

from __future__ import annotations

import pathlib
import re
import sys

import torchlens_nb

sys.path.insert(0, str(pathlib.Path(__file__).parent / "_ext"))

project = "torchlens_nb"
author = "torchlens_nb contributors"
copyright = "torchlens_nb contributors"
release = version = torchlens_nb.__version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "panel_exports",
    "bench_figures",
]
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build"]
myst_enable_extensions = ["colon_fence"]
myst_heading_anchors = 3

autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_default_options = {"members": True, "show-inheritance": True}
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False

html_theme = "furo"
html_title = "torchlens_nb"
html_static_path = ["_static"]


# Docstrings write absolute values and magnitudes as |value| (plain-text maths, readable in
# help() and the editor). reStructuredText reads |value| as a substitution reference and fails
# ("Undefined substitution referenced"). Escape exactly that form, |text| with no space inside
# either bar and not part of a ||norm||, outside ``inline literals``; nothing else is changed.
_ABSOLUTE_VALUE = re.compile(r"(?<![|\\])\|(?=[^\s|])([^|`]*?[^\s|\\])\|(?!\|)")


def _escape_absolute_values(app, what, name, obj, options, lines: list[str]) -> None:
    for index, line in enumerate(lines):
        parts = line.split("``")
        parts[::2] = [_ABSOLUTE_VALUE.sub(r"\\|\1\\|", part) for part in parts[::2]]
        lines[index] = "``".join(parts)


# napoleon reads an attribute docstring's first line as "type: description" and renders the part
# before the first colon as "Type: ..." (``"""``flagged``: sink heads were found"""`` became
# Type ``flagged``, and the sentence lost its subject). Our attribute types come from the
# annotations, never from the docstring, so after napoleon (priority 500) put the line back.
_INLINE_TYPE = ":type: "


def _restore_attribute_first_line(app, what, name, obj, options, lines: list[str]) -> None:
    if what not in ("attribute", "data", "property"):
        return
    typed = [i for i, line in enumerate(lines) if line.startswith(_INLINE_TYPE)]
    if not typed:
        return
    head = lines[typed[0]][len(_INLINE_TYPE) :]
    body = [line for i, line in enumerate(lines) if i != typed[0]]
    while body and not body[-1].strip():
        body.pop()
    first = next((i for i, line in enumerate(body) if line.strip()), None)
    if first is None:
        body = [head]
    else:
        body[first] = f"{head}: {body[first]}"
    lines[:] = body


def setup(app) -> None:
    app.connect("autodoc-process-docstring", _escape_absolute_values)
    app.connect("autodoc-process-docstring", _restore_attribute_first_line, priority=600)
