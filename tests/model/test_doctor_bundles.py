"""The doctor's panel_bundles row: whether reports can show their panels here."""

from __future__ import annotations

import json
import pathlib
import shutil

import pytest

import torchlens_nb as tl
from torchlens_nb import widgets
from torchlens_nb.widgets import _registry


@pytest.fixture
def static(tmp_path, monkeypatch) -> pathlib.Path:
    """A copy of the built bundle folder that the registry reads instead."""
    copy = tmp_path / "static"
    shutil.copytree(widgets.STATIC_DIR, copy)
    monkeypatch.setattr(_registry, "STATIC_DIR", copy)
    return copy


def test_the_built_bundles_pass() -> None:
    row = tl.report.doctor().check("panel_bundles")
    assert (row.status, row.severity) == ("pass", "ok")
    assert row.details == f"all panel bundles present, built for torchlens_nb {tl.__version__}"


def test_a_missing_bundle_is_named_with_the_fix(static) -> None:
    (static / "grad_fn.js").unlink()
    report = tl.report.doctor()
    row = report.check("panel_bundles")
    assert (row.status, row.severity) == ("known_broken", "warning")
    assert row.details == "reports fall back to their text card; missing: grad_fn.js"
    assert "make bundle" in row.suggestion
    assert "doctor_panel_bundles" in {f.code for f in report.findings}


def test_bundles_built_for_another_version_are_flagged(static) -> None:
    manifest = json.loads((static / "_manifest.json").read_text())
    (static / "_manifest.json").write_text(json.dumps({**manifest, "version": "0.0.1"}))
    row = tl.report.doctor().check("panel_bundles")
    assert row.status == "known_broken"
    assert row.details == (
        "reports fall back to their text card; built for torchlens_nb 0.0.1, "
        f"the package is {tl.__version__}"
    )
