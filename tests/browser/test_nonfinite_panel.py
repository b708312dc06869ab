"""Fast browser tier of the NaN panels: origin card, lineage expand round trip, backward ledger.

Payloads come from real reports; replies from the real Python widget (``reply_to``).
"""

from __future__ import annotations

import pytest
import torch
from playwright.sync_api import expect

import torchlens_nb as tl
from tests.browser.helpers import reply_to
from tests.nonfinite.nan_models import LogOfNegative, Net, SqrtAtZero, X, line_of
from torchlens_nb import widgets

pytestmark = pytest.mark.browser


@pytest.fixture
def traced():
    trace = tl.trace(Net(LogOfNegative()), X)
    yield trace  # the reports hold it weakly: keep it alive for the expand round trips
    del trace


def test_origin_card_names_op_module_and_line(panel_page, traced) -> None:
    report = tl.debug.nonfinite_origin(traced)
    root = panel_page.mount("nonfinite", widgets.panel_payload(report))
    lead = root.get_by_role("region", name="Origin")
    line = line_of(LogOfNegative.forward, "torch.log(shifted)")
    assert lead.locator("dd").all_inner_texts()[:5] == [
        "nan",
        "log_1 (log)",
        "block",
        f"nonfinite/nan_models.py:{line}",
        "checked finite: the value was born here",
    ]
    assert lead.locator("pre.tln-source").first.inner_text() == (
        "return torch.log(shifted)  # log(0.5 - 1) = nan"
    )
    assert "6 of 6 floating-point outputs" in lead.inner_text()
    assert "3 outputs, 2 of them propagated" in lead.inner_text()
    # a float32 NaN: no autocast, no scaler, so no AMP paragraph (issue 18: shown where it applies)
    expect(lead.locator(".tln-nf-amp")).to_have_count(0)
    origin = root.locator('.tln-lin-item[data-origin="true"]')
    assert origin.locator(".tln-lin-label").inner_text() == "log_1 ◆ origin"
    assert origin.locator(".tln-lin-state").inner_text() == "✖ non-finite"
    expect(root.get_by_role("button", name="Show lineage")).to_be_enabled()
    panel_page.screenshot("nonfinite_origin_light", root)


def test_a_nonfinite_model_input_has_no_source_no_inputs_and_names_its_rows(panel_page) -> None:
    batch = X.clone()
    batch[0, 0] = float("nan")
    report = tl.debug.nonfinite_origin(Net(LogOfNegative()), batch)
    root = panel_page.mount("nonfinite", widgets.panel_payload(report))
    lead = root.get_by_role("region", name="Origin")
    facts = dict(zip(lead.locator("dt").all_inner_texts(), lead.locator("dd").all_inner_texts()))
    assert (facts["op"], facts["source"]) == ("input_1 (input)", "—")
    assert facts["inputs"] == "none: a model input, the values came with the batch"
    assert facts["batch rows"] == f"0 (1 of {X.shape[0]})"


def test_an_origin_op_with_no_input_says_so_instead_of_checked_finite(panel_page) -> None:
    from tests.nonfinite.test_forward_origin import MadeFromNothing

    report = tl.debug.nonfinite_origin(tl.trace(MadeFromNothing(), torch.ones(2)))
    root = panel_page.mount("nonfinite", widgets.panel_payload(report))
    lead = root.get_by_role("region", name="Origin")
    facts = dict(zip(lead.locator("dt").all_inner_texts(), lead.locator("dd").all_inner_texts()))
    assert (facts["op"], facts["inputs"]) == (
        "full_1 (full)",
        "none recorded: the value was made here from no tensor",
    )


def test_expand_asks_python_for_the_next_ring_and_merges_it(panel_page, traced) -> None:
    report = tl.debug.nonfinite_origin(traced)
    widget = widgets.widget_for(report)
    root = panel_page.mount("nonfinite", widgets.panel_payload(report))
    graph = root.locator(".tln-lin-graph")
    assert graph.locator(".tln-lin-label").all_inner_texts() == ["sub_1", "log_1 ◆ origin", "mul_1"]
    expand = root.get_by_role("button", name="Show 1 more input of sub_1")
    expand.focus()
    panel_page.page.keyboard.press("Enter")  # keyboard reachable: a native button
    request = panel_page.sent()[-1]["content"]
    assert (request["type"], request["name"], request["args"]) == (
        "action",
        "expand",
        {"label": "sub_1", "direction": "ancestors"},
    )
    panel_page.kernel_send(*reply_to(widget, request))
    expect(graph.locator(".tln-lin-label")).to_have_text(
        ["linear_1", "sub_1", "log_1 ◆ origin", "mul_1"]
    )
    assert graph.locator(".tln-lin-column h4").all_inner_texts() == [
        "2 steps before",
        "1 step before",
        "log_1",
        "1 step after",
    ]
    expect(root.locator(".tln-lineage .tln-request-status")).to_have_text(
        "Added 1 node around sub_1."
    )
    graph.locator('.tln-lin-item[data-label="linear_1"] .tln-lin-node').click()
    details = root.locator(".tln-lin-detail")
    assert details.locator("h4").inner_text() == "Details of linear_1"
    assert "finite (saved value)" in details.inner_text()
    assert "0.5 / 1.75 / 3" in details.inner_text()  # finite min / mean / max of [[0.5, 3.0]]
    panel_page.screenshot("nonfinite_expanded", root)
    panel_page.cleanup()
    assert panel_page.listener_count() == 0


def test_selecting_a_node_shows_its_statistics_and_source(panel_page, traced) -> None:
    report = tl.debug.nonfinite_origin(traced)
    root = panel_page.mount("nonfinite", widgets.panel_payload(report))
    details = root.locator(".tln-lin-detail")  # the origin is selected first
    assert details.locator("h4").inner_text() == "Details of log_1"
    terms = dict(
        zip(details.locator("dt").all_inner_texts(), details.locator("dd").all_inner_texts())
    )
    assert (terms["NaN"], terms["+Inf"], terms["-Inf"], terms["elements"]) == ("1", "0", "0", "2")
    assert terms["finite min / mean / max"] == "0.6931 / 0.6931 / 0.6931"  # log(2)
    assert details.locator(".tln-source").inner_text().startswith("return torch.log(shifted)")


def test_backward_ledger_marks_the_birth_row(panel_page) -> None:
    trace = tl.trace(Net(SqrtAtZero()), X, capture=tl.options.CaptureOptions(save_grads=True))
    trace.backward(trace.output.sum())
    report = tl.debug.bisect_nan_backward(trace)
    root = panel_page.mount("nonfinite", widgets.panel_payload(report))
    lead = root.get_by_role("region", name="Born in backward")
    assert lead.locator("dd").all_inner_texts()[:4] == [
        "inf",
        "SqrtBackward0 (fire 6)",
        "sqrt_1 (sqrt)",
        "block",
    ]
    birth = root.locator("tr.tln-nf-birth")
    expect(birth).to_have_count(1)
    assert birth.get_attribute("data-index") == "6"
    assert birth.locator("td").nth(1).inner_text() == "birth"
    panel_page.screenshot("backward_ledger", root)


def test_lineage_panel_expands_descendants(panel_page, traced) -> None:
    report = tl.debug.lineage(traced, "sub_1", direction="descendants", max_depth=1)
    widget = widgets.widget_for(report)
    root = panel_page.mount("lineage", widgets.panel_payload(report))
    root.get_by_role("button", name="Show 1 more output of log_1").click()
    panel_page.kernel_send(*reply_to(widget, panel_page.sent()[-1]["content"]))
    expect(root.locator(".tln-lin-label")).to_have_text(["sub_1", "log_1", "mul_1"])
    assert root.locator('[data-origin="true"]').count() == 0  # a plain lineage marks no origin


def test_offline_copy_disables_expanding(panel_page, traced) -> None:
    report = tl.debug.nonfinite_origin(traced)
    root = panel_page.mount("nonfinite", widgets.panel_payload(report), offline=True)
    expect(root.get_by_role("button", name="Show 1 more input of sub_1")).to_be_disabled()
    assert "expanding needs a live kernel" in root.locator(".tln-lineage").inner_text()


def test_dark_theme_screenshot(panel_page, traced) -> None:
    torch.manual_seed(0)
    report = tl.debug.find_nan(Net(LogOfNegative()), X)
    root = panel_page.mount("nonfinite", widgets.panel_payload(report))
    panel_page.set_theme("dark")
    expect(root.get_by_role("region", name="First non-finite output")).to_be_visible()
    panel_page.screenshot("find_nan_dark", root)
