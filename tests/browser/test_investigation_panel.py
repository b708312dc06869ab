"""Fast browser tier of the investigation report: it renders with the ``nonfinite`` panel (origin
card, lineage one ring at a time) from a real ``tl.debug.investigate`` payload.

Screenshots: tests/artifacts/investigation_*.png (look at them).
"""

from __future__ import annotations

import pytest
import torch
from playwright.sync_api import expect

import torchlens_nb as tl
from tests.browser.helpers import reply_to
from tests.nonfinite.nan_models import LogOfNegative, Net, X, line_of
from tests.nonfinite.test_investigate import RowNorm
from torchlens_nb import widgets

pytestmark = pytest.mark.browser


def test_a_forward_origin_shows_its_card_and_expands_its_lineage(panel_page) -> None:
    report = tl.debug.investigate(Net(LogOfNegative()), X, loss_fn=lambda out: out.sum())
    widget = widgets.widget_for(report)
    root = panel_page.mount("nonfinite", widgets.panel_payload(report))
    card = root.get_by_role("region", name="First non-finite output")
    line = line_of(LogOfNegative.forward, "torch.log(shifted)")
    assert card.locator("dd").all_inner_texts()[:5] == [
        "nan",
        "log_1 (log)",
        "block",
        f"nonfinite/nan_models.py:{line}",
        "checked finite: the value was born here",
    ]
    assert "4 outputs, 3 of them propagated" in card.inner_text()
    expect(card.locator(".tln-nf-amp")).to_have_count(0)  # float32: no AMP paragraph
    expect(card.locator(".tln-nf-recipe")).to_have_count(0)  # the replay covered the backward
    assert root.locator(".tln-lead").inner_text().startswith("replayed step: nan born at log_1")
    graph = root.locator(".tln-lin-graph")
    assert graph.locator(".tln-lin-label").all_inner_texts() == ["sub_1", "log_1 ◆ origin", "mul_1"]
    root.get_by_role("button", name="Show 1 more input of sub_1").click()
    panel_page.kernel_send(*reply_to(widget, panel_page.sent()[-1]["content"]))
    expect(graph.locator(".tln-lin-label")).to_have_text(
        ["linear_1", "sub_1", "log_1 ◆ origin", "mul_1"]
    )
    panel_page.screenshot("investigation_forward", root)


def test_a_backward_birth_shows_its_forward_op_and_lineage(panel_page) -> None:
    torch.manual_seed(0)
    batch = torch.randn(3, 3)
    batch[1] = 0.0
    report = tl.debug.investigate(RowNorm(), batch, loss_fn=lambda out: out.sum())
    root = panel_page.mount("nonfinite", widgets.panel_payload(report))
    card = root.get_by_role("region", name="Born in backward")  # not "checked finite" forward
    kind, node, op, module, _, inputs = card.locator("dd").all_inner_texts()[:6]
    assert (kind, op, module) == ("inf", "sqrt_1 (sqrt)", "(root)")
    assert node.startswith("SqrtBackward0 (fire ")
    assert inputs == "incoming gradients checked finite: born in this backward node"
    assert "SqrtBackward0" in root.locator(".tln-lead").inner_text()
    origin = root.locator('.tln-lin-item[data-origin="true"]')
    assert origin.locator(".tln-lin-label").inner_text() == "sqrt_1 ◆ forward op of the birth"
    expect(root.get_by_role("button", name="Show forward lineage")).to_be_enabled()
    panel_page.set_theme("dark")
    panel_page.screenshot("investigation_backward_dark", root)
