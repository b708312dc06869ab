"""End-to-end tier: real reports displayed by a real JupyterLab kernel, driven by chromium.

One broad scenario (~1 min): the card renders from the kernel's widget, an exit button runs
its action in the kernel and the follow-up panel appears, a 100k-row table sorts in pandas
through the kernel, and JupyterLab Dark restyles the panel. Screenshots: tests/artifacts/lab_*.
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.slow

CELLS = [
    "import torchlens_nb as tl\n"
    "from tests.browser.reports import big_table_report, traced_ops_report\n"
    "report, model = traced_ops_report()\n"
    "report",
    "big = big_table_report(100_000)\nbig",
]


def test_reports_are_live_panels_in_jupyterlab(lab_notebook) -> None:
    nb = lab_notebook(CELLS)
    outputs = nb.run_cell(0)
    assert outputs[0]["data"]["text/plain"].startswith("report [warn] Sequential (4 ops)")
    card = nb.output_panel(0)
    expect(card.locator(".tln-badge")).to_have_text("▲Status: warn")
    assert card.locator(".tln-findings-group h3").all_inner_texts() == [
        "✖ Critical (1)",
        "▲ Warnings (1)",
        "ℹ Info (1)",
    ]

    # exit button -> action runs in the kernel -> its report's panel appears below
    card.get_by_role("button", name="Run doctor").click()
    followup = card.locator(".tln-followup .tln-panel")
    expect(followup.locator(".tln-type")).to_have_text("doctor", timeout=30_000)
    expect(followup.locator(".tln-subject")).to_have_text(re.compile(r"^torch 2\.\S+, Sequential$"))
    expect(card.locator(".tln-request-status").first).to_have_text("Shown below.")

    # a 100k-row table sorts in pandas: the top row comes from beyond the 200 shipped rows
    nb.run_cell(1)
    table = nb.output_panel(1)
    value = table.get_by_role("button", name=re.compile("^value"))
    value.click()
    value.click()  # descending
    status = table.locator(".tln-table-status")
    expect(status).to_have_text("Rows 1–25 of 100,000", timeout=30_000)
    first = min(i for i in range(100_000) if (i * 7919) % 1000 == 999)  # value 99.9
    assert first > 200
    expect(table.locator("tbody tr").first.locator("td").nth(0)).to_have_text(f"{first:,}")
    nb.screenshot("lab_light")
    card.evaluate("el => el.scrollIntoView()")
    nb.screenshot("lab_card_light")

    # JupyterLab Dark restyles the panel through the --jp-* variables
    light = card.evaluate("el => getComputedStyle(el).color")
    nb.set_theme("JupyterLab Dark")
    expect(card).not_to_have_css("color", light)
    nb.screenshot("lab_card_dark")
