"""The triage panel (js/panels/triage.js), fast tier, with real triage payloads: the root cause
at the top with its remedy, the checklist in run order, rows that open into their recipe's
view (and whose follow-up buttons run through the triage widget), and the live state (progress
bar and overfit curve) pushed as a triage really pushes it. Screenshots light and dark.
"""

from __future__ import annotations

from typing import ClassVar

import pytest
import torch
from playwright.sync_api import expect
from torch import nn

import torchlens_nb as tl
from tests.browser.helpers import reply_to
from tests.recipes.zoo import ZOO
from tests.recipes.zoo import batch as zoo_batch
from torchlens_nb import widgets
from torchlens_nb.recipes.triage import _progress as _triage_progress
from torchlens_nb.report import TriageReport

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def dead_layer() -> TriageReport:
    torch.set_num_threads(1)
    bug = next(b for b in ZOO if b.name == "dead_layer")
    return tl.recipes.triage(**bug.call(broken=True), live=False)


def test_the_root_cause_leads_and_every_check_is_a_row_in_run_order(
    panel_page, dead_layer: TriageReport
) -> None:
    root = panel_page.mount("triage", widgets.panel_payload(dead_layer))
    cause = root.get_by_role("region", name="Root cause")
    expect(cause).to_contain_text("Root cause: gradient_flow grad_zero")
    expect(cause).to_contain_text("Remedy: start at the frontier op")
    expect(cause).to_contain_text("4 other findings follow from it")
    rows = root.locator(".tln-triage-list > li")
    assert rows.evaluate_all("els => els.map(e => [e.dataset.check, e.dataset.status])") == [
        [r.check, r.status] for r in dead_layer.rows
    ]
    flagged = root.locator(".tln-triage-list > li[data-root]")
    expect(flagged).to_have_attribute("data-check", "gradient_flow")
    expect(flagged).to_contain_text("root cause")
    # status is a word beside an icon, in the tone Python chose
    overfit = root.locator('li[data-check="overfit_one_batch"]')
    expect(overfit).to_have_attribute("data-tone", "critical")
    expect(overfit.locator(".tln-badge-word")).to_have_text("fail")
    panel_page.screenshot("triage_dead_layer_light", root)
    panel_page.set_theme("dark")
    panel_page.screenshot("triage_dead_layer_dark", root)


def test_a_row_opens_into_its_recipes_own_view(panel_page, dead_layer: TriageReport) -> None:
    root = panel_page.mount("triage", widgets.panel_payload(dead_layer))
    overfit = root.locator('li[data-check="overfit_one_batch"]')
    expect(overfit.locator("svg.tln-chart")).to_have_count(0)  # drawn when opened
    overfit.locator("summary").first.click()
    expect(overfit.locator("svg.tln-chart")).to_have_count(1)
    expect(overfit.locator(".tln-lead").first).to_have_text(
        dead_layer.check_report("overfit_one_batch").lead
    )
    flow = root.locator('li[data-check="gradient_flow"]')
    flow.locator("summary").first.click()
    expect(flow.locator('table[data-table="parameters"]')).to_have_count(1)
    panel_page.screenshot("triage_row_open", root)


def test_a_follow_up_inside_a_row_runs_through_the_triage_widget(
    panel_page, dead_layer: TriageReport
) -> None:
    widget = widgets.widget_for(dead_layer)
    root = panel_page.mount("triage", widget.payload)
    flow = root.locator('li[data-check="gradient_flow"]')
    flow.locator("summary").first.click()
    flow.get_by_role("button", name="Op-level gradient health").click()
    request = panel_page.sent()[-1]["content"]
    assert (request["type"], request["name"]) == ("action", "gradient_flow.grad_health")
    panel_page.kernel_send(*reply_to(widget, request))
    expect(flow.locator('.tln-panel[data-panel="grad_health"]')).to_have_count(1)


class Pushed:
    """Stands in for the live panel sink of a kernel: keeps every payload a triage pushes."""

    payloads: ClassVar[list[dict]] = []

    def __call__(self, report: TriageReport) -> None:
        Pushed.payloads.append(widgets.panel_payload(report))


def test_while_it_runs_a_progress_bar_and_the_overfit_curve_update(
    panel_page, monkeypatch: pytest.MonkeyPatch
) -> None:
    Pushed.payloads = []
    monkeypatch.setattr(_triage_progress, "PanelSink", Pushed)
    monkeypatch.setattr("torchlens_nb.recipes.training._overfit.LIVE_INTERVAL_S", 0.0)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    batch = (torch.randn(16, 8), torch.randint(0, 4, (16,)))
    tl.recipes.triage(
        model, batch, nn.CrossEntropyLoss(), checks=["init_loss", "overfit_one_batch"], steps=8,
        live=True,
    )  # fmt: skip
    first, *rest = Pushed.payloads
    root = panel_page.mount("triage", first)
    bar = root.get_by_role("progressbar")
    expect(root.get_by_role("status")).to_have_text("0 of 2 checks finished; init_loss running")
    seen = []
    for payload in rest[:-1]:
        panel_page.kernel_set("payload", payload)
        seen.append(root.locator('svg.tln-chart g[data-series="loss"] circle').count())
    expect(bar).to_have_attribute("value", "1")
    expect(root.get_by_role("status")).to_have_text(
        "1 of 2 checks finished; overfit_one_batch at step 8"
    )
    assert seen == [0, 1, 2, 3, 4, 5, 6, 7, 8]  # the curve grows step by step
    panel_page.screenshot("triage_running", root)
    panel_page.kernel_set("payload", rest[-1])
    expect(root.get_by_role("progressbar")).to_have_count(0)
    expect(root.locator(".tln-triage-list > li")).to_have_count(2)
    panel_page.cleanup()
    assert panel_page.listener_count() == 0


def test_a_skipped_check_shows_its_reason_and_the_verdict_is_not_a_pass(panel_page) -> None:
    torch.set_num_threads(1)
    twin = next(b for b in ZOO if b.name == "dead_layer").twin.model()
    report = tl.recipes.triage(twin, zoo_batch(), nn.CrossEntropyLoss(), live=False)
    root = panel_page.mount("triage", widgets.panel_payload(report))
    expect(root.locator(".tln-head .tln-badge")).to_have_attribute("data-tone", "warning")
    expect(root.locator(".tln-head .tln-badge-word")).to_have_text("incomplete")
    skipped = root.locator('li[data-check="update_ratio"]')
    expect(skipped).to_have_attribute("data-status", "skipped")
    expect(skipped).to_contain_text("no optimizer given: pass optimizer=")
    expect(skipped.locator("details")).to_have_count(0)  # nothing ran: nothing to open
    expect(root.get_by_role("region", name="Root cause")).to_have_count(0)
    panel_page.screenshot("triage_incomplete", root)
