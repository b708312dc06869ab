"""Big inputs display within the documented caps, and the panels stay responsive.

The caps: tables ship at most ``widgets.MAX_TABLE_ROWS`` rows (the rest is paged from Python),
findings at most ``widgets.MAX_FINDINGS``, arrays at most ``widgets.MAX_ARRAY_BYTES``; a lineage
ships at most ``report.lineage.MAX_PAYLOAD_NODES`` nodes; a grad_fn sketch holds at most
``max_nodes`` nodes (default 20,000: the graph panel needs every node of the walk to fold and
unfold it); dead/threshold lists ship ``report.probes.MAX_PAYLOAD_ITEMS`` entries.

Cases: a 5,000-op trace (its find_nan, nonfinite_origin, lineage, threshold, dtype_range, audit
and compare reports), a grad_fn graph of 24,000 nodes (walk truncated at 20,000), a
10,000-row table. The browser tests mount each panel and assert what a user sees (nothing
unreadable, an input event answered after the first draw); how long that takes is measured by
benchmarks/bench_panel_size.py, not asserted here (a shared CI machine once took 26.9 s for a
mount that takes 8 s on a quiet one).
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
import torch
from torch import nn

import torchlens_nb as tl
from tests.browser.reports import big_table_report
from torchlens_nb import widgets
from torchlens_nb.report import Report
from torchlens_nb.report._activations import MAX_PAYLOAD_ITEMS
from torchlens_nb.report._lineage import MAX_PAYLOAD_NODES

pytestmark = pytest.mark.fault("size")

CHAIN_OPS = 5_000
GRAPH_NODES_CAP = 20_000
MAX_PAYLOAD_KB = 512
"""Bound on one report's panel payload (JSON) outside the grad_fn graph: the 5,000-op lineage
measured 216 KB (400 nodes with their source lines), everything else under 150 KB."""
GRAPH_PAYLOAD_KB = 4096
"""Bound for a 20,000-node graph: ~100 bytes a node measured (1.98 MB)."""


class Chain(nn.Module):
    """``CHAIN_OPS`` alternating add / mul ops, then a log of a negative value (the NaN)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i in range(CHAIN_OPS):
            x = x * 1.0001 if i % 2 else x + 0.5
        return torch.log(x - 1e9)


@pytest.fixture(scope="module")
def chain_trace() -> tl.Trace:
    return tl.trace(Chain(), torch.ones(2, 3))


@pytest.fixture(scope="module")
def big_graph_loss() -> torch.Tensor:
    x = torch.ones(3, requires_grad=True)
    y = x
    for _ in range(12_000):  # two nodes (mul, add) per step: 24,000 nodes + the leaf
        y = y * 1.0001 + 0.1
    return y.sum()


CHAIN_REPORTS: dict[str, Callable[[tl.Trace], Report]] = {
    "find_nan": lambda t: t.find_nan(),
    "nonfinite_origin": lambda t: tl.debug.nonfinite_origin(t),
    "lineage": lambda t: tl.debug.lineage(t, t.ops[-1].label),
    "threshold": lambda t: tl.threshold(t, within=(0.0, 1.0)),
    "dtype_range": lambda t: tl.debug.dtype_range(t),
    "audit": lambda t: t.audit(),
    "compare": lambda t: tl.debug.compare(t, t),
}


def payload_bytes(report: Report) -> int:
    return len(json.dumps(widgets.panel_payload(report), allow_nan=False))


def assert_within_caps(report: Report, max_kb: int) -> dict:
    payload = widgets.panel_payload(report)
    assert all(len(t["rows"]) <= widgets.MAX_TABLE_ROWS for t in payload["tables"])
    assert len(payload["findings"]) <= widgets.MAX_FINDINGS
    assert sum(len(a["data"]) for a in widgets.panel_arrays(report).values()) <= (
        widgets.MAX_ARRAY_BYTES
    )
    size = len(json.dumps(payload, allow_nan=False))
    assert size <= max_kb * 1024, f"{report.report_type} payload is {size / 1024:.0f} KB"
    return payload


@pytest.mark.parametrize("build", list(CHAIN_REPORTS.values()), ids=list(CHAIN_REPORTS))
def test_reports_of_a_5000_op_trace_ship_within_the_caps(
    chain_trace: tl.Trace, build: Callable[[tl.Trace], Report]
) -> None:
    assert len(chain_trace) == CHAIN_OPS + 3  # input, the chain, sub, log
    payload = assert_within_caps(build(chain_trace), MAX_PAYLOAD_KB)
    for table in payload["tables"]:
        assert table["total_rows"] >= len(table["rows"])


def test_a_5000_op_lineage_ships_the_nearest_nodes_only(chain_trace: tl.Trace) -> None:
    report = tl.debug.lineage(chain_trace, chain_trace.ops[-1].label)
    assert len(report.nodes) == CHAIN_OPS + 3  # log_1 and every ancestor: sub, chain, input
    assert len(widgets.panel_payload(report)["data"]["nodes"]) == MAX_PAYLOAD_NODES


def test_a_5000_op_threshold_report_ships_a_bounded_violation_list(chain_trace: tl.Trace) -> None:
    data = widgets.panel_payload(tl.threshold(chain_trace, within=(0.0, 1.0)))["data"]
    # every op leaves [0, 1]: the input (1.0 + 0.5 = 1.5 after the first add) onwards
    assert (len(data["violations"]), data["violations_total"]) == (MAX_PAYLOAD_ITEMS, CHAIN_OPS + 2)


def test_a_24000_node_grad_fn_graph_is_cut_at_max_nodes(big_graph_loss: torch.Tensor) -> None:
    sketch = tl.debug.walk_grad_fn(big_graph_loss)
    assert (len(sketch.nodes), sketch.truncated) == (GRAPH_NODES_CAP, True)
    payload = assert_within_caps(sketch, GRAPH_PAYLOAD_KB)
    assert payload["data"]["num_nodes"] == GRAPH_NODES_CAP


def test_a_10000_row_table_ships_one_page() -> None:
    payload = assert_within_caps(big_table_report(10_000), 64)
    assert [(t["total_rows"], len(t["rows"])) for t in payload["tables"]] == [
        (10_000, widgets.MAX_TABLE_ROWS)
    ]


# ----- the browser tier: the panel mounts, reads, and answers an input event -----------------
def mount_and_answer(panel_page, report: Report, payload: dict | None = None):
    """Mount ``report``'s panel; assert nothing on it is unreadable and that, after the first
    draw, a hover is answered (the page is not stuck). Returns the panel root."""
    payload = payload if payload is not None else widgets.panel_payload(report)
    root = panel_page.mount(
        widgets.panel_name(report), payload, arrays=widgets.panel_arrays(report)
    )
    assert root.locator(".tln-unreadable").count() == 0
    panel_page.page.evaluate("() => new Promise((done) => requestAnimationFrame(() => done()))")
    root.locator(".tln-badge").first.hover()
    return root


@pytest.mark.browser
def test_a_5000_op_lineage_panel_renders_and_responds(panel_page, chain_trace: tl.Trace) -> None:
    report = tl.debug.lineage(chain_trace, chain_trace.ops[-1].label)
    root = mount_and_answer(panel_page, report)
    shipped = len(widgets.panel_payload(report)["data"]["nodes"])
    assert shipped <= MAX_PAYLOAD_NODES
    assert root.locator(".tln-lin-item").count() >= 1


def deep_model() -> nn.Module:
    """40 stages of 100 (Linear(4, 4), ReLU) blocks: 5 autograd nodes a block, 20,000 in all
    once the walk stops at max_nodes, in 8,040 nested module groups."""
    torch.manual_seed(0)
    return nn.Sequential(
        *[
            nn.Sequential(*[nn.Sequential(nn.Linear(4, 4), nn.ReLU()) for _ in range(100)])
            for _ in range(40)
        ]
    )


@pytest.mark.browser
def test_a_20000_node_grouped_graph_panel_renders_and_responds(panel_page) -> None:
    model = deep_model()
    sketch = tl.debug.walk_grad_fn(model(torch.ones(2, 4)).sum(), model=model)
    assert (len(sketch.nodes), len(sketch.groups)) == (GRAPH_NODES_CAP, 8_040)
    payload = assert_within_caps(sketch, GRAPH_PAYLOAD_KB)
    root = mount_and_answer(panel_page, sketch, payload)
    assert root.locator(".tln-gg").count() == 1


@pytest.mark.browser
def test_a_20000_node_ungrouped_graph_panel_renders_and_responds(
    panel_page, big_graph_loss: torch.Tensor
) -> None:
    sketch = tl.debug.walk_grad_fn(big_graph_loss)
    mount_and_answer(panel_page, sketch)
    # nothing to fold: the panel refuses the layout in words instead of overflowing dagre
    panel = panel_page.page.locator(".tln-gg")
    assert panel.get_attribute("data-units") == "0"
    assert "even with every module group folded" in panel.inner_text()


@pytest.mark.browser
def test_a_10000_row_table_panel_renders_and_responds(panel_page) -> None:
    report = big_table_report(10_000)
    mount_and_answer(panel_page, report)
    root = panel_page.page.locator(".tln-panel").last
    assert root.locator(".tln-table-status").inner_text() == "Rows 1–25 of 10,000"


def test_a_probe_shape_too_big_to_allocate_is_a_failed_probe_not_an_allocation() -> None:
    """guess_input_shape's input_specs are not bounded per size (an image spec is 4-D): a spec of
    10**12 elements is recorded as not run, and the guesses after it still run."""
    report = tl.debug.guess_input_shape(nn.Linear(8, 2), input_specs=[(10**6, 10**6)])
    first = report.probes[0]
    assert (first.shape, first.is_ok) == ((10**6, 10**6), False)
    assert first.error.startswith("not run: 1000000000000 elements")
    assert report.found
