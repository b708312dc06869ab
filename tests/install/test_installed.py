"""The wheel installed alone into a fresh venv: it imports from there, finds its panels, and a
report displays as a widget and writes a standalone page."""

from __future__ import annotations

import pathlib
import re


def test_it_imports_from_the_venv_not_the_checkout(probe, installed_python) -> None:
    module = pathlib.Path(probe["facts"]["module_file"])
    venv = pathlib.Path(probe["facts"]["prefix"])
    assert venv == installed_python.parent.parent
    assert module.is_relative_to(venv) and "site-packages" in module.parts
    assert not (module.parent.parent / "js").exists()  # no panel sources beside it


def test_every_registered_panel_is_available(probe) -> None:
    facts = probe["facts"]
    assert facts["available_panels"] == facts["required_panels"]
    assert set(probe["panels"]) == set(facts["required_panels"])  # one real payload for each


def test_the_doctor_says_the_bundles_match_the_package(probe) -> None:
    row = probe["facts"]["panel_bundles"]
    assert row["status"] == "pass"
    assert (
        row["details"]
        == f"all panel bundles present, built for torchlens_nb {probe['facts']['version']}"
    )


def test_a_report_displays_as_a_widget(probe) -> None:
    assert probe["facts"]["mime_keys"] == [
        "application/vnd.jupyter.widget-view+json",
        "text/html",
        "text/plain",
    ]


def test_to_html_writes_a_standalone_page(probe) -> None:
    page = (probe["out"] / "report.html").read_text()
    assert "log_1" in page  # the origin op, from the report's own data
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page), "the page loads from a network"
    assert "<script" in page and "theme" in page
