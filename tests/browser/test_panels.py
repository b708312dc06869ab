"""Fast browser tier: the bundled panel modules in headless chromium with a stand-in model.

Every payload comes from a real report (``widgets.panel_payload(report)``); every reply from
the real Python widget (``reply_to``). Screenshots go to tests/artifacts/.
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.browser.helpers import ARTIFACTS, guarded_page, reply_to
from tests.browser.reports import (
    MapReport,
    awkward_values_report,
    big_table_report,
    traced_ops_report,
)
from torchlens_nb import widgets
from torchlens_nb.report import Report, Table

pytestmark = pytest.mark.browser


@pytest.fixture
def ops_report():
    report, model = traced_ops_report()
    yield report
    del model


def column(root, table: str, index: int) -> list[str]:
    """The text of column ``index`` of the named table, top to bottom."""
    cells = root.locator(f'table[data-table="{table}"] tbody tr > :nth-child({index + 1})')
    return cells.all_inner_texts()


# ----- the findings card -----------------------------------------------------------------------
def test_card_shows_verdict_findings_scope_and_exits(panel_page, ops_report) -> None:
    root = panel_page.mount("table", widgets.panel_payload(ops_report))
    assert root.locator(".tln-badge").text_content() == "▲Status: warn"
    expect(root.get_by_role("heading", name="Sequential (4 ops)")).to_be_visible()
    assert root.locator(".tln-lead").inner_text() == ops_report.lead
    assert root.locator(".tln-findings-group h3").all_inner_texts() == [
        "✖ Critical (1)",
        "▲ Warnings (1)",
        "ℹ Info (1)",
    ]
    assert root.locator(".tln-unavailable li").all_inner_texts() == [
        "backward: no loss was given, so gradients were not checked"
    ]
    assert root.locator(".tln-notes li").all_inner_texts() == [
        "One batch of 2 samples; other batches may differ."
    ]
    expect(root.get_by_role("button", name="Run doctor")).to_be_enabled()
    assert (
        root.locator(".tln-exit-list li").nth(1).text_content() == "Trace again tl.trace(model, x)"
    )
    panel_page.screenshot("panel_card_light", root)


def test_finding_details_expand_to_where_facts_and_remedy(panel_page, ops_report) -> None:
    root = panel_page.mount("table", widgets.panel_payload(ops_report))
    where = ops_report.findings[1].where  # dead_units, pointing at the real relu_1 op
    details = root.locator('details[data-code="dead_units"]')
    assert details.get_attribute("open") is None
    details.locator("summary").click()
    assert details.get_attribute("open") == ""
    body = details.locator(".tln-finding-body")
    assert body.locator("dd").all_inner_texts() == [
        "relu_1",
        "1",
        f"browser/reports.py:{where.line}",
        "0.25",
        "16",
        "nan",
    ]
    assert body.locator(".tln-source").inner_text() == where.code
    assert body.locator(".tln-remedy").inner_text() == (
        "Remedy: Check the init scale of layer 0 or use LeakyReLU."
    )
    panel_page.screenshot("panel_finding_open", root)


# ----- tables ----------------------------------------------------------------------------------
def test_table_sorts_and_filters_in_the_browser(panel_page, ops_report) -> None:
    root = panel_page.mount("table", widgets.panel_payload(ops_report))
    assert column(root, "ops", 0) == ["input_1", "linear_1", "relu_1", "linear_2"]
    header = root.get_by_role("button", name=re.compile("^numel"))
    header.click()  # ascending: 8, 16, 32, 32 (ties keep table order)
    assert column(root, "ops", 0) == ["linear_2", "input_1", "linear_1", "relu_1"]
    assert root.locator('th:has(button[data-column="numel"])').get_attribute("aria-sort") == (
        "ascending"
    )
    header.click()
    assert column(root, "ops", 4) == ["32", "32", "16", "8"]
    root.get_by_role("searchbox", name="Filter rows of ops").fill("LINEAR")
    assert column(root, "ops", 0) == ["linear_1", "linear_2"]
    assert root.locator(".tln-table-status").inner_text() == "Rows 1–2 of 2 matching (4 in all)"
    assert panel_page.sent() == []  # all in the browser: the table is small
    root.evaluate("el => el.addEventListener('tln-row', (e) => { window.lastRow = e.detail; })")
    root.locator('table[data-table="ops"] tbody tr').nth(1).click()
    assert panel_page.page.evaluate("() => window.lastRow") == {
        "table": "ops",
        "index": 3,
        "row": {
            "label": "linear_2",
            "func": "linear",
            "module": "2",
            "shape": "(2, 4)",
            "numel": 8,
            "ratio": 0.25,
        },
    }


def test_big_table_sorts_and_pages_through_the_kernel(panel_page) -> None:
    report = big_table_report(100_000)
    widget = widgets.widget_for(report)
    root = panel_page.mount("table", widgets.panel_payload(report))
    status = root.locator(".tln-table-status")
    assert status.inner_text() == "Rows 1–25 of 100,000"
    root.get_by_role("button", name=re.compile("^value")).click()
    request = panel_page.sent()[-1]["content"]
    assert {
        k: request[k]
        for k in ("type", "table", "sort", "descending", "filter", "offset", "limit", "report")
    } == {
        "type": "page",
        "table": "rows",
        "sort": "value",
        "descending": False,
        "filter": "",
        "offset": 0,
        "limit": 25,
        "report": 0,
    }
    expect(status).to_have_text("Loading rows…")
    panel_page.kernel_send(*reply_to(widget, request))
    expect(status).to_have_text("Rows 1–25 of 100,000")
    assert column(root, "rows", 2)[:3] == ["0", "0", "0"]  # value 0.0 at i = 1000, 2000, ...
    root.get_by_role("button", name="Next page").click()
    second = panel_page.sent()[-1]["content"]
    assert (second["offset"], second["sort"]) == (25, "value")
    panel_page.kernel_send(*reply_to(widget, second))
    expect(status).to_have_text("Rows 26–50 of 100,000")
    root.get_by_role("searchbox", name="Filter rows of rows").fill("op_4242")
    expect(status).to_have_text("Loading rows…")  # after the 250 ms debounce
    third = panel_page.sent()[-1]["content"]
    assert (third["filter"], third["offset"]) == ("op_4242", 0)
    panel_page.kernel_send(*reply_to(widget, third))
    expect(status).to_have_text("Rows 1–11 of 11 matching (100,000 in all)")


def test_page_error_from_python_is_shown(panel_page) -> None:
    report = big_table_report(1_000)
    root = panel_page.mount("table", widgets.panel_payload(report))
    root.get_by_role("button", name="Next page").click()
    request = panel_page.sent()[-1]["content"]
    panel_page.kernel_send(
        {
            "type": "error",
            "request_id": request["request_id"],
            "message": "table 'rows' has no column 'x'",
        }
    )
    expect(root.locator(".tln-table-status")).to_have_text(
        "✖ Could not load rows: table 'rows' has no column 'x'"
    )


# ----- exits: kernel round trip ----------------------------------------------------------------
def test_exit_button_runs_the_action_and_shows_the_followup(panel_page, ops_report) -> None:
    widget = widgets.widget_for(ops_report)
    root = panel_page.mount("table", widgets.panel_payload(ops_report))
    root.get_by_role("button", name="Run doctor").click()
    request = panel_page.sent()[-1]["content"]
    assert request == {
        "type": "action",
        "name": "doctor",
        "args": {},
        "report": 0,
        "request_id": request["request_id"],
    }
    expect(root.get_by_role("button", name="Run doctor")).to_be_disabled()
    panel_page.kernel_send(*reply_to(widget, request))
    followup = root.locator(".tln-followup .tln-panel")
    expect(followup).to_have_count(1)
    assert followup.locator(".tln-subject").inner_text().startswith("torch 2.")
    assert followup.locator('table[data-table="checks"] caption').inner_text() == "checks"
    assert root.locator(".tln-request-status").first.inner_text() == "Shown below."
    # the follow-up's own requests address its report id in Python
    assert followup.get_attribute("data-panel") == "table"
    panel_page.screenshot("panel_followup", root)
    panel_page.cleanup()
    assert (panel_page.listener_count(), panel_page.dom_listener_count()) == (0, 0)


def test_failed_action_shows_the_python_message(panel_page, ops_report) -> None:
    root = panel_page.mount("table", widgets.panel_payload(ops_report))
    button = root.get_by_role("button", name="Run doctor")
    button.click()
    request = panel_page.sent()[-1]["content"]
    reply, _ = reply_to(widgets.widget_for(ops_report), {**request, "name": "missing"})
    panel_page.kernel_send(reply)
    expect(root.locator(".tln-request-status").first).to_have_text(
        "✖ Failed: ReportOptionError: Report has no action 'missing'; available: ['doctor']."
    )
    expect(button).to_be_enabled()


def test_silent_kernel_times_out_with_a_visible_message(panel_page, ops_report) -> None:
    panel_page.page.clock.install()
    root = panel_page.mount("table", widgets.panel_payload(ops_report))
    root.get_by_role("button", name="Run doctor").click()
    panel_page.page.clock.run_for(61_000)
    expect(root.locator(".tln-request-status").first).to_have_text(
        "✖ Failed: no reply from the kernel after 60 s; if a cell is still running, the "
        "request is answered when it ends"
    )


def test_row_action_opens_the_followup_for_the_clicked_row(panel_page) -> None:
    rows = [{"label": f"op_{i}", "size": i} for i in range(3)]
    report = Report(
        subject="ops",
        status="ok",
        lead="three ops",
        tables=(
            Table.from_dicts(
                "ops",
                rows,
                ("label", "size"),
                attrs={"row_action": "detail", "row_arg": "label", "unit": "bytes"},
            ),
        ),
        actions={
            "detail": lambda label: Report(subject=label, status="ok", lead=f"details of {label}")
        },
    )
    root = panel_page.mount("table", widgets.panel_payload(report))
    root.get_by_role("button", name="detail op_2").click()
    request = panel_page.sent()[-1]["content"]
    assert (request["name"], request["args"]) == ("detail", {"label": "op_2"})
    panel_page.kernel_send(*reply_to(widgets.widget_for(report), request))
    followup = root.locator(".tln-followup .tln-panel")
    expect(followup.locator(".tln-lead")).to_have_text("details of op_2")
    assert followup.get_attribute("data-panel") == "report"  # its module came with the reply
    root.locator(".tln-table-facts summary").click()
    assert root.locator(".tln-table-facts dd").all_inner_texts() == ["bytes"]


# ----- robustness, theme, cleanup --------------------------------------------------------------
def test_awkward_numbers_render_as_python_spells_them(panel_page) -> None:
    root = panel_page.mount("table", widgets.panel_payload(awkward_values_report()))
    assert column(root, "values", 1) == [
        "nan",
        "inf",
        "-inf",
        "-0",
        "1.00e308",
        "4.94e-324",
        "nan",
        "3",
        "-0",
        "1.5",
    ]
    root.locator("details.tln-finding summary").click()
    assert root.locator(".tln-finding-body dd").all_inner_texts() == [
        "nan",
        "inf",
        "-0",
        "nan",
        "[inf]",
    ]


def test_unreadable_payload_shows_the_card(panel_page, ops_report) -> None:
    payload = {**widgets.panel_payload(ops_report), "schema": "torchlens_nb.report/99"}
    root = panel_page.mount("report", payload)
    expect(root.get_by_role("alert")).to_contain_text(
        'This panel could not read its report (schema "torchlens_nb.report/99" is not '
        "torchlens_nb.report/1). The text card follows."
    )
    assert root.locator(".tln-card-text").inner_text() == ops_report.card()


def test_arrays_reach_the_panel_as_binary_views(panel_page) -> None:
    report = MapReport(subject="map", status="ok", lead="a 4x4 map")
    panel_page.mount("report", widgets.panel_payload(report), arrays=widgets.panel_arrays(report))
    # what ctx.arrays decodes from: a DataView per array, as anywidget delivers buffers
    assert panel_page.page.evaluate("""() => {
        const spec = harness.model.get("arrays").map;
        const values = new Float32Array(spec.data.buffer, spec.data.byteOffset, 16);
        return [spec.data instanceof DataView, spec.shape, values[5]];
    }""") == [True, [4, 4], 5.0]


def test_python_push_redraws_the_panel(panel_page, ops_report) -> None:
    root = panel_page.mount(
        "report", widgets.panel_payload(Report(subject="before", status="ok", lead="l"))
    )
    panel_page.kernel_set("payload", widgets.panel_payload(ops_report))
    expect(root.locator(".tln-subject")).to_have_text("Sequential (4 ops)")
    assert panel_page.listener_count() == 3  # change:payload, change:arrays, msg:custom


def test_dark_theme_restyles_the_panel(panel_page, ops_report) -> None:
    root = panel_page.mount("table", widgets.panel_payload(ops_report))
    colour = lambda: root.evaluate("el => getComputedStyle(el).color")  # noqa: E731
    background = lambda: root.evaluate("el => getComputedStyle(el).backgroundColor")  # noqa: E731
    assert (colour(), background()) == ("rgb(31, 35, 40)", "rgb(255, 255, 255)")
    panel_page.set_theme("dark")
    assert (colour(), background()) == ("rgb(230, 237, 243)", "rgb(13, 17, 23)")
    panel_page.screenshot("panel_card_dark", root)


def test_keyboard_reaches_controls_with_a_visible_focus_ring(panel_page, ops_report) -> None:
    root = panel_page.mount("table", widgets.panel_payload(ops_report))
    button = root.get_by_role("button", name="Run doctor")
    button.focus()
    panel_page.page.keyboard.press("Shift+Tab")
    panel_page.page.keyboard.press("Tab")  # keyboard focus: :focus-visible applies
    assert button.evaluate("el => getComputedStyle(el).outlineStyle") == "solid"
    panel_page.page.keyboard.press("Enter")
    assert panel_page.sent()[-1]["content"]["name"] == "doctor"


def test_cleanup_removes_every_listener(panel_page, ops_report) -> None:
    root = panel_page.mount("table", widgets.panel_payload(ops_report))
    root.get_by_role("searchbox", name="Filter rows of ops").fill("relu")
    assert panel_page.listener_count() == 3
    assert panel_page.dom_listener_count() > 10
    panel_page.cleanup()
    assert (panel_page.listener_count(), panel_page.dom_listener_count()) == (0, 0)


# ----- the offline HTML file -------------------------------------------------------------------
def test_offline_html_renders_the_same_panel_without_a_kernel(
    page, base_url, out_dir, ops_report
) -> None:
    ops_report.to_html(str(out_dir / "ops.html"))
    page.goto(f"{base_url}/out/ops.html")
    page.wait_for_selector('#tln-root[data-rendered="1"]')
    root = page.locator("#tln-root")
    assert root.locator(".tln-subject").inner_text() == "Sequential (4 ops)"
    expect(root.get_by_role("button", name="Run doctor")).to_be_disabled()
    assert root.get_by_test_id("offline-note").inner_text() == (
        "ℹ Offline copy: the buttons need a live kernel; run the code shown in a notebook."
    )
    root.get_by_role("button", name=re.compile("^label")).click()
    assert column(root, "ops", 0)[0] == "input_1"
    page.screenshot(path=str(ARTIFACTS / "offline_ops.png"), full_page=True)
    page.emulate_media(color_scheme="dark")  # no host theme: the OS preference decides
    assert root.evaluate("el => getComputedStyle(el).color") == ("rgb(230, 237, 243)")
    page.screenshot(path=str(ARTIFACTS / "offline_ops_dark.png"), full_page=True)


def test_offline_big_table_says_it_sorts_only_shipped_rows(page, base_url, out_dir) -> None:
    big_table_report(1_000).to_html(str(out_dir / "big.html"))
    page.goto(f"{base_url}/out/big.html")
    page.wait_for_selector('#tln-root[data-rendered="1"]')
    assert page.get_by_test_id("offline-note").inner_text() == (
        "ℹ Offline copy: showing the first 200 of 1,000 rows; sorting and filtering cover "
        "these rows only."
    )
    assert (
        page.locator(".tln-table-status").inner_text() == "Rows 1–25 of 200 matching (1,000 in all)"
    )


def test_the_offline_guard_fails_a_test_that_reaches_the_network(browser, base_url) -> None:
    with pytest.raises(
        AssertionError, match=r"tried to reach the network: \['http://example.com/x'\]"
    ):
        with guarded_page(browser, {"width": 400, "height": 300}) as pg:
            pg.goto(f"{base_url}/harness/harness.html")
            pg.evaluate("() => fetch('http://example.com/x').catch(() => null)")
