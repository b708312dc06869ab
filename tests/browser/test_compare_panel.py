"""Fast browser tier of the comparison panel (compare, bisect_precision, determinism).

Payloads come from real reports. Screenshots: tests/artifacts/compare_*.png.
"""

from __future__ import annotations

import pytest
import torch
from playwright.sync_api import expect
from torch import nn

import torchlens_nb as tl
from tests.browser.helpers import reply_to
from torchlens_nb import widgets

pytestmark = pytest.mark.browser


def _deep_pair(blocks: int = 40) -> tuple[tl.Trace, tl.Trace]:
    """Two runs of a deep MLP that separate at block 30 (its bias changed): the first
    divergence lies far below the top of the list."""
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Sequential(nn.Linear(8, 8), nn.Tanh()) for _ in range(blocks)])
    x = torch.randn(2, 8)
    left = tl.trace(model, x)
    with torch.no_grad():
        model[30][0].bias.add_(0.1)
    return left, tl.trace(model, x)


@pytest.fixture
def traces() -> tuple[tl.Trace, tl.Trace]:
    return _deep_pair()  # held for the test: the report's lineage action holds trace_a weakly


@pytest.fixture
def compare_report(traces) -> tl.report.CompareReport:
    return tl.debug.compare(*traces)


def test_first_divergence_is_highlighted_and_scrolled_to(panel_page, compare_report) -> None:
    root = panel_page.mount("compare", widgets.panel_payload(compare_report))
    first = root.locator('tr[data-first="true"]')
    expect(first).to_have_count(1)
    assert first.get_attribute("data-op") == "linear_31"  # block 30 = the 31st linear
    assert first.locator(".tln-cmp-status").inner_text() == "≠ value diverged"
    assert first.locator(".tln-cmp-first").inner_text() == "◆ first divergence"
    scroller = root.locator(".tln-cmp-scroll")
    panel_page.page.wait_for_function("el => el.scrollTop > 0", arg=scroller.element_handle())
    box, row = scroller.bounding_box(), first.bounding_box()
    assert box["y"] <= row["y"] <= box["y"] + box["height"]  # visible without scrolling
    # the selected row's details: both sides' statistics, computed in Python
    detail = root.get_by_role("region", name="Row details")
    assert detail.locator("h4").all_inner_texts() == [
        "trace_a: (2, 8) float32",
        "trace_b: (2, 8) float32",
    ]
    stats = compare_report.to_pandas("value_stats")
    mean_b = stats[(stats.op == "linear_31") & (stats.side == "b")]["mean"].item()
    assert f"{mean_b:.4g}" in detail.inner_text() or f"{mean_b:.3g}" in detail.inner_text()
    panel_page.screenshot("compare_first_divergence", root)


def test_error_bars_filter_and_row_click(panel_page, compare_report) -> None:
    root = panel_page.mount("compare", widgets.panel_payload(compare_report))
    rows = root.locator(".tln-cmp-table tbody tr")
    # 81 rows (input + 40 x (linear, tanh)); the payload's window starts 20 rows before the
    # first divergence (position 61): positions 41..80
    assert rows.count() == 40
    assert rows.first.get_attribute("data-op") == "linear_21"
    assert root.get_by_text("positions 41–80 of 81 rows (execution order)").is_visible()
    matching = root.locator('tr[data-op="linear_25"] .tln-cmp-errnum').all_inner_texts()
    assert matching == ["0", "0"]  # identical before block 30: empty bars
    widths = root.locator('tr[data-op="linear_31"] .tln-cmp-bar > span').evaluate_all(
        "spans => spans.map(s => parseFloat(s.style.width))"
    )
    assert all(w > 0 for w in widths)
    toggle = root.get_by_role("button", name="Only diverged rows (20)")
    toggle.click()
    expect(root.get_by_role("button", name="Only diverged rows (20)")).to_have_attribute(
        "aria-pressed", "true"
    )
    diverged = root.locator(".tln-cmp-table tbody tr")
    assert diverged.count() == 20  # linear_31 .. tanh_40
    assert diverged.first.get_attribute("data-op") == "linear_31"
    root.get_by_role("button", name="Details of tanh_35").click()
    detail = root.get_by_role("region", name="Row details")
    expect(detail.locator("h3")).to_have_text("tanh_35 tanh in 34.1")
    panel_page.cleanup()
    assert panel_page.listener_count() == 0


def test_bisect_precision_mode_names_the_cancelling_op(panel_page) -> None:
    class Cancelling(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.pre = nn.Linear(8, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return (self.pre(x) + 1e7) - 1e7

    torch.manual_seed(0)
    report = tl.debug.bisect_precision(Cancelling().eval(), torch.randn(2, 8))
    root = panel_page.mount("compare", widgets.panel_payload(report))
    summary = root.get_by_role("region", name="Precision")
    assert "First op to lose precision: sub_1 (sub)" in summary.inner_text()
    assert root.locator(".tln-cmp-table thead th").all_inner_texts()[3:5] == ["native", "float64"]
    assert root.locator('tr[data-first="true"]').get_attribute("data-op") == "sub_1"
    panel_page.screenshot("compare_bisect_precision", root)


def test_determinism_mode_shows_both_verdict_slots_and_witnesses(panel_page) -> None:
    class Noisy(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 4)
            self.drop = nn.Dropout(0.5)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.drop(self.fc(x))

    report = tl.debug.check_determinism(Noisy(), torch.ones(2, 4), seed_sensitivity=True)
    root = panel_page.mount("compare", widgets.panel_payload(report))
    verdicts = root.get_by_role("region", name="Verdicts")
    assert verdicts.locator('[data-slot="verdict"]').inner_text() == "repeatable_under_test"
    assert verdicts.locator('[data-slot="seed_verdict"]').inner_text() == "seed_sensitive"
    assert "RNG-consuming ops: dropout_1 in drop" in verdicts.inner_text()
    verdicts.get_by_text("Environment witnesses").click()
    assert "deterministic_algorithms" in verdicts.inner_text()
    panel_page.set_theme("dark")
    panel_page.screenshot("compare_determinism_dark", root)


def test_lineage_exit_round_trips_to_python(panel_page, compare_report) -> None:
    root = panel_page.mount("compare", widgets.panel_payload(compare_report))
    root.get_by_role("button", name="Lineage of linear_31").click()
    request = panel_page.sent()[-1]["content"]
    assert (request["name"], request["args"]) == ("lineage", {"op": "linear_31"})
    panel_page.kernel_send(*reply_to(widgets.widget_for(compare_report), request))
    expect(root.locator(".tln-followup .tln-panel")).to_have_count(1)
    assert "linear_31 has 61 ancestors" in root.locator(".tln-followup").first.inner_text()
