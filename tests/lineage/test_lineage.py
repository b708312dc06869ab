"""lineage: rings of ancestors/descendants with finiteness, and the expand action."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch
from torch import nn

import torchlens_nb as tl
from tests.nonfinite.nan_models import LogOfNegative, Net, X, line_of
from torchlens_nb.errors import DiagnosticArgumentError, OpNotFoundError


def test_spec_example_lineage_of_the_output() -> None:
    trace = tl.trace(nn.Sequential(nn.Linear(2, 2), nn.ReLU()), torch.ones(1, 2))
    result = tl.debug.lineage(trace, trace.output_layers[0], max_depth=1)
    assert (result.message, len(result.nodes)) == ("relu_1 has 1 ancestor within depth 1.", 2)


def test_nodes_carry_depth_source_shape_dtype_and_finiteness() -> None:
    trace = tl.trace(Net(LogOfNegative()), X)
    result = tl.debug.lineage(trace, "linear_2")
    # head <- mul <- log <- sub <- pre's linear <- input, one ring each
    assert [(n.label, n.depth) for n in result.nodes] == [
        ("linear_2", 0),
        ("mul_1", 1),
        ("log_1", 2),
        ("sub_1", 3),
        ("linear_1", 4),
        ("input_1", 5),
    ]
    log = result.node("log_1")
    assert (log.module, log.shape, log.dtype) == ("block", (1, 2), "float32")
    assert log.line == line_of(LogOfNegative.forward, "torch.log(shifted)")
    assert [n.finiteness for n in result.nodes] == ["nonfinite"] * 3 + ["finite"] * 3
    assert (log.stats.nan_count, log.stats.finite_min) == (1, pytest.approx(0.6931, abs=1e-4))
    assert result.message == "linear_2 has 5 ancestors in total."


def test_descendants_and_both_directions() -> None:
    trace = tl.trace(Net(LogOfNegative()), X)
    down = tl.debug.lineage(trace, "sub_1", direction="descendants")
    assert down.labels == ("sub_1", "log_1", "mul_1", "linear_2")
    both = tl.debug.lineage(trace, "log_1", direction="both", max_depth=1)
    assert [(n.label, n.relation) for n in both.nodes] == [
        ("log_1", "root"),
        ("sub_1", "ancestor"),
        ("mul_1", "descendant"),
    ]
    assert both.message == "log_1 has 1 ancestor and 1 descendant within depth 1."
    assert [n.is_frontier for n in both.nodes] == [False, True, True]


def test_the_next_exit_after_an_expand_is_the_frontier_node() -> None:
    trace = tl.trace(Net(LogOfNegative()), X)
    first = tl.debug.lineage(trace, "linear_2", max_depth=1)
    assert [(e.label, dict(e.args)) for e in first.exits] == [
        ("Expand mul_1", {"label": "mul_1", "direction": "ancestors"})
    ]
    ring = first.run_action("expand", label="log_1", direction="ancestors")
    assert ring.labels == ("log_1", "sub_1")
    (next_exit,) = ring.exits  # the node to walk on, not log_1 again
    assert (next_exit.label, next_exit.code) == (
        "Expand sub_1",
        "report.run_action('expand', label='sub_1', direction='ancestors')",
    )
    after = ring.run_action(next_exit.action, **next_exit.args)
    assert after.labels == ("sub_1", "linear_1")
    both = tl.debug.lineage(trace, "log_1", direction="both", max_depth=1)
    assert dict(both.exits[0].args) == {"label": "sub_1", "direction": "ancestors"}
    assert tl.debug.lineage(trace, "linear_2").exits == ()  # walked to the ends: nothing left


def test_unsaved_values_are_unknown_not_finite() -> None:
    trace = tl.trace(Net(LogOfNegative()), X, save=tl.func("linear"))
    result = tl.debug.lineage(trace, "linear_2", max_depth=2)
    assert [(n.label, n.finiteness, n.checked_by) for n in result.nodes] == [
        ("linear_2", "nonfinite", "saved"),
        ("mul_1", "unknown", None),
        ("log_1", "unknown", None),
    ]
    assert result.status == "found"


def test_expand_returns_the_next_ring_around_a_node() -> None:
    trace = tl.trace(Net(LogOfNegative()), X)
    first = tl.debug.lineage(trace, "linear_2", max_depth=1)
    assert first.nodes[-1].is_frontier  # mul_1 has a parent not shipped yet
    ring = first.run_action("expand", label="mul_1", direction="ancestors")
    assert ring.labels == ("mul_1", "log_1")
    assert ring.node("log_1").depth == 1


def test_the_origin_reports_lineage_action_opens_a_ring_around_the_origin() -> None:
    trace = tl.trace(Net(LogOfNegative()), X)
    report = tl.debug.nonfinite_origin(trace)
    exit_ = next(e for e in report.exits if e.action == "lineage")
    assert (exit_.label, dict(exit_.args)) == ("Show lineage", {"label": "log_1"})
    ring = report.run_action("lineage")
    assert (ring.root, ring.highlight, ring.labels) == (
        "log_1",
        "log_1",
        ("log_1", "sub_1", "mul_1"),
    )
    assert ring.highlight_role == "origin"


def test_a_live_reports_lineage_uses_the_live_checks() -> None:
    report = tl.debug.find_nan(Net(LogOfNegative()), X)
    ring = report.run_action("lineage")
    # nothing was saved, but every output was checked while the forward ran
    assert [(n.label, n.finiteness, n.checked_by) for n in ring.nodes] == [
        ("log_1", "nonfinite", "live"),
        ("sub_1", "finite", "live"),
    ]
    assert ring.node("log_1").stats.nan_count == 1


def test_actions_hold_the_graph_not_the_saved_trace() -> None:
    trace = tl.trace(Net(LogOfNegative()), X)
    released = weakref.ref(trace)
    report = tl.debug.lineage(trace, "log_1", max_depth=1)
    del trace
    gc.collect()
    assert released() is None  # the report pins no activation
    ring = report.run_action("expand", label="log_1", direction="both")
    # finiteness as checked when the report was made; the values (statistics) are gone
    assert [(n.label, n.finiteness, n.checked_by, n.stats) for n in ring.nodes] == [
        ("log_1", "nonfinite", "saved", None),
        ("sub_1", "finite", "saved", None),
        ("mul_1", "nonfinite", "saved", None),
    ]
    assert any("the trace was released" in note for note in ring.disclosures)


def test_bad_arguments_are_refused() -> None:
    trace = tl.trace(Net(LogOfNegative()), X)
    with pytest.raises(DiagnosticArgumentError, match="direction must be one of"):
        tl.debug.lineage(trace, "log_1", direction="up")
    with pytest.raises(DiagnosticArgumentError, match="max_depth must be a non-negative int"):
        tl.debug.lineage(trace, "log_1", max_depth=-1)
    with pytest.raises(OpNotFoundError, match="no op labelled 'log_9'"):
        tl.debug.lineage(trace, "log_9")
