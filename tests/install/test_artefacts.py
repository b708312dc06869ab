"""What `python -m build` made from a checkout with no bundles: an sdist and a wheel from it.

The wheel must carry every panel the registry needs (users install it, there is no js/ folder
beside it), and nothing of the repository's tests, benchmarks or notebooks; the sdist carries
what rebuilding needs. The metadata is what a registry page shows.
"""

from __future__ import annotations

import email.parser
import pathlib
import subprocess
import tarfile
import zipfile

import torchlens_nb
from torchlens_nb import widgets


def _only(folder: pathlib.Path, pattern: str) -> pathlib.Path:
    found = sorted(folder.glob(pattern))
    assert len(found) == 1, f"expected one {pattern} in {folder}, found {found}"
    return found[0]


def test_the_wheel_carries_every_registered_panel_bundle_and_the_theme(dist_dir) -> None:
    names = set(zipfile.ZipFile(_only(dist_dir, "*.whl")).namelist())
    static = "torchlens_nb/widgets/static/"
    needed = {f"{static}{panel}.js" for panel in widgets.required_panels()}
    needed |= {f"{static}theme.css", f"{static}_offline.js", f"{static}_manifest.json"}
    assert needed <= names, f"missing from the wheel: {sorted(needed - names)}"


def test_the_wheel_holds_the_package_only(dist_dir) -> None:
    names = zipfile.ZipFile(_only(dist_dir, "*.whl")).namelist()
    tops = {name.split("/", 1)[0] for name in names}
    assert tops == {"torchlens_nb", f"torchlens_nb-{torchlens_nb.__version__}.dist-info"}


def test_the_wheel_metadata_is_what_a_registry_page_needs(dist_dir) -> None:
    wheel = zipfile.ZipFile(_only(dist_dir, "*.whl"))
    meta_name = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
    meta = email.parser.Parser().parsestr(wheel.read(meta_name).decode())
    assert meta["Version"] == torchlens_nb.__version__
    assert meta["License-Expression"] == "MIT"
    assert meta["Description-Content-Type"] == "text/markdown"
    assert meta.get_payload().lstrip().startswith("# torchlens_nb")
    requires = {r.split(";")[0].split(">=")[0].strip() for r in meta.get_all("Requires-Dist")}
    assert {"torch", "anywidget", "ipywidgets", "pandas", "plotly", "graphviz"} <= requires
    classifiers = meta.get_all("Classifier")
    assert "Framework :: Jupyter :: JupyterLab" in classifiers
    assert any(c.startswith("Programming Language :: Python :: 3.") for c in classifiers)
    urls = {u.split(",")[0] for u in meta.get_all("Project-URL")}
    assert {"Source", "Documentation", "Issues"} <= urls
    assert set(meta.get_all("Provides-Extra")) >= {"dev", "transformers", "lightning"}


def test_the_sdist_carries_what_rebuilding_needs(dist_dir) -> None:
    sdist = _only(dist_dir, "*.tar.gz")
    with tarfile.open(sdist) as tar:
        names = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}
    root = pathlib.Path(__file__).resolve().parents[2]
    tracked = subprocess.run(
        ["git", "ls-files", "js"], cwd=root, check=True, capture_output=True, text=True
    )
    sources = set(tracked.stdout.split())
    assert "js/build.mjs" in sources
    assert sources <= names, f"js sources missing from the sdist: {sorted(sources - names)[:5]}"
    assert {
        "pyproject.toml",
        "README.md",
        "LICENSE",
        "torchlens_nb/widgets/static/report.js",
    } <= names
    assert not any(
        n.startswith(("tests/", "benchmarks/", "notebooks/", "js/node_modules/")) for n in names
    )
