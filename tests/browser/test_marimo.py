"""End-to-end tier: panels in a real marimo app (``marimo run`` on 127.0.0.1), offline.

marimo shows a report's panel (its widget view becomes a ``<marimo-anywidget>``) inside a
shadow root. The panel follows marimo's theme, not the OS setting: each app runs with the
OS preference set to the opposite theme. An exit button's round trip runs in marimo's kernel.
Screenshots: tests/artifacts/marimo_light.png, tests/artifacts/marimo_dark.png.
"""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.browser.fixtures import ROOT
from tests.browser.helpers import ARTIFACTS, guarded_page
from tests.browser.marimo_app import running_marimo

pytestmark = pytest.mark.slow

CELLS = [
    "import torchlens_nb as tl\n"
    "from tests.browser.reports import traced_ops_report\n"
    "report, model = traced_ops_report()\n"
    "report",
]
BACKGROUND = {"light": "rgb(255, 255, 255)", "dark": "rgb(13, 17, 23)"}


@pytest.mark.parametrize(("theme", "os_scheme"), [("light", "dark"), ("dark", "light")])
def test_a_panel_follows_marimos_theme_and_runs_its_exits(browser, tmp_path, theme, os_scheme):
    with running_marimo(tmp_path, CELLS, theme, extra_pythonpath=[ROOT]) as url:
        with guarded_page(browser, {"width": 1280, "height": 1000}, color_scheme=os_scheme) as page:
            page.set_default_timeout(30_000)
            page.goto(url)
            panel = page.locator("marimo-anywidget .tln-panel").first
            panel.wait_for(timeout=120_000)  # the app's kernel imports torch first
            expect(panel).to_have_attribute("data-tln-theme", theme)
            expect(panel).to_have_css("background-color", BACKGROUND[theme])
            expect(panel.locator(".tln-head .tln-badge")).to_have_attribute("data-tone", "warning")
            panel.get_by_role("button", name="Run doctor").click()
            followup = panel.locator(".tln-followup .tln-panel")
            expect(followup.locator(".tln-type")).to_have_text("doctor", timeout=60_000)
            expect(followup).to_have_attribute("data-tln-theme", theme)
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / f"marimo_{theme}.png"))
