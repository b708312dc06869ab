"""Fast browser tier: zero and infinite values on log axes sit in labelled lanes (issue 18).

A log axis has no place for 0, inf or nan: the checks chart, the gradient-health bars and the
norm profile draw them in lanes outside the numeric range ("0" below it, "inf" above it), never
on the axis, never as a bar length, never past the plot. Reports are real: a session whose
gradients are finite, zero, then overflow; the dead-block MLP with its loss scaled past float32.
Screenshots: tests/artifacts/lanes_*.png.
"""

from __future__ import annotations

import pytest
import torch
from playwright.sync_api import expect

import torchlens_nb as tl
from tests import models
from tests.models import five_block_mlp
from torchlens_nb import widgets
from torchlens_nb.options import CaptureOptions

pytestmark = pytest.mark.browser


@pytest.fixture
def zero_and_inf_session() -> tl.report.CheckReport:
    """Four steps whose gradient norms are 0.605, 0, inf, 0.605."""
    torch.manual_seed(0)
    model = models.mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    session = tl.debug.ChecksSession(model, optimizer, scaler=None)
    session.register_change_check(action="collect")
    x = torch.randn(4, 8)
    with session:
        for scale in (1.0, 0.0, 1e36, 1.0):  # 1e36: the norm overflows float32
            optimizer.zero_grad()
            (model(x).square().mean() * scale).backward()
            optimizer.step()
    report = session.report()
    norms = [row["grad_norm"] for row in report.table("series").dicts()]
    assert norms[1:3] == [0.0, float("inf")]
    return report


@pytest.fixture
def zero_and_inf_gradients() -> tl.report.GradHealthReport:
    """Block 2 dead (zero gradients) and the loss scaled by 1e36 (the last norms overflow)."""
    torch.manual_seed(1)
    trace = tl.trace(five_block_mlp(), torch.randn(4, 8), capture=CaptureOptions(save_grads=True))
    trace.backward(trace.output.sum() * 1e36)
    return tl.debug.grad_health(trace)


LAYOUT = """(svg) => {
  const grid = [...svg.querySelectorAll(".tln-chart-grid")].map((l) => Number(l.getAttribute("y1")));
  const box = svg.viewBox.baseVal;
  const inside = (el) => { const b = el.getBBox(); return b.y >= box.y && b.y + b.height <= box.y + box.height
    && b.x >= box.x && b.x + b.width <= box.x + box.width; };
  const marks = [...svg.querySelectorAll(".tln-chart-lane-mark")];
  return {
    top: Math.min(...grid), bottom: Math.max(...grid),
    lanes: [...svg.querySelectorAll(".tln-chart-lane")].map((g) => g.dataset.lane),
    labels: [...svg.querySelectorAll(".tln-chart-lane-label")].map((t) => [t.textContent, inside(t)]),
    marks: marks.map((m) => [m.dataset.lane, Number(m.getAttribute("cy")), inside(m)]),
  };
}"""


def test_the_checks_chart_puts_zero_and_inf_in_labelled_lanes(
    panel_page, zero_and_inf_session
) -> None:
    report = zero_and_inf_session
    root = panel_page.mount(
        "checks", widgets.panel_payload(report), arrays=widgets.panel_arrays(report)
    )
    chart = root.locator('svg[data-chart="grad_norm"]')
    expect(chart).to_be_visible()
    layout = chart.evaluate(LAYOUT)
    assert layout["lanes"] == ["inf", "0"]  # inf above the range, 0 below it
    assert layout["labels"] == [["inf", True], ["0", True]]  # labelled, nothing clipped
    marks = {lane: (y, inside) for lane, y, inside in layout["marks"]}
    assert set(marks) == {"inf", "0"}
    assert marks["inf"][0] < layout["top"] and marks["0"][0] > layout["bottom"]
    assert marks["inf"][1] and marks["0"][1]  # within the chart, not spilling past it
    panel_page.screenshot("lanes_checks_light", chart)
    panel_page.set_theme("dark")
    panel_page.screenshot("lanes_checks_dark", chart)


def test_the_gradient_health_bars_label_zero_and_inf(panel_page, zero_and_inf_gradients) -> None:
    report = zero_and_inf_gradients
    root = panel_page.mount(
        "grad_health", widgets.panel_payload(report), arrays=widgets.panel_arrays(report)
    )
    root.get_by_role("button", name="Expand all").click()
    zero = root.locator('tr[data-op="linear_3"] .tln-gh-bar')
    expect(zero).to_have_attribute("data-lane", "0")
    expect(zero.locator(".tln-gh-lane")).to_have_text("0")
    assert zero.locator(".tln-gh-bar-fill").evaluate("el => el.getBoundingClientRect().width") == 0
    inf = root.locator('tr[data-op="linear_6"] .tln-gh-bar')
    expect(inf).to_have_attribute("data-lane", "inf")
    expect(inf.locator(".tln-gh-lane")).to_have_text("inf")
    widths = inf.evaluate(
        "el => [el.querySelector('.tln-gh-bar-fill').getBoundingClientRect().width,"
        " el.getBoundingClientRect().width]"
    )
    assert widths[0] == widths[1]  # inf is the longest bar, not the shortest
    panel_page.screenshot("lanes_grad_health_bars", root.locator(".tln-gh-table"))


def test_the_norm_profile_draws_zero_below_the_vanishing_line(
    panel_page, zero_and_inf_gradients
) -> None:
    report = zero_and_inf_gradients
    root = panel_page.mount(
        "grad_health", widgets.panel_payload(report), arrays=widgets.panel_arrays(report)
    )
    root.get_by_role("tab", name="Norm profile").click()
    canvas = root.locator("canvas.tln-gh-profile")
    plot = canvas.evaluate("el => JSON.parse(el.dataset.plot)")
    assert sorted(plot["lanes"]) == ["0", "inf"]
    # y grows downwards: inf above the range, 0 below it and below the vanishing threshold
    assert plot["lanes"]["inf"] < plot["top"] < plot["bottom"] < plot["lanes"]["0"]
    assert plot["vanishing"] < plot["lanes"]["0"]
    panel_page.screenshot("lanes_profile_light", canvas)
    panel_page.set_theme("dark")
    root.get_by_role("tab", name="Frontier table").click()
    root.get_by_role("tab", name="Norm profile").click()  # redraws with the dark tokens
    panel_page.screenshot("lanes_profile_dark", canvas)
