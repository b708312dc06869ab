"""Bad inputs to the report views and to every panel's request channel: report methods refuse
with ``ReportOptionError``; a malformed or impossible panel request is answered with an
``{"type": "error"}`` reply naming the problem, and never raises into the comm.
"""

from __future__ import annotations

import math
import re
from typing import Any

import pytest
import torch
from torch import nn

import torchlens_nb as tl
from torchlens_nb import widgets
from torchlens_nb.errors import ReportOptionError
from torchlens_nb.report import Finding, Report, Table

pytestmark = pytest.mark.fault("bad_input")


@pytest.fixture(scope="module")
def traced() -> tl.Trace:
    torch.manual_seed(0)
    return tl.trace(nn.Sequential(nn.Linear(8, 4), nn.ReLU()), torch.randn(2, 8))


REPORT_CALLS = [
    ("card-zero", lambda r: r.card(0), r"max_findings must be >= 1, got 0"),
    ("card-string", lambda r: r.card("3"), r"max_findings must be >= 1, got '3'; pass an int"),
    ("card-nan", lambda r: r.card(math.nan), r"got nan"),
    (
        "table-missing",
        lambda r: r.table("nope"),
        r"no table named 'nope'; this report has "
        r"\['hot_path'\]",
    ),
    ("action-missing", lambda r: r.run_action("explode"), r"has no action 'explode'; available"),
]


@pytest.mark.parametrize(
    "call, match", [c[1:] for c in REPORT_CALLS], ids=[c[0] for c in REPORT_CALLS]
)
def test_report_views_refuse_bad_arguments(traced: tl.Trace, call: Any, match: str) -> None:
    with pytest.raises(ReportOptionError, match=match):
        call(tl.debug.hot_path(traced))


def test_reports_without_tables_say_so() -> None:
    bare = Report(subject="s", status="clean", lead="nothing")
    for call in (bare.table, bare.to_pandas):
        with pytest.raises(ReportOptionError, match="Report has no table; read its findings"):
            call()


@pytest.mark.parametrize("value", [None, "report", 3], ids=["none", "string", "int"])
def test_live_panel_refuses_what_is_not_a_report(value: Any) -> None:
    with pytest.raises(ReportOptionError, match=r"live_panel needs a tl\.report\.Report, got "):
        tl.report.live_panel(value)


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: Finding("code", "fatal", "message"), r"severity must be one of .* got 'fatal'"),
        (lambda: Table("t", ("a",), ((1, 2),)), r"table 't' row 0 has 2 values for 1 columns"),
    ],
    ids=["finding-severity", "table-row-width"],
)
def test_report_parts_refuse_malformed_data(make: Any, match: str) -> None:
    with pytest.raises(ReportOptionError, match=match):
        make()


REQUESTS: list[tuple[str, Any, str]] = [
    ("not-a-dict", None, r"a panel request is a dict with an int request_id, got None"),
    ("no-request-id", {"type": "page"}, r"with an int request_id"),
    ("string-request-id", {"request_id": "1", "type": "page"}, r"with an int request_id"),
    (
        "unknown-type",
        {"request_id": 1, "type": "delete"},
        r"unknown panel request type 'delete'; expected 'action' or 'page'",
    ),
    (
        "action-name-int",
        {"request_id": 1, "type": "action", "name": 3, "args": {}},
        r"an action request needs a str name and a dict args, got 3",
    ),
    (
        "action-args-list",
        {"request_id": 1, "type": "action", "name": "lineage", "args": [1]},
        r"needs a str name and a dict args",
    ),
    (
        "action-missing",
        {"request_id": 1, "type": "action", "name": "explode", "args": {}},
        r"ReportOptionError: .* has no action 'explode'",
    ),
    (
        "action-missing-label",
        {"request_id": 1, "type": "action", "name": "expand", "args": {"label": "conv2d_1"}},
        r"OpNotFoundError: no op labelled 'conv2d_1'",
    ),
    (
        "forgotten-follow-up",
        {"request_id": 1, "type": "action", "report": 99, "name": "lineage"},
        r"follow-up 99 is no longer held by this widget",
    ),
    (
        "page-on-a-report-without-tables",
        {"request_id": 1, "type": "page", "table": "ops"},
        r"LineageReport has no table",
    ),
    (
        "page-missing-column",
        {"request_id": 1, "type": "page", "table": "hot_path", "sort": "nope"},
        r"table 'hot_path' has no column 'nope'",
    ),
    (
        "page-negative-offset",
        {"request_id": 1, "type": "page", "table": "hot_path", "offset": -5},
        r"page offset must be an int >= 0, got -5",
    ),
    (
        "page-huge-limit",
        {"request_id": 1, "type": "page", "table": "hot_path", "limit": 10**9},
        r"page limit must be an int in 1\.\.500",
    ),
    (
        "page-string-offset",
        {"request_id": 1, "type": "page", "table": "hot_path", "offset": "a"},
        r"got 'a'",
    ),
]


@pytest.mark.parametrize("content, match", [c[1:] for c in REQUESTS], ids=[c[0] for c in REQUESTS])
def test_bad_panel_requests_get_error_replies(traced: tl.Trace, content: Any, match: str) -> None:
    # a lineage panel (it has the "expand" action, no table) and a hot_path table panel
    for report in (tl.debug.lineage(traced, "relu_1"), tl.debug.hot_path(traced)):
        widget = widgets.widget_for(report)
        reply, buffers = widget.handle_message(content)
        assert (reply["type"], buffers) == ("error", [])
        if re.search(match, reply["message"]):
            break
    else:
        pytest.fail(f"no panel answered {content!r} with {match!r}: {reply['message']}")
    assert widget.report is report  # the panel still shows the same report
