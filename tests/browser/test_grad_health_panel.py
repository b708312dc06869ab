"""Fast browser tier: the grad_health frontier table and profile in headless chromium.

Payloads and arrays come from real reports (the five-block MLP with a dead block, and a
10,000-op trace); replies from the real widget (``reply_to``). Screenshots:
tests/artifacts/grad_health_*.png.
"""

from __future__ import annotations

import pytest
import torch
from playwright.sync_api import expect
from torch import nn

import torchlens_nb as tl
from tests.browser.helpers import reply_to
from tests.models import five_block_mlp, traced_backward
from torchlens_nb import widgets

pytestmark = pytest.mark.browser


@pytest.fixture
def dead_block():
    """(report, trace): grad_health of the five-block MLP whose block 2 is dead."""
    torch.manual_seed(1)
    trace = traced_backward(five_block_mlp(), torch.randn(4, 8))
    return tl.debug.grad_health(trace), trace


def mount(panel_page, report, **kwargs):
    return panel_page.mount(
        "grad_health", widgets.panel_payload(report), arrays=widgets.panel_arrays(report), **kwargs
    )


def ops_shown(root) -> list[str]:
    return root.locator(".tln-gh-table tbody tr[data-op] th").all_inner_texts()


def test_groups_by_module_with_the_frontier_group_open(panel_page, dead_block) -> None:
    report, _ = dead_block
    root = mount(panel_page, report)
    toggles = root.locator(".tln-gh-toggle")
    assert toggles.count() == 11  # one group per module: 0.0, 0.1, ..., 4.1, 5
    group = root.get_by_role("button", name="▾ 2.0 1 row · 1 flagged · 1 frontier")
    expect(group).to_have_attribute("aria-expanded", "true")
    assert ops_shown(root) == ["linear_3"]  # only the frontier's group starts open
    frontier = root.locator('tr[data-frontier="true"]')
    assert frontier.locator(".tln-gh-verdict").inner_text() == "× zero"
    assert frontier.locator(".tln-gh-frontier").inner_text() == "◆ frontier"
    root.get_by_role("button", name="Expand all").click()
    assert len(ops_shown(root)) == 11
    group.click()
    assert "linear_3" not in ops_shown(root)
    panel_page.screenshot("grad_health_table", root)


def test_sorts_by_any_column(panel_page, dead_block) -> None:
    report, _ = dead_block
    root = mount(panel_page, report)
    root.get_by_label("Group by module").uncheck()
    assert ops_shown(root) == [r["op"] for r in report.table().dicts()]  # execution order
    header = root.get_by_role("button", name="grad_norm")
    header.click()
    frame = report.to_pandas().sort_values("grad_norm", kind="stable")
    assert ops_shown(root) == frame.op.tolist()
    assert root.locator('th[data-column="grad_norm"]').get_attribute("aria-sort") == "ascending"
    header.click()
    assert ops_shown(root)[:1] == [frame.op.tolist()[-1]]
    root.get_by_role("button", name="verdict").click()
    verdicts = root.locator(".tln-gh-verdict").all_inner_texts()
    assert verdicts == sorted(verdicts, key=lambda text: text.split()[-1])


def test_filters_flagged_frontier_and_module(panel_page, dead_block) -> None:
    report, _ = dead_block
    root = mount(panel_page, report)
    root.get_by_label("Group by module").uncheck()
    root.get_by_label("Flagged only").check()
    assert ops_shown(root) == ["linear_1", "relu_1", "linear_2", "relu_2", "linear_3"]
    expect(root.locator(".tln-gh-pane .tln-table-status")).to_have_text("5 of 11 gradients shown")
    root.get_by_label("Frontier only").check()
    assert ops_shown(root) == ["linear_3"]
    root.get_by_label("Flagged only").uncheck()
    root.get_by_label("Frontier only").uncheck()
    root.get_by_role("searchbox", name="Filter by module").fill("3.")
    assert ops_shown(root) == ["linear_4", "relu_4"]


def test_row_click_opens_the_lineage_through_python(panel_page, dead_block) -> None:
    report, _trace = dead_block
    root = mount(panel_page, report)
    root.get_by_role("button", name="Lineage of linear_3", exact=True).click()
    sent = panel_page.sent()[-1]["content"]
    assert (sent["type"], sent["name"], sent["args"]) == ("action", "lineage", {"op": "linear_3"})
    panel_page.kernel_send(*reply_to(widgets.widget_for(report), sent))
    followup = root.locator('.tln-followup .tln-panel[data-panel="lineage"]')
    expect(followup.locator(".tln-type")).to_have_text("lineage")
    panel_page.screenshot("grad_health_lineage", root)
    panel_page.cleanup()
    assert panel_page.listener_count() == 0
    assert panel_page.dom_listener_count() == 0


def test_profile_tab_draws_the_chart(panel_page, dead_block) -> None:
    report, _ = dead_block
    root = mount(panel_page, report)
    root.get_by_role("tab", name="Norm profile").click()
    canvas = root.locator("canvas.tln-gh-profile")
    expect(canvas).to_be_visible()
    assert root.locator(".tln-gh-legend li").all_inner_texts()[:2] == ["● ok (6)", "× zero (5)"]
    painted = canvas.evaluate(
        "c => c.getContext('2d').getImageData(0, 0, c.width, c.height).data.some(v => v !== 0)"
    )
    assert painted
    box = canvas.bounding_box()  # the right edge of the plot area is the last op, linear_6
    canvas.hover(position={"x": box["width"] * (720 - 14) / 720, "y": box["height"] / 2})
    expect(root.locator(".tln-gh-hover")).to_contain_text("linear_6 (5): ok, total_norm ")
    panel_page.screenshot("grad_health_profile", root)


def test_offline_copy_disables_row_clicks(panel_page, dead_block) -> None:
    report, _ = dead_block
    root = mount(panel_page, report, offline=True)
    expect(root.get_by_role("button", name="Lineage of linear_3", exact=True)).to_be_disabled()
    expect(root.get_by_test_id("offline-note").first).to_be_visible()


class Long(nn.Module):
    """2,500 small blocks of four ops: a 10,001-op trace (input included)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(2500):
            x = torch.tanh(x * 0.5 + 0.1) - 0.01
        return x


def test_ten_thousand_rows_page_and_sort(panel_page) -> None:
    x = torch.ones(2, 3, requires_grad=True)
    trace = tl.trace(Long(), x, capture=tl.options.CaptureOptions(save_grads=True))
    trace.backward(trace.output.sum())
    report = tl.debug.grad_health(trace)
    assert len(report.table().rows) == 10_000
    root = mount(panel_page, report)
    root.get_by_label("Group by module").uncheck()
    expect(root.locator(".tln-gh-pane .tln-table-status")).to_have_text(
        "10000 of 10000 gradients shown"
    )
    assert len(ops_shown(root)) == 100  # drawn in chunks
    root.get_by_role("button", name="Show 100 more (9900 hidden)").click()
    assert len(ops_shown(root)) == 200
    root.get_by_role("button", name="rms").click()
    root.get_by_role("button", name="rms").click()  # descending
    top = report.to_pandas().sort_values("rms", ascending=False, kind="stable").op.tolist()[:5]
    assert ops_shown(root)[:5] == top
