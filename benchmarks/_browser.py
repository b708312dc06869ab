"""Headless chromium for the panel benchmarks: one page with the panels' theme, as anywidget
would host a panel (offline, no kernel). Measured paint times are in each benchmark's table."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from torchlens_nb import widgets

CHROMIUM = "/usr/bin/chromium"

MOUNT_JS = """
  const frames = () => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
  const mount = async (src, state) => {
    const model = { get: (k) => state[k], on: () => {}, off: () => {}, send: () => {},
      save_changes: () => {} };
    const mod = await import(URL.createObjectURL(new Blob([src], { type: "text/javascript" })));
    const el = document.createElement("div");
    document.body.append(el);
    const t0 = performance.now();
    mod.default.render({ model, el });
    return { el, t0 };
  };
"""
"""JavaScript defining ``frames()`` (two animation frames) and ``mount(src, state)``: load a
panel bundle as anywidget does (text -> Blob URL -> import), render it into a fresh element
with a stand-in model whose traits are ``state``, and return ``{el, t0}`` (t0: just before
``render``). Paste it at the top of a ``page.evaluate`` function body."""


def available(bundle: str) -> bool:
    """Whether chromium and the panel bundle ``bundle`` (e.g. ``"grad_fn.js"``) are present."""
    return Path(CHROMIUM).exists() and (widgets.STATIC_DIR / bundle).is_file()


@contextlib.contextmanager
def themed_page() -> Iterator[Any]:
    """A 1280 x 900 headless chromium page holding the panels' theme CSS."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            theme = (widgets.STATIC_DIR / "theme.css").read_text()
            page.set_content(f"<!doctype html><style>{theme}</style>")
            yield page
        finally:
            browser.close()
