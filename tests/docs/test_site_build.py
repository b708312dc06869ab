"""The documentation builds with warnings as errors, as ``make docs`` and CI build it.

One ``sphinx-build -W --keep-going -b html docs <tmp>`` in a subprocess (~10-20 s on 2 cores):
an autodoc import error, a malformed docstring, a bad cross-reference, a missing screenshot or
a page outside the toctree fails it, with every warning in the message. The build also writes
the offline panel exports (``docs/_ext/panel_exports.py``), which need the panel bundles.
"""

from __future__ import annotations

import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
CAPABILITY_PAGES = (
    "nan_forensics",
    "gradient_health",
    "training_checks",
    "attention_sinks",
    "autograd_graph",
    "compare_and_cost",
    "recipes",
    "panels",
)

pytestmark = pytest.mark.docs


def test_every_guide_and_capability_page_is_built(site: pathlib.Path) -> None:
    built = {path.stem for path in site.glob("*.html")}
    assert {
        "index",
        "getting_started",
        "coming_from",
        "benchmarks",
        "dev_panels",
        *CAPABILITY_PAGES,
    } <= built


def test_api_reference_documents_the_public_names(site: pathlib.Path) -> None:
    debug = (site / "api" / "debug.html").read_text(encoding="utf-8")
    for name in (
        "nonfinite_origin",
        "grad_health",
        "ChecksSession",
        "attention_sinks",
        "walk_grad_fn",
        "compare",
        "hot_path",
    ):
        assert f'id="torchlens_nb.debug.{name}"' in debug, name
    recipes = (site / "api" / "recipes.html").read_text(encoding="utf-8")
    assert 'id="torchlens_nb.recipes.overfit_one_batch"' in recipes
    report = (site / "api" / "report.html").read_text(encoding="utf-8")
    assert 'id="torchlens_nb.report.Report.to_html"' in report


def test_absolute_value_bars_in_docstrings_render_as_text(site: pathlib.Path) -> None:
    # OutlierDim.factor's docstring says "mean |value|" in prose, which reStructuredText reads
    # as a substitution; docs/conf.py escapes it, so the bars reach the page as text.
    report = (site / "api" / "report.html").read_text(encoding="utf-8")
    assert "mean |value|" in report


def test_offline_panel_exports_are_written_and_embedded(site: pathlib.Path) -> None:
    for name in ("nonfinite", "grad_health"):
        export = (site / "_static" / "exports" / f"{name}.html").read_text(encoding="utf-8")
        assert "<script" in export and "torchlens_nb" in export
        assert f'"report_type": "{name}"' in export or f'"report_type":"{name}"' in export
    panels = (site / "panels.html").read_text(encoding="utf-8")
    assert '<iframe src="_static/exports/nonfinite.html"' in panels


def test_screenshots_referenced_by_pages_are_copied(site: pathlib.Path) -> None:
    images = {path.name for path in (site / "_images").glob("*.png")}
    for page in CAPABILITY_PAGES:
        text = (DOCS / f"{page}.md").read_text(encoding="utf-8")
        for name in (
            part.split(")")[0].rsplit("/", 1)[-1]
            for part in text.split("](_static/screenshots/")[1:]
        ):
            assert name in images, (page, name)
