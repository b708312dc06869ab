"""Helpers for the fast browser tier: drive one panel module in the harness page.

``PanelPage`` wraps a Playwright page showing ``harness/harness.html``: it mounts a bundled
panel (``torchlens_nb/widgets/static/<panel>.js``) with a stand-in model, and exposes what the
panel sent to Python and ways to answer like Python would. ``reply_to`` answers a request with
the REAL widget's handler, so a round trip needs no kernel.
"""

from __future__ import annotations

import base64
import contextlib
import pathlib
import re
from collections.abc import Iterator
from typing import Any

from playwright.sync_api import Browser, Locator, Page

from torchlens_nb import widgets

ARTIFACTS = pathlib.Path(__file__).resolve().parents[1] / "artifacts"
"""Screenshots land here (tests/artifacts/, gitignored): look at them."""

LOOPBACK = re.compile(r"^(https?|wss?)://(127\.0\.0\.1|localhost|\[::1\])(:\d+)?/")


@contextlib.contextmanager
def guarded_page(browser: Browser, viewport: dict[str, int], **options: Any) -> Iterator[Page]:
    """A fresh page; on exit, fail on non-loopback requests, page errors, console errors.

    ``options`` go to ``browser.new_context`` (e.g. ``color_scheme="dark"``: the OS setting).
    """
    context = browser.new_context(viewport=viewport, **options)
    external: list[str] = []
    context.route(
        lambda url: not (LOOPBACK.match(url) or url.startswith(("blob:", "data:"))),
        lambda route: (external.append(route.request.url), route.abort()),
    )
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(f"page error: {exc}"))
    pg.on(
        "console",
        lambda msg: errors.append(f"console.error: {msg.text}") if msg.type == "error" else None,
    )
    try:
        yield pg
    finally:
        context.close()
    assert not external, f"a panel tried to reach the network: {external}"
    assert not errors, "\n".join(errors)


class PanelPage:
    """One harness page; see docs/dev_panels.md section 7 for an example."""

    def __init__(self, page: Page, base_url: str) -> None:
        self.page = page
        self.base_url = base_url
        page.goto(f"{base_url}/harness/harness.html")
        page.wait_for_function("() => window.harness && window.harness.ready")

    def mount(
        self,
        panel: str,
        payload: dict[str, Any],
        *,
        arrays: dict[str, Any] | None = None,
        offline: bool = False,
        traits: dict[str, Any] | None = None,
    ) -> Locator:
        """Render ``panel`` with ``payload`` (use ``widgets.panel_payload(report)``); returns the
        panel root (``.tln-panel``). ``arrays`` as from ``widgets.panel_arrays(report)``;
        ``traits`` are further model traits (the live dashboard's ``live_id``)."""
        encoded = {
            name: {
                **{k: v for k, v in spec.items() if k != "data"},
                "base64": base64.b64encode(spec["data"]).decode(),
            }
            for name, spec in (arrays or {}).items()
        }
        index = self.page.evaluate(
            "([panel, state, arrays]) => harness.mountPanel(panel, state, arrays)",
            [
                panel,
                {"payload": payload, "offline": offline, "panel": panel, **(traits or {})},
                encoded,
            ],
        )
        return self.page.locator(".harness-el").nth(index)  # render() made `el` the .tln-panel

    def sent(self) -> list[dict[str, Any]]:
        """Messages the panel sent to Python: ``[{"content": {...}, "buffers": [sizes]}]``."""
        return self.page.evaluate("() => harness.model._sent")

    def kernel_send(self, msg: dict[str, Any], buffers: list[bytes] | None = None) -> None:
        """Deliver a custom message from Python (``widget.send(msg, buffers)``)."""
        self.page.evaluate(
            "([msg, buffers]) => harness.kernelSend(msg, buffers)",
            [msg, [base64.b64encode(b).decode() for b in buffers or []]],
        )

    def kernel_set(self, key: str, value: Any) -> None:
        """Python sets a trait (e.g. a new ``payload``): change events fire."""
        self.page.evaluate("([k, v]) => harness.model._kernelSet(k, v)", [key, value])

    def listener_count(self) -> int:
        """Model listeners the panel holds (must be 0 after cleanup)."""
        return self.page.evaluate("() => harness.model._listenerCount()")

    def dom_listener_count(self) -> int:
        """DOM listeners the panel added and has not released (must be 0 after cleanup)."""
        return self.page.evaluate("() => window.__liveDomListeners()")

    def cleanup(self) -> None:
        """Run the cleanup ``render`` returned and remove the element."""
        self.page.evaluate("() => harness.widgets.at(-1).cleanup()")

    def set_theme(self, mode: str) -> None:
        """``"dark"`` / ``"light"`` as JupyterLab marks it (``body[data-jp-theme-light]``)."""
        self.page.evaluate(
            "(light) => { document.body.dataset.jpThemeLight = light; }",
            "false" if mode == "dark" else "true",
        )

    def screenshot(self, name: str, locator: Locator | None = None) -> pathlib.Path:
        """Save ``tests/artifacts/<name>.png`` of ``locator`` (default: the whole page)."""
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / f"{name}.png"
        (locator or self.page).screenshot(path=str(path))
        return path


def reply_to(
    widget: widgets.ReportWidget, content: dict[str, Any]
) -> tuple[dict[str, Any], list[bytes]]:
    """What Python answers to a request the panel sent (``PanelPage.sent()[i]["content"]``)."""
    return widget.handle_message(content)
