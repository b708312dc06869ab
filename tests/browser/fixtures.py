"""Browser fixtures shared by every browser test (tests/browser, tests/faults): one chromium per
session, an offline harness server and guarded pages. Registered for the whole suite by
``pytest_plugins`` in tests/conftest.py, because one process can hold only one Playwright sync
instance.

Every page fails its test on a request that leaves the loopback interface (the request is
aborted), on an uncaught page error, and on a console error.
"""

from __future__ import annotations

import http.server
import pathlib
import shutil
import tempfile
import threading
from collections.abc import Iterator
from typing import ClassVar

import pytest

from tests.browser.helpers import PanelPage, guarded_page
from torchlens_nb import widgets

ROOT = pathlib.Path(__file__).resolve().parents[2]
HARNESS = pathlib.Path(__file__).resolve().parent / "harness"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]


def missing_browser_reasons() -> list[str]:
    """Why browser tests cannot run here (empty when they can)."""
    reasons = []
    if not pathlib.Path(CHROMIUM).exists():
        reasons.append(f"{CHROMIUM} missing (apt-get install chromium)")
    if not (widgets.STATIC_DIR / "report.js").is_file():
        reasons.append("panel bundle not built (make bundle)")
    return reasons


class _Handler(http.server.SimpleHTTPRequestHandler):
    """Serves /harness/, /static/ (the bundles), /js/ (shared sources) and /out/ (temp files)."""

    extensions_map: ClassVar[dict[str, str]] = {
        **http.server.SimpleHTTPRequestHandler.extensions_map,
        ".js": "text/javascript",
        ".mjs": "text/javascript",
    }
    mounts: ClassVar[dict[str, pathlib.Path]] = {}

    def translate_path(self, path: str) -> str:
        clean = path.split("?", 1)[0].split("#", 1)[0]
        for prefix, folder in self.mounts.items():
            if clean.startswith(prefix):
                return str(folder / clean[len(prefix) :])
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
    handler = type(
        "Handler",
        (_Handler,),
        {
            "mounts": {
                "/harness/": HARNESS,
                "/static/": widgets.STATIC_DIR,
                "/js/": ROOT / "js",
                "/out/": out_dir,
            }
        },
    )
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
        )
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
