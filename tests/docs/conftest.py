"""The built documentation site, shared by the tests that read it (one sphinx build per run)."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
BUNDLES = ROOT / "torchlens_nb" / "widgets" / "static"


@pytest.fixture(scope="session")
def site(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    pytest.importorskip("sphinx", reason="the docs need the dev extra (sphinx, myst-parser, furo)")
    if not (BUNDLES / "nonfinite.js").exists():
        pytest.skip("panel bundles missing (make bundle): the offline exports need them")
    out = tmp_path_factory.mktemp("site")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "sphinx",
            "-W",
            "--keep-going",
            "-q",
            "-b",
            "html",
            str(DOCS),
            str(out),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=900,
        check=False,
    )
    assert result.returncode == 0, f"sphinx-build -W failed:\n{result.stderr[-6000:]}"
    return out
