"""Fast browser tier: what the panels show stays true to what is shown, and nothing spills.

The lineage lead follows the rings added and says when columns overflow sideways; the graph
panel's search results stay in their box and never cover the graph, and a graph cut by the view
says which way the rest lies; table rows stay one line high when a column is off-screen.
Screenshots: tests/artifacts/layout_*.png.
"""

from __future__ import annotations

import pytest
import torch
from playwright.sync_api import expect
from torch import nn

import torchlens_nb as tl
from tests import models
from tests.browser.helpers import reply_to
from torchlens_nb import widgets

pytestmark = pytest.mark.browser


def test_the_lineage_lead_says_what_is_shown_after_rings_are_added(panel_page) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Sequential(nn.Linear(4, 4), nn.Tanh()) for _ in range(6)])
    trace = tl.trace(model, torch.randn(2, 4))
    report = tl.debug.lineage(trace, "tanh_3", direction="both", max_depth=1)
    widget = widgets.widget_for(report)
    panel_page.page.set_viewport_size({"width": 560, "height": 900})  # a narrow cell
    root = panel_page.mount("lineage", widgets.panel_payload(report))
    lead = root.locator(".tln-head .tln-lead")
    expect(lead).to_have_text("tanh_3 has 1 ancestor and 1 descendant within depth 1.")
    for _ in range(2):  # walk two more rings of inputs
        root.locator(".tln-lin-expand[data-direction='ancestors']").first.click()
        panel_page.kernel_send(*reply_to(widget, panel_page.sent()[-1]["content"]))
        expect(root.locator(".tln-lineage .tln-request-status")).to_contain_text("Added 1 node")
    expect(lead).to_have_text(
        "Showing 5 nodes around tanh_3 after 2 expansions: 3 before, 1 after."
    )
    headers = root.locator(".tln-lin-column h4").all_inner_texts()
    assert headers == [
        "3 steps before",
        "2 steps before",
        "1 step before",
        "tanh_3",
        "1 step after",
    ]
    cue = root.locator(".tln-lin-cue")
    expect(cue).to_be_visible()
    expect(cue).to_contain_text("More columns to the right")
    root.locator(".tln-lin-scroll").evaluate("el => { el.scrollLeft = el.scrollWidth; }")
    expect(cue).to_contain_text("more columns to the left")
    panel_page.screenshot("layout_lineage_cue", root)


@pytest.fixture(scope="module")
def gpt2_sketch() -> tl.report.GradFnSketch:
    model = models.tiny_gpt2(n_layer=4)
    ids = torch.arange(8).unsqueeze(0)
    return tl.debug.walk_grad_fn(model(input_ids=ids, labels=ids).loss, model=model)


def test_search_results_stay_in_their_box_and_never_cover_the_graph(panel_page, gpt2_sketch):
    root = panel_page.mount("grad_fn", widgets.panel_payload(gpt2_sketch))
    root.get_by_role("searchbox", name="Search nodes by name").fill("transformer.h")
    results = root.get_by_role("region", name="Search results")
    expect(results.locator("p")).to_contain_text("first 20 listed")
    box = results.bounding_box()
    stage = root.locator(".tln-gg-stage").bounding_box()
    assert box["y"] + box["height"] <= stage["y"]  # above the graph, not over it
    for button in results.get_by_role("button").all():
        b = button.bounding_box()
        assert box["x"] <= b["x"] and b["x"] + b["width"] <= box["x"] + box["width"] + 0.5
    # a click in the middle of the graph reaches the graph
    centre = (stage["x"] + stage["width"] / 2, stage["y"] + stage["height"] / 2)
    hit = panel_page.page.evaluate(
        "([x, y]) => document.elementFromPoint(x, y)?.closest('.tln-gg-stage') !== null", centre
    )
    assert hit
    panel_page.screenshot("layout_grad_fn_search", root)


def test_a_graph_cut_by_the_view_says_which_way_the_rest_lies(panel_page, gpt2_sketch) -> None:
    root = panel_page.mount("grad_fn", widgets.panel_payload(gpt2_sketch))
    root.get_by_role("button", name="Unfold every group").click()
    expect(root.locator(".tln-gg")).to_have_attribute(
        "data-units", str(len(gpt2_sketch.nodes)), timeout=20_000
    )
    cue = root.locator(".tln-gg-cue")
    expect(cue).to_be_visible()
    expect(cue).to_contain_text("More of the graph lies")
    assert "left" not in cue.get_attribute("data-sides")  # it opens at its left edge
    root.get_by_role("button", name="Fit the graph to the view").click()
    expect(cue).to_be_hidden()
    panel_page.screenshot("layout_grad_fn_fit", root)


def test_table_rows_stay_one_line_high_with_an_off_screen_column(panel_page) -> None:
    torch.manual_seed(0)
    a = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    b = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    report = tl.debug.compare_params(a, b)
    panel_page.page.set_viewport_size({"width": 700, "height": 720})
    root = panel_page.mount("table", widgets.panel_payload(report))
    rows = root.locator("table.tln-table tbody tr")
    heights = [row.bounding_box()["height"] for row in rows.all()]
    line = root.locator("table.tln-table tbody td").first.evaluate(
        "el => parseFloat(getComputedStyle(el).lineHeight)"
    )
    assert max(heights) < 2 * line + 8, heights  # one line of text plus padding
    scroller = root.locator(".tln-table-scroll")
    assert scroller.evaluate("el => el.scrollWidth > el.clientWidth")  # scrolls sideways instead
    panel_page.screenshot("layout_compare_params", root)
