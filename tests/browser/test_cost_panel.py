"""Fast browser tier of the cost panel (hot_path, recompute_candidates).

Payloads come from real reports. Screenshots: tests/artifacts/cost_*.png.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import torchlens_nb as tl
from torchlens_nb import widgets

pytestmark = pytest.mark.browser


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(16, 64)
        self.mix = nn.Linear(64, 64)
        self.head = nn.Linear(64, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.embed(x))
        h = torch.tanh(self.mix(h)) + h
        return self.head(h)


@pytest.fixture
def trace() -> tl.Trace:
    torch.manual_seed(0)
    return tl.trace(Net(), torch.randn(8, 16))


def test_hot_lines_are_ranked_with_a_bar_and_the_code(panel_page, trace) -> None:
    report = tl.debug.hot_path(trace, by="flops")
    root = panel_page.mount("cost", widgets.panel_payload(report))
    items = root.locator(".tln-cost-lines > li")
    rows = report.table().dicts()
    assert items.count() == len(rows) == 3
    assert root.locator(".tln-cost-code").all_inner_texts() == [r["code"] for r in rows]
    # mix: 2*8*64*64 = 65536 (+ tanh 512 + add 512) is the hottest line
    assert items.first.locator(".tln-cost-value").inner_text() == "66,560 FLOPs"
    widths = root.locator(".tln-cost-bar > span").evaluate_all(
        "spans => spans.map(s => parseFloat(s.style.width))"
    )
    assert widths == sorted(widths, reverse=True) and widths[0] == pytest.approx(
        100 * rows[0]["share"], abs=0.1
    )
    panel_page.screenshot("cost_hot_path", root)


def test_recompute_draws_the_budget_line_and_marks_the_greedy_set(panel_page, trace) -> None:
    report = tl.debug.recompute_candidates(trace, budget_gb=6000 / 1e9)
    root = panel_page.mount("cost", widgets.panel_payload(report))
    chart = root.get_by_role(
        "img", name="Activation bytes left after recomputing the first N candidates; budget 5.9 KiB"
    )
    assert chart.locator("line.tln-cost-budget").count() == 1
    assert chart.locator(".tln-cost-budget-label").text_content() == "budget 5.9 KiB"
    selected = [r["op"] for r in report.table().dicts() if r["is_selected"]]
    assert root.locator('li[data-selected="true"] code').all_inner_texts() == selected
    assert chart.locator("circle.tln-cost-selected").count() == len(selected) > 0
    assert root.locator('[data-slot="budget"]').inner_text().startswith("budget reached")
    panel_page.set_theme("dark")
    panel_page.screenshot("cost_recompute_dark", root)
    panel_page.cleanup()
    assert panel_page.listener_count() == 0
