"""The four report types as plain data: strict JSON with NaN/Inf, bounded cards, the figure,
the panel's binary columns, and the lineage follow-up of a row."""

from __future__ import annotations

import gc
import json
import math
import weakref

import pytest
import torch
from torch import nn

import torchlens_nb as tl
from tests.gradients.test_grad_health import RootOfZero
from torchlens_nb import widgets
from torchlens_nb.options import CaptureOptions
from torchlens_nb.report._base import CARD_LINE_MAX_CHARS, MAX_CARD_FINDINGS


class Poisoned(nn.Module):
    """Finite input; forward makes -inf (log 0), inf (1/0) and NaN; backward makes inf and NaN."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc(x)
        return torch.cat([torch.log(y * 0), 1 / (y * 0), torch.sqrt(y * 0)], dim=1)


@pytest.fixture
def poisoned_trace() -> tl.Trace:
    torch.manual_seed(0)
    trace = tl.trace(Poisoned(), torch.ones(2, 3), capture=CaptureOptions(save_grads=True))
    trace.backward(trace.output[:, 6:].sum())  # only the sqrt part: finite loss
    return trace


def every_report(trace) -> list[tl.report.Report]:
    return [
        tl.debug.grad_health(trace),
        tl.debug.dead_neurons(trace),
        tl.debug.dtype_range(trace),
        trace.audit(),
    ]


def test_strict_json_with_nan_and_inf_inside(poisoned_trace) -> None:
    encoded = {}
    for report in every_report(poisoned_trace):
        text = json.dumps(report.to_dict(), allow_nan=False)
        json.dumps(widgets.panel_payload(report), allow_nan=False)
        encoded[report.report_type] = '{"$float": "' in text
    # dead_neurons and dtype_range hold counts and finite maxima; grad_health (and the audit
    # that carries its findings) holds the NaN and Inf gradient norms themselves
    assert encoded == {
        "grad_health": True,
        "dead_neurons": False,
        "dtype_range": False,
        "health": True,
    }


def test_cards_stay_bounded(poisoned_trace) -> None:
    for report in every_report(poisoned_trace):
        lines = report.card().splitlines()
        findings = [
            line for line in lines if line.startswith(("  CRITICAL", "  WARNING", "  INFO"))
        ]
        assert len(findings) <= MAX_CARD_FINDINGS
        assert max(len(line) for line in lines) <= CARD_LINE_MAX_CHARS
        if len(report.findings) > MAX_CARD_FINDINGS:
            rest = len(report.findings) - MAX_CARD_FINDINGS
            assert f"  ... and {rest} more finding{'s' if rest != 1 else ''}" in lines


def test_figure_is_the_profile_with_both_thresholds(dead_trace) -> None:
    report = tl.debug.grad_health(dead_trace)
    fig = report.figure()
    names = [t.name for t in fig.data]
    assert names == ["ok", "zero", "frontier"]
    ok, zero, frontier = fig.data
    assert len(ok.x) + len(zero.x) == 11
    assert list(frontier.x) == [dead_trace["linear_3"].index]
    assert fig.layout.yaxis.type == "log"
    assert sorted(shape.y0 for shape in fig.layout.shapes) == [1e-7, 1e4]
    # zeros sit one decade below the smallest positive norm
    positive = [r["grad_norm"] for r in report.table().dicts() if r["grad_norm"]]
    assert set(zero.y) == {min(positive) / 10}


def test_panel_arrays_carry_every_row(dead_trace) -> None:
    report = tl.debug.grad_health(dead_trace)
    arrays = widgets.panel_arrays(report)
    rows = report.table().dicts()
    assert bytes(arrays["ops"]["data"]).decode().split("\n") == [r["op"] for r in rows]
    verdicts = [report.to_dict()["data"]["verdicts"][v] for v in arrays["verdict"]["data"]]
    assert verdicts == [r["verdict"] for r in rows]
    assert list(arrays["is_frontier"]["data"]) == [int(r["is_frontier"]) for r in rows]
    assert arrays["grad_norm"]["shape"] == [11]


def test_unknown_norms_travel_as_nan_beside_their_raw_value(poisoned_trace) -> None:
    scaled = tl.trace(nn.Linear(2, 2), torch.ones(1, 2), capture=CaptureOptions(save_grads=True))
    scaled.backward(scaled.output.sum() * 128.0)
    import numpy as np

    arrays = widgets.panel_arrays(tl.debug.grad_health(scaled))
    norm = np.frombuffer(arrays["grad_norm"]["data"], "<f4")
    raw = np.frombuffer(arrays["grad_norm_raw"]["data"], "<f4")
    assert math.isnan(norm[0]) and raw[0] == pytest.approx(128 * math.sqrt(2))


def test_row_click_opens_the_ops_lineage(dead_trace) -> None:
    report = tl.debug.grad_health(dead_trace)
    assert report.table().attrs["row_action"] == "lineage"
    lineage = report.run_action("lineage", op="linear_3")
    assert lineage.report_type == "lineage"
    assert lineage.labels == ("linear_3", "relu_2", "relu_3")  # one ring, both directions
    assert report.exits[0].args == {"op": "linear_3"}
    for other in (tl.debug.dead_neurons(dead_trace), tl.debug.dtype_range(dead_trace)):
        assert other.table().attrs["row_arg"] == "op"  # the generic table panel sends op=
        assert other.run_action("lineage", op="relu_3").labels[0] == "relu_3"


def test_reports_hold_the_trace_weakly() -> None:
    trace = tl.trace(RootOfZero(), torch.ones(1, 2), capture=CaptureOptions(save_grads=True))
    trace.backward(trace.output.sum())
    report = tl.debug.dead_neurons(trace)
    released = weakref.ref(trace)
    del trace
    gc.collect()
    assert released() is None  # the report pins no activation or gradient
    # the row click still works: the follow-up holds the trace's op graph
    assert report.run_action("lineage", op="linear_1").labels[0] == "linear_1"
