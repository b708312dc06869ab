"""Browser fixtures: one chromium per session, an offline harness server, guarded pages.

Every page fails its test on a request that leaves the loopback interface (the request is
aborted), on an uncaught page error, and on a console error. Fast tier: ``panel_page``.
End-to-end tier (``slow``): ``lab`` and ``lab_notebook`` (see lab.py).
"""

from __future__ import annotations

import http.server
import pathlib
import re
import shutil
import tempfile
import threading
from collections.abc import Iterator

import pytest

from tests.browser.helpers import PanelPage, guarded_page
from tests.browser.lab import Lab, LabNotebook, running_lab, shutdown_sessions
from torchlens_nb import widgets

ROOT = pathlib.Path(__file__).resolve().parents[2]
HARNESS = pathlib.Path(__file__).resolve().parent / "harness"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--disable-dev-shm-usage"]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reasons = []
    if not pathlib.Path(CHROMIUM).exists():
        reasons.append(f"{CHROMIUM} missing (apt-get install chromium)")
    if not (widgets.STATIC_DIR / "report.js").is_file():
        reasons.append("panel bundle not built (make bundle)")
    if reasons:
        skip = pytest.mark.skip(reason="; ".join(reasons))
        for item in items:
            if pathlib.Path(str(item.fspath)).parent == pathlib.Path(__file__).parent:
                item.add_marker(skip)


class _Handler(http.server.SimpleHTTPRequestHandler):
    """Serves /harness/, /static/ (the bundles), /js/ (shared sources) and /out/ (temp files)."""

    extensions_map = {**http.server.SimpleHTTPRequestHandler.extensions_map,
                      ".js": "text/javascript", ".mjs": "text/javascript"}
    mounts: dict[str, pathlib.Path] = {}

    def translate_path(self, path: str) -> str:
        clean = path.split("?", 1)[0].split("#", 1)[0]
        for prefix, folder in self.mounts.items():
            if clean.startswith(prefix):
                return str(folder / clean[len(prefix):])
        return str(HARNESS / "__missing__")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="session")
def out_dir() -> Iterator[pathlib.Path]:
    """A temp folder served at ``/out/`` (e.g. for ``report.to_html`` files)."""
    path = pathlib.Path(tempfile.mkdtemp(prefix="tln_browser_"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def base_url(out_dir: pathlib.Path) -> Iterator[str]:
    handler = type("Handler", (_Handler,), {"mounts": {
        "/harness/": HARNESS, "/static/": widgets.STATIC_DIR, "/js/": ROOT / "js",
        "/out/": out_dir}})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, headless=True,
                                              args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser):
    """A harness-sized page (see ``guarded_page``); actions time out after 5 s."""
    with guarded_page(browser, {"width": 960, "height": 720}) as pg:
        pg.set_default_timeout(5_000)  # the harness answers in milliseconds: fail fast
        yield pg


@pytest.fixture
def panel_page(page, base_url) -> PanelPage:
    """The harness page, ready to ``mount`` a panel (see helpers.PanelPage)."""
    return PanelPage(page, base_url)


@pytest.fixture(scope="session")
def lab() -> Iterator[Lab]:
    """A JupyterLab for the session (temp root); kernels can import ``tests``."""
    with running_lab(pathlib.Path(tempfile.mkdtemp(prefix="tln_lab_root_")),
                     extra_pythonpath=[ROOT]) as server:
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
