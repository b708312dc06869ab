"""End-to-end fixtures (``lab``, ``lab_notebook``; see lab.py) and the skip rule of the browser
tier. The fast-tier fixtures (``browser``, ``page``, ``panel_page``, ``base_url``, ``out_dir``)
live in tests/browser/fixtures.py, shared with tests/faults.
"""

from __future__ import annotations

import pathlib
import re
import tempfile
from collections.abc import Iterator

import pytest

from tests.browser.fixtures import ROOT, missing_browser_reasons
from tests.browser.helpers import guarded_page
from tests.browser.lab import Lab, LabNotebook, running_lab, shutdown_sessions


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reasons = missing_browser_reasons()
    if reasons:
        skip = pytest.mark.skip(reason="; ".join(reasons))
        for item in items:
            if pathlib.Path(str(item.fspath)).parent == pathlib.Path(__file__).parent:
                item.add_marker(skip)


@pytest.fixture(scope="session")
def lab() -> Iterator[Lab]:
    """A JupyterLab for the session (temp root); kernels can import ``tests``."""
    with running_lab(
        pathlib.Path(tempfile.mkdtemp(prefix="tln_lab_root_")), extra_pythonpath=[ROOT]
    ) as server:
        yield server


@pytest.fixture
def lab_notebook(browser, lab, request):
    """``lab_notebook(cells, name=None)`` -> an open ``LabNotebook`` with an idle kernel.

    The notebook is named after the test unless ``name`` is given; its kernel is shut down
    when the test ends.
    """
    opened: list[str] = []

    def open_notebook(cells, name=None):
        name = name or f"{re.sub(r'[^A-Za-z0-9_]+', '_', request.node.name)}.ipynb"
        opened.append(name)
        return LabNotebook(pg, lab, name, cells)

    with guarded_page(browser, {"width": 1280, "height": 1000}) as pg:
        pg.set_default_timeout(30_000)
        try:
            yield open_notebook
        finally:
            for name in opened:
                shutdown_sessions(lab, name)
