"""Fast browser tier: follow-up buttons survive the way people write notebooks (issue 18).

Traces passed inline or rebound are released by the time a button is clicked; the follow-ups
hold the trace's op graph, so the click still answers. A follow-up that truly needs a released
object says so before it is clicked. Replies come from the real widget (``reply_to``).
Screenshots: tests/artifacts/followup_*.png.
"""

from __future__ import annotations

import gc
import weakref

import pytest
import torch
from playwright.sync_api import expect
from torch import nn

import torchlens_nb as tl
from tests.browser.helpers import reply_to
from tests.models import five_block_mlp, traced_backward
from torchlens_nb import widgets
from torchlens_nb.report import Exit, Report, live_action

pytestmark = pytest.mark.browser


def test_an_inline_trace_compare_opens_its_lineage_after_gc(panel_page) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.GELU(), nn.Linear(4, 2))
    a, b = torch.randn(2, 4), torch.randn(2, 4)
    report = tl.debug.compare(tl.trace(model, a), tl.trace(model, b))  # as the tutorial does
    gc.collect()  # both traces are gone: nothing else holds them
    widget = widgets.widget_for(report)
    root = panel_page.mount("compare", widgets.panel_payload(report))
    button = root.get_by_role("button", name="Lineage of linear_1")
    expect(button).to_be_enabled()
    button.click()
    request = panel_page.sent()[-1]["content"]
    panel_page.kernel_send(*reply_to(widget, request))
    followup = root.locator('.tln-followup .tln-panel[data-panel="lineage"]')
    expect(followup.locator(".tln-lead")).to_have_text("linear_1 has 1 ancestor in total.")
    expect(root.locator(".tln-request-status").first).to_have_text("Shown below.")
    panel_page.screenshot("followup_compare_after_gc", root)


def test_a_rebound_trace_still_opens_the_frontier_rows_lineage(panel_page) -> None:
    torch.manual_seed(1)
    trace = traced_backward(five_block_mlp(), torch.randn(4, 8))
    report = tl.debug.grad_health(trace)
    released = weakref.ref(trace)
    trace = traced_backward(five_block_mlp(dead_block=None), torch.randn(4, 8))  # rebound
    gc.collect()
    assert released() is None  # the report kept no activation alive
    widget = widgets.widget_for(report)
    root = panel_page.mount(
        "grad_health", widgets.panel_payload(report), arrays=widgets.panel_arrays(report)
    )
    root.locator('tr[data-frontier="true"]').get_by_role(
        "button", name="Lineage of linear_3"
    ).click()
    panel_page.kernel_send(*reply_to(widget, panel_page.sent()[-1]["content"]))
    followup = root.locator('.tln-followup .tln-panel[data-panel="lineage"]')
    expect(followup.locator(".tln-lead")).to_have_text(
        "linear_3 has 1 ancestor and 1 descendant within depth 1."
    )
    # the values are gone with the trace, and the follow-up says so
    expect(followup.locator(".tln-notes")).to_contain_text("the trace was released")
    panel_page.screenshot("followup_rebound_trace", root)


class _Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2


def _needs_model_report(model: nn.Module) -> Report:
    held = weakref.ref(model)
    return Report(
        subject="a report whose follow-up reads the model",
        status="info",
        lead="Run doctor needs the model itself.",
        exits=(Exit("Run doctor", "tl.report.doctor(model)", action="doctor"),),
        actions={
            "doctor": live_action(
                lambda: tl.report.doctor(held()),
                needs=model,
                gone="the model was released; keep a reference to it (model = ...) and re-run.",
            )
        },
    )


def test_a_follow_up_needing_a_released_model_is_disabled_before_it_is_clicked(
    panel_page,
) -> None:
    model = _Model()
    report = _needs_model_report(model)
    widget = widgets.widget_for(report)
    assert widget.payload["unavailable_actions"] == {}
    del model
    gc.collect()
    # the widget re-sent its payload when the model went: the button turns disabled
    assert widget.payload["unavailable_actions"] == {
        "doctor": "the model was released; keep a reference to it (model = ...) and re-run."
    }
    root = panel_page.mount("report", widget.payload)
    button = root.get_by_role("button", name="Run doctor")
    expect(button).to_be_disabled()
    expect(root.get_by_test_id("unavailable-note")).to_have_text(
        "▲ Unavailable: the model was released; keep a reference to it (model = ...) and re-run."
    )
    assert panel_page.sent() == []  # nothing was asked of Python
    panel_page.screenshot("followup_disabled", root)
