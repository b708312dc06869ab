"""The fast browser tier's harness, loading the bundles from the INSTALLED package: one real
report per panel kind renders in headless Chromium with no request leaving 127.0.0.1 and no
page or console error (guarded_page)."""

from __future__ import annotations

import base64

import pytest
from playwright.sync_api import expect

from tests.browser.helpers import ARTIFACTS, PanelPage, guarded_page

pytestmark = pytest.mark.browser


def test_one_report_per_panel_kind_renders_from_the_installed_bundles(
    browser, installed_base_url, probe
) -> None:
    with guarded_page(browser, {"width": 960, "height": 720}) as page:
        page.set_default_timeout(10_000)
        harness = PanelPage(page, installed_base_url)
        for panel, state in sorted(probe["panels"].items()):
            arrays = {
                name: {**spec, "data": base64.b64decode(spec["data"])}
                for name, spec in state["arrays"].items()
            }
            root = harness.mount(panel, state["payload"], arrays=arrays)
            expect(root).to_have_attribute("data-panel", panel)
            expect(root.locator(".tln-lead").first).to_have_text(state["payload"]["lead"])
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "installed_panels.png"), full_page=True)
