"""The rich display of reports and the panel widgets, from Python (no browser; see tests/browser).

Covers: the mimebundle (widget view + card + static HTML), the fallback when a panel cannot be
built (one warning, then the card), stable reprs, the request handler (actions, errors, table
pages from pandas), payload bounds, binary arrays, JSON-safety of awkward values, and the
offline HTML file.
"""

from __future__ import annotations

import ast
import fnmatch
import json
import math
import pathlib
import warnings
from dataclasses import dataclass

import numpy as np
import pytest
import tomllib

import torchlens_nb as tl
from tests.browser.reports import awkward_values_report, big_table_report, traced_ops_report
from torchlens_nb import widgets
from torchlens_nb.errors import PanelError, ReportOptionError, TorchlensNbWarning
from torchlens_nb.report import Finding, Report, Table, _display

ROOT = pathlib.Path(__file__).resolve().parents[1]
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
pytestmark = pytest.mark.skipif(
    not (widgets.STATIC_DIR / "report.js").is_file(),
    reason="panel bundle not built: run `make bundle`",
)


@pytest.fixture
def ops_report():
    report, model = traced_ops_report()
    yield report
    del model  # the report's doctor action holds it by weak reference


@pytest.fixture
def fresh_warnings(monkeypatch):
    """Forget which report types already warned (the once-per-process memory)."""
    monkeypatch.setattr(_display, "_warned_report_types", set())


@dataclass(frozen=True, kw_only=True)
class UnbuiltReport(Report):
    report_type = "unbuilt"


# ----- display ---------------------------------------------------------------------------------
def test_mimebundle_is_widget_view_plus_card_and_static_html(ops_report) -> None:
    bundle = ops_report._repr_mimebundle_()
    assert set(bundle) == {"text/plain", "text/html", WIDGET_MIME}
    assert bundle["text/plain"] == ops_report.card()
    assert bundle["text/html"].startswith('<div class="tln-static-card" data-report-type="report">')
    assert "relu_1 zeroes part of its input" in bundle["text/html"]
    assert len(bundle[WIDGET_MIME]["model_id"]) == 32  # a live comm id


@pytest.fixture
def kernel_shell(monkeypatch):
    """An IPython shell that passes for a kernel's, and every display() call it makes."""
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    monkeypatch.setattr(shell, "kernel", object(), raising=False)
    shown: list[object] = []
    monkeypatch.setattr("IPython.display.display", lambda obj, **kwargs: shown.append(obj))
    yield shell, shown
    InteractiveShell.clear_instance()


def test_a_report_a_live_panel_shows_displays_again_only_in_a_later_cell(
    ops_report, kernel_shell
) -> None:
    from torchlens_nb.recipes._live import PanelSink

    shell, shown = kernel_shell
    PanelSink()(ops_report)  # the recipe's final push: the live panel shows the report
    assert [type(obj).__name__ for obj in shown] == ["TablePanel"]
    ops_report._ipython_display_()  # `t` as the same cell's last expression: already on screen
    assert len(shown) == 1
    shell.events.trigger("post_run_cell", None)  # the cell ends
    ops_report._ipython_display_()  # `t` in the next cell
    assert [type(obj).__name__ for obj in shown] == ["TablePanel", "TablePanel"]
    assert shown[1] is not shown[0]


def test_panel_that_fails_warns_once_and_shows_the_card(monkeypatch, fresh_warnings) -> None:
    monkeypatch.setitem(widgets.PANELS, "unbuilt", "no_such_panel")
    report = UnbuiltReport(subject="x", status="ok", lead="fine")
    with pytest.warns(TorchlensNbWarning, match=r"'unbuilt' panel could not be built \(PanelError"):
        first = report._repr_mimebundle_()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a second warning would raise here
        second = report._repr_mimebundle_()
    assert (
        first == second == {"text/plain": report.card(), "text/html": _display.static_html(report)}
    )


@pytest.mark.parametrize(
    ("tables", "registered", "panel"),
    [
        ((), None, "report"),
        ((Table("t", ("a",), ((1,),)),), None, "table"),
        ((), "my_panel", "my_panel"),
    ],
    ids=["no-table-card", "tables-table-panel", "registered-wins"],
)
def test_panel_name_follows_the_registry(monkeypatch, tables, registered, panel) -> None:
    if registered:
        monkeypatch.setitem(widgets.PANELS, "unbuilt", registered)
    report = UnbuiltReport(subject="x", status="ok", lead="l", tables=tables)
    assert widgets.panel_name(report) == panel


def test_doctor_renders_with_the_table_panel() -> None:
    widget = widgets.widget_for(tl.report.doctor())
    assert (type(widget).__name__, widget.panel) == ("TablePanel", "table")
    assert widget.payload["report_type"] == "doctor"


def test_register_panel_rejects_a_path(monkeypatch) -> None:
    monkeypatch.setattr(widgets._registry, "PANELS", dict(widgets.PANELS))
    with pytest.raises(PanelError, match="plain identifier"):
        widgets.register_panel("x", "../evil")


def test_every_registered_panel_has_a_source_module() -> None:
    for panel in {*widgets.PANELS.values(), widgets.REPORT_PANEL, widgets.TABLE_PANEL}:
        assert (ROOT / "js" / "panels" / f"{panel}.js").is_file(), panel


def test_widget_repr_is_stable(ops_report) -> None:
    first, second = widgets.widget_for(ops_report), widgets.widget_for(ops_report)
    assert (
        repr(first)
        == repr(second)
        == "<TablePanel panel='table' report_type='report' status='warn'>"
    )


# ----- requests from the panel -----------------------------------------------------------------
def test_action_reply_carries_the_followup_and_its_panel(ops_report) -> None:
    widget = widgets.widget_for(ops_report)
    reply, buffers = widget.handle_message(
        {"type": "action", "name": "doctor", "args": {}, "request_id": 7, "report": 0}
    )
    assert (reply["type"], reply["request_id"], reply["report"], reply["child"]) == (
        "reply",
        7,
        0,
        1,
    )
    assert (reply["panel"], reply["payload"]["report_type"]) == ("table", "doctor")
    assert "esm" not in reply  # same panel as the asking report: the browser has it already
    assert (reply["arrays"], buffers) == ({}, [])
    # the follow-up answers its own requests (here: a page of its table)
    page, _ = widget.handle_message(
        {"type": "page", "table": "checks", "sort": "key", "request_id": 8, "report": 1, "limit": 2}
    )
    assert page["page"]["rows"][0][0] == "capture_scope"  # sorted by key: the first row


def test_action_to_another_panel_ships_that_panel_module() -> None:
    report = Report(
        subject="s",
        status="ok",
        lead="l",
        tables=(Table("t", ("a",), ()),),
        actions={"card": lambda: Report(subject="c", status="ok", lead="no table")},
    )
    widget = widgets.widget_for(report)
    reply, _ = widget.handle_message(
        {"type": "action", "name": "card", "args": {}, "request_id": 1}
    )
    assert (widget.panel, reply["panel"]) == ("table", "report")
    assert reply["esm"] == (widgets.STATIC_DIR / "report.js").read_text()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            {"type": "action", "name": "nope", "args": {}, "request_id": 3},
            "ReportOptionError: Report has no action 'nope'; available: ['doctor'].",
        ),
        (
            {"type": "action", "name": "doctor", "args": {"depth": 2}, "request_id": 3},
            "ReportOptionError: action 'doctor' does not take ['depth']: got an unexpected keyword "
            "argument 'depth'; pass "
            "the arguments its exit lists, e.g. {}.",
        ),
        (
            {"type": "action", "name": "doctor", "args": {}, "request_id": 3, "report": 9},
            "follow-up 9 is no longer held by this widget (it keeps 64); re-run the cell to get a "
            "fresh panel.",
        ),
        (
            {"type": "page", "table": "ops", "sort": "nope", "request_id": 3},
            "table 'ops' has no column 'nope'; columns: ['label', 'func', 'module', 'shape', 'numel', "
            "'ratio'].",
        ),
        (
            {"type": "page", "table": "ops", "limit": 5000, "request_id": 3},
            "page limit must be an int in 1..500, got 5000.",
        ),
        (
            {"type": "frobnicate", "request_id": 3},
            "unknown panel request type 'frobnicate'; expected 'action' or 'page'.",
        ),
    ],
    ids=["unknown-action", "bad-args", "unknown-report", "bad-sort", "big-limit", "bad-type"],
)
def test_failed_requests_reply_with_a_readable_error(ops_report, content, message) -> None:
    reply, buffers = widgets.widget_for(ops_report).handle_message(content)
    assert reply == {
        "type": "error",
        "request_id": 3,
        "report": content.get("report", 0),
        "message": message,
    }
    assert buffers == []


def test_request_without_id_is_answered_not_raised(ops_report) -> None:
    reply, _ = widgets.widget_for(ops_report).handle_message({"type": "action"})
    assert (reply["type"], reply["request_id"]) == ("error", None)
    assert reply["message"].startswith("a panel request is a dict with an int request_id")


def test_custom_message_is_answered_through_the_comm(ops_report, monkeypatch) -> None:
    widget = widgets.widget_for(ops_report)
    sent = []
    monkeypatch.setattr(widget, "send", lambda content, buffers=None: sent.append(content))
    widget._handle_custom_msg({"type": "action", "name": "doctor", "args": {}, "request_id": 1}, [])
    assert [(m["type"], m["request_id"], m["payload"]["report_type"]) for m in sent] == [
        ("reply", 1, "doctor")
    ]


def test_update_shows_a_new_report_and_forgets_old_followups(ops_report) -> None:
    widget = widgets.widget_for(ops_report)
    widget.handle_message({"type": "action", "name": "doctor", "args": {}, "request_id": 1})
    widget.update(big_table_report(300))
    assert (widget.payload["subject"], widget.payload["tables"][0]["total_rows"]) == (
        "300 rows",
        300,
    )
    reply, _ = widget.handle_message(
        {"type": "page", "table": "rows", "request_id": 2, "report": 1}
    )
    assert reply["message"].startswith("follow-up 1 is no longer held")


def test_followups_beyond_the_cap_drop_the_oldest(ops_report, monkeypatch) -> None:
    monkeypatch.setattr(widgets._widget, "MAX_FOLLOWUPS", 2)
    widget = widgets.widget_for(ops_report)
    for request_id in range(3):
        widget.handle_message(
            {"type": "action", "name": "doctor", "args": {}, "request_id": request_id}
        )
    assert sorted(widget._reports) == [0, 2, 3]  # follow-up 1 dropped, the root kept


# ----- tables: payload bound and pandas pages --------------------------------------------------
@pytest.fixture(scope="module")
def big_report():
    return big_table_report(100_000)


def test_payload_ships_200_rows_and_the_true_count(big_report) -> None:
    payload = widgets.panel_payload(big_report)
    table = payload["tables"][0]
    assert (len(table["rows"]), table["total_rows"]) == (200, 100_000)
    assert table["rows"][1] == ["op_1", 1, 91.9, False]  # 7919 % 1000 / 10
    assert len(json.dumps(payload, allow_nan=False)) < 20_000


def test_page_sorts_descending_with_nan_last(big_report) -> None:
    pager = widgets.TablePager(big_report.table())
    page = pager.page(sort="value", descending=True, limit=3)
    # value = (i * 7919 % 1000) / 10 peaks at 99.9; ties keep table order (stable)
    assert [row[2] for row in page["rows"]] == [99.9, 99.9, 99.9]
    assert page["rows"][0][1] < page["rows"][1][1] < page["rows"][2][1]
    last = pager.page(sort="value", descending=True, offset=99_998, limit=5)
    assert [row[2] for row in last["rows"]] == [{"$float": "nan"}] * 2  # NaN last, JSON-safe
    assert (last["matched_rows"], last["total_rows"]) == (100_000, 100_000)


def test_page_filters_case_insensitively_before_paging(big_report) -> None:
    page = widgets.TablePager(big_report.table()).page(
        filter="OP_9999", sort="index", descending=True, limit=2
    )
    # matches op_9999 and op_99990..op_99999: 11 rows
    assert page["matched_rows"] == 11
    assert [row[0] for row in page["rows"]] == ["op_99999", "op_99998"]


def test_page_of_mixed_kinds_orders_numbers_then_booleans_then_text() -> None:
    table = Table("mixed", ("v",), ((None,), ("b",), (2,), (True,), (math.nan,), (1.5,), ("a",)))
    rows = widgets.TablePager(table).page(sort="v").get("rows")
    assert rows == [[1.5], [2], [True], ["a"], ["b"], [None], [{"$float": "nan"}]]


def test_findings_above_the_cap_are_counted() -> None:
    findings = [Finding(f"f{i}", "info", "m") for i in range(widgets.MAX_FINDINGS + 5)]
    payload = widgets.panel_payload(Report(subject="s", status="ok", lead="l", findings=findings))
    assert (len(payload["findings"]), payload["findings_total"]) == (
        widgets.MAX_FINDINGS,
        widgets.MAX_FINDINGS + 5,
    )


# ----- arrays as binary buffers ---------------------------------------------------------------
@pytest.mark.parametrize(
    ("dtype", "values", "data"),
    [
        ("float32", [[1.0, -2.0]], np.array([[1.0, -2.0]], "<f4").tobytes()),
        ("float16", [0.5, math.inf], np.array([0.5, math.inf], "<f2").tobytes()),
        ("uint8", [0, 255, 7], bytes([0, 255, 7])),
    ],
    ids=["float32", "float16", "uint8"],
)
def test_encode_array_gives_little_endian_bytes_and_shape(dtype, values, data) -> None:
    spec = widgets.encode_array(values, dtype)
    assert spec == {"dtype": dtype, "shape": list(np.shape(values)), "data": data}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ([1.0], "float64"),
            r"panel arrays are \('float32', 'float16', 'uint8'\), got dtype 'float64'",
        ),
        ((b"\0" * 6, "float32"), r"encode_array\(bytes\) needs shape=..."),
        ((b"\0" * 6, "float32", (2,)), r"6 bytes for shape \(2,\) float32 \(expected 8\)"),
    ],
    ids=["dtype", "bytes-no-shape", "bytes-wrong-size"],
)
def test_encode_array_refuses_what_a_panel_cannot_decode(args, message) -> None:
    with pytest.raises(ReportOptionError, match=message):
        widgets.encode_array(*args)


@dataclass(frozen=True, kw_only=True)
class HeatmapReport(Report):
    report_type = "heatmap"
    side: int = 4

    def panel_arrays(self) -> dict[str, object]:
        return {
            "map": np.arange(self.side * self.side, dtype=np.float32).reshape(self.side, self.side)
        }


def test_arrays_travel_as_buffers_not_json() -> None:
    widget = widgets.widget_for(HeatmapReport(subject="s", status="ok", lead="l"))
    state = widget.get_state()
    assert state["arrays"]["map"]["data"] == np.arange(16, dtype="<f4").tobytes()
    from ipywidgets.widgets.widget import _remove_buffers

    _, paths, buffers = _remove_buffers(state)
    assert paths == [["arrays", "map", "data"]] and len(buffers[0]) == 64


def test_arrays_above_the_cap_warn_and_downsample_by_block_means(monkeypatch) -> None:
    monkeypatch.setattr(widgets._payload, "MAX_ARRAY_BYTES", 16)  # 4 float32 values
    with pytest.warns(TorchlensNbWarning, match=r"map \(4, 4\) -> \(2, 2\)"):
        arrays = widgets.panel_arrays(HeatmapReport(subject="s", status="ok", lead="l"))
    spec = arrays["map"]
    # blocks of [[0,1],[4,5]] -> 2.5, [[2,3],[6,7]] -> 4.5, ...
    values = np.frombuffer(spec["data"], "<f4").reshape(spec["shape"])
    assert values.tolist() == [[2.5, 4.5], [10.5, 12.5]]
    assert spec["downsampled_from"] == [4, 4]


def test_action_reply_sends_arrays_as_message_buffers(ops_report) -> None:
    report = Report(
        subject="s",
        status="ok",
        lead="l",
        actions={"map": lambda: HeatmapReport(subject="m", status="ok", lead="l", side=2)},
    )
    reply, buffers = widgets.widget_for(report).handle_message(
        {"type": "action", "name": "map", "args": {}, "request_id": 1}
    )
    assert reply["arrays"] == {"map": {"dtype": "float32", "shape": [2, 2], "buffer": 0}}
    assert buffers == [np.arange(4, dtype="<f4").tobytes()]


# ----- JSON safety ----------------------------------------------------------------------------
def test_awkward_values_give_strict_json_everywhere() -> None:
    report = awkward_values_report()
    payload = widgets.panel_payload(report)
    text = json.dumps(payload, allow_nan=False)  # no NaN/Infinity literals
    back = json.loads(text)
    assert [row[1] for row in back["tables"][0]["rows"]] == [
        {"$float": "nan"},
        {"$float": "inf"},
        {"$float": "-inf"},
        -0.0,
        1e308,
        5e-324,
        {"$float": "nan"},
        3,
        -0.0,
        1.5,
    ]
    assert math.copysign(1, back["tables"][0]["rows"][3][1]) == -1  # -0.0 keeps its sign
    assert back["findings"][0]["fields"] == {
        "nan": {"$float": "nan"},
        "inf": {"$float": "inf"},
        "neg_zero": -0.0,
        "np": {"$float": "nan"},
        "t": [{"$float": "inf"}],
    }
    assert back["data"] == {
        "tensor": [1.0, {"$float": "nan"}, {"$float": "-inf"}],
        "scalar": 2.5,
        "np": {"$float": "inf"},
        "count": 7,
    }
    page = widgets.TablePager(report.table()).page(sort="value")
    json.dumps(page, allow_nan=False)
    assert page["rows"][0] == ["v2", {"$float": "-inf"}]


# ----- offline HTML ---------------------------------------------------------------------------
def test_to_html_is_one_self_contained_file(ops_report, tmp_path) -> None:
    path = tmp_path / "report.html"
    text = ops_report.to_html(str(path))
    assert path.read_text(encoding="utf-8") == text
    assert text.count("<script") == 2 and text.count("</script>") == 2  # data + boot only
    assert "src=" not in text and text.count("<link") == 1  # nothing loaded from anywhere
    assert '<link rel="icon" href="data:,">' in text
    data = text.split('<script type="application/json" id="tln-offline">')[1].split("</script>")[0]
    offline = json.loads(data)
    assert offline["panel"] == "table"
    assert offline["payload"] == json.loads(json.dumps(widgets.panel_payload(ops_report)))
    assert offline["esm"] == (widgets.STATIC_DIR / "table.js").read_text()
    assert '<div id="tln-fallback" hidden><div class="tln-static-card"' in text


def test_to_html_cannot_be_closed_by_report_text(tmp_path) -> None:
    report = Report(subject="</script><script>alert(1)</script>", status="ok", lead="<b>x</b>")
    text = report.to_html()
    assert text.count("</script>") == 2
    assert "<script>alert(1)" not in text


# ----- packaging and layering -----------------------------------------------------------------
def test_every_bundle_file_is_a_build_artifact() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = config["tool"]["hatch"]["build"]["artifacts"]  # git-ignored, shipped anyway
    built = [p.relative_to(ROOT).as_posix() for p in widgets.STATIC_DIR.iterdir()]
    assert {"report.js", "table.js", "theme.css", "_offline.js"} <= {
        p.split("/")[-1] for p in built
    }
    assert all(any(fnmatch.fnmatch(p, pat) for pat in patterns) for p in built), built


def test_widgets_never_import_torch() -> None:
    for path in (ROOT / "torchlens_nb" / "widgets").glob("*.py"):
        tree = ast.parse(path.read_text())
        names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
        names += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
        assert not [n for n in names if n.split(".")[0] == "torch"], path.name


def test_to_pandas_names_a_notebook_cell_not_the_kernels_temp_file() -> None:
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    try:
        shell.run_cell(
            "import torch\nfrom torch import nn\nimport torchlens_nb as tl\n"
            "class Dead(nn.Module):\n"
            "    def forward(self, x):\n"
            "        return torch.relu(x - 10)\n",
            store_history=True,
        )
        shell.run_cell(
            "traces = [tl.trace(Dead(), torch.rand(4, 3), save=tl.func('relu')) for _ in '12']\n"
            "frame = tl.dead(traces).to_pandas()",
            store_history=True,
        )
        frame = shell.user_ns["frame"]
    finally:
        InteractiveShell.clear_instance()
    assert list(frame["file"]) == ["Cell In[1]"]  # not /tmp/ipykernel_.../12345.py
    assert list(frame["line"]) == [6]
