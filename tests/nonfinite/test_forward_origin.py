"""Forward NaN forensics: the origin op, module and line are exact; downstream ops never are."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

import torchlens_nb as tl
from torchlens_nb.errors import DiagnosticArgumentError

from . import nan_models
from .nan_models import BORN_IN_BLOCK, Finite, LogOfNegative, Net, X, line_of

CASES = [pytest.param(*case[1:], id=case[0]) for case in BORN_IN_BLOCK]


def forward_reports(model: nn.Module, inputs: Any = X) -> dict[str, Any]:
    """The report of every forward NaN tool on ``model``: live, and from a save=True trace."""
    trace = tl.trace(model, inputs)
    return {
        "nonfinite_origin live": tl.debug.nonfinite_origin(model, inputs),
        "nonfinite_origin saved": tl.debug.nonfinite_origin(trace),
        "find_nan live": tl.debug.find_nan(model, inputs),
        "trace.find_nan": trace.find_nan(),
        "bisect_nan": tl.debug.bisect_nan(trace),
    }


@pytest.mark.parametrize(("block", "label", "text", "kind", "propagated"), CASES)
def test_every_forward_tool_names_the_op_born_in_the_block(
    block, label, text, kind, propagated
) -> None:
    torch.manual_seed(0)
    expected_line = line_of(block.forward, text)
    for name, report in forward_reports(Net(block())).items():
        origin = report.first_bad_thing
        assert (report.status, report.found, report.kind) == ("found", True, kind), name
        assert (origin.op, origin.module, origin.line) == (label, "block", expected_line), name
        assert origin.file == nan_models.__file__, name
        assert text in origin.code, name
        assert origin.is_proven and report.is_certain, name
        assert report.first_bad_thing.phase == "forward", name


@pytest.mark.parametrize(("block", "label", "text", "kind", "propagated"), CASES)
def test_nonfinite_origin_counts_the_ops_that_only_propagate(
    block, label, text, kind, propagated
) -> None:
    report = tl.debug.nonfinite_origin(Net(block()), X)
    assert report.origin.op == label
    assert (report.num_nonfinite, report.num_propagated) == (propagated + 1, propagated)
    assert report.other_births == ()  # no downstream op is ever called a birth
    assert report.reaches_output is True
    assert f"{propagated} downstream ops propagate it" in report.lead


def test_the_origin_line_is_the_ops_own_line_not_the_forward_call() -> None:
    report = tl.debug.nonfinite_origin(Net(LogOfNegative()), X)
    assert report.origin.code == "return torch.log(shifted)  # log(0.5 - 1) = nan"
    assert report.origin.line != line_of(Net.forward, "self.block(h)")


def test_live_find_nan_stops_at_the_first_nonfinite_output() -> None:
    report = tl.debug.find_nan(Net(LogOfNegative()), X)
    # input, pre's linear, sub, log: the run stops right after log (mul and head never run)
    assert (report.is_stopped_early, report.num_ops, report.num_checked) == (True, 4, 4)
    assert report.first_bad_thing.stats.nan_count == 1  # log(-0.5); log(2) is finite
    assert report.first_bad_thing.stats.finite_max == pytest.approx(0.6931, abs=1e-4)


def test_a_finite_model_gets_a_clean_verdict_scoped_to_what_was_checked() -> None:
    model = Net(Finite())
    trace = tl.trace(model, X)
    for report in (
        tl.debug.nonfinite_origin(model, X),
        tl.debug.find_nan(model, X),
        trace.find_nan(),
        tl.debug.bisect_nan(trace),
        tl.debug.nonfinite_origin(trace),
    ):
        assert (report.status, report.found, report.kind, report.op) == ("clean", False, None, None)
        # input, linear, tanh, add, mul, linear: 6 float outputs, all checked
        assert (report.num_checked, report.num_unchecked, report.coverage) == (6, 0, "full")
        assert report.disclosures[0].startswith("checked 6 of 6 floating-point op outputs")
        assert (
            report.lead == "no NaN or Inf in any of the 6 floating-point op outputs (all checked)."
        )


def test_a_selective_save_scopes_a_clean_verdict_to_the_saved_ops() -> None:
    trace = tl.trace(Net(Finite()), X, save=tl.func("linear"))
    report = trace.find_nan()
    assert (report.status, report.num_checked, report.num_unchecked) == ("partial", 2, 4)
    assert report.lead == (
        "no NaN or Inf in the 2 checked floating-point op outputs; 4 were not checked."
    )
    assert not report.is_certain


def test_a_selective_save_names_the_uncertainty_zone_instead_of_a_false_origin() -> None:
    trace = tl.trace(Net(LogOfNegative()), X, save=tl.func("linear"))
    for report in (trace.find_nan(), tl.debug.nonfinite_origin(trace)):
        # linear_2 (head) is the first SAVED non-finite output; its input mul_1 was not saved
        assert (report.status, report.op) == ("found", "linear_2")
        assert not report.first_bad_thing.is_proven and not report.is_certain
        # walking up through unsaved ops stops at linear_1 (saved, finite)
        assert report.uncertainty_zone == ("mul_1", "log_1", "sub_1")
        zone = next(f for f in report.findings if f.code == "uncertainty_zone")
        assert zone.fields["zone_size"] == 3
        assert "see the uncertainty zone" in report.lead
        assert report.lineage_role == "first non-finite seen"  # the panel never says "origin"


def test_a_nonfinite_input_is_named_as_the_input_with_its_bad_rows_and_no_location() -> None:
    batch = torch.ones(5, 2)
    batch[1, 0] = batch[3, 1] = float("nan")
    for report in (
        tl.debug.nonfinite_origin(Net(Finite()), batch),  # live
        tl.debug.nonfinite_origin(tl.trace(Net(Finite()), batch)),  # saved
    ):
        assert (report.origin.op, report.origin.func) == ("input_1", "input")
        assert report.findings[0].code == "nonfinite_input"
        assert report.lead.startswith(
            "the model input input_1 already holds nan in batch rows 1, 3 (2 of 5)"
        )
        origin = report.first_bad_thing
        assert (origin.batch_rows, origin.num_batch_rows, origin.batch_size) == ((1, 3), 2, 5)
        # the batch's values came from the caller's data, not from the line that passed it in
        assert (origin.file, origin.line) == (None, None)


def test_an_op_other_than_an_input_names_no_batch_rows() -> None:
    origin = tl.debug.nonfinite_origin(Net(LogOfNegative()), X).first_bad_thing
    assert (origin.func, origin.batch_rows, origin.num_batch_rows) == ("log", (), None)


def test_a_nonfinite_weight_is_named_with_the_op_that_reads_it() -> None:
    model = Net(Finite())
    with torch.no_grad():
        model.head.weight[0, 1] = float("nan")
    report = tl.debug.nonfinite_origin(model, X)
    assert (report.origin.op, report.origin.module) == ("linear_2", "head")
    assert report.nonfinite_params == ("head.weight",)
    assert report.findings[0].code == "nonfinite_parameter"


def test_a_forward_that_raises_after_the_nan_still_reports_the_origin() -> None:
    class RaisesLater(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = torch.log(x - 1.0)
            if torch.isnan(y).any():
                raise ValueError("loss is nan")
            return y

    report = tl.debug.nonfinite_origin(RaisesLater(), X)
    assert (report.status, report.origin.op) == ("found", "log_1")
    raised = next(f for f in report.findings if f.code == "forward_raised")
    assert raised.fields["exception"] == "ValueError"


def test_a_forward_that_raises_before_any_nan_is_not_called_clean() -> None:
    class RaisesEarly(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            torch.tanh(x)
            raise RuntimeError("shape mismatch")

    live = tl.debug.find_nan(RaisesEarly(), X)
    assert (live.status, live.found, live.coverage) == ("partial", False, "partial")
    with pytest.raises(tl.errors.ForwardError) as caught:
        tl.trace(RaisesEarly(), X)
    partial = caught.value.partial_trace
    for report in (partial.find_nan(), tl.debug.bisect_nan(partial)):
        assert (report.status, report.num_checked) == ("partial", 2)  # input, tanh
        assert report.disclosures[0].endswith("the forward ended after 2 ops, later ops never ran")


def test_a_partial_trace_is_scanned_like_a_trace() -> None:
    class RaisesLater(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = torch.log(x - 1.0)
            raise ValueError(f"bad value {y.sum()}")

    with pytest.raises(tl.errors.ForwardError) as caught:
        tl.trace(RaisesLater(), X)
    partial = caught.value.partial_trace
    assert partial.find_nan().op == tl.debug.bisect_nan(partial).op == "log_1"
    assert tl.debug.find_nan(partial).op == "log_1"  # find_nan(trace) scans it too


def test_a_nan_in_gpt2s_last_block_is_traced_to_the_weight_of_its_mlp(tiny_gpt2) -> None:
    model = tiny_gpt2
    weight = model.transformer.h[1].mlp.c_fc.weight
    saved = weight.detach().clone()
    try:
        with torch.no_grad():
            weight[0, 0] = float("nan")
        ids = {"input_ids": torch.arange(8).unsqueeze(0)}
        report = tl.debug.nonfinite_origin(model, ids)
        found = tl.debug.find_nan(model, ids)
    finally:
        with torch.no_grad():
            weight.copy_(saved)
    assert report.origin.module == "transformer.h.1.mlp.c_fc"
    assert report.nonfinite_params == ("transformer.h.1.mlp.c_fc.weight",)
    assert found.op == report.origin.op
    assert report.other_births == ()


def test_live_forms_refuse_a_save_selector_and_unknown_keywords() -> None:
    with pytest.raises(DiagnosticArgumentError, match="keeps no activation"):
        tl.debug.find_nan(Net(Finite()), X, save=True)
    with pytest.raises(DiagnosticArgumentError, match="unexpected keyword"):
        tl.debug.nonfinite_origin(Net(Finite()), X, sav=False)
    with pytest.raises(DiagnosticArgumentError, match="takes no inputs"):
        tl.debug.nonfinite_origin(tl.trace(Net(Finite()), X), X)
    with pytest.raises(DiagnosticArgumentError, match="needs a Trace"):
        tl.debug.bisect_nan(Net(Finite()))


def test_spec_example_find_nan_live_and_saved() -> None:
    class NonFinite(nn.Module):
        def forward(self, x):
            zeros = x - x
            return zeros / zeros

    model = NonFinite()
    x = torch.ones(1, 2)
    live = tl.debug.find_nan(model, x)
    saved = tl.trace(model, x).find_nan()
    assert (live.found, live.kind) == (True, "nan")
    assert (saved.found, saved.kind) == (True, "nan")


def test_spec_example_bisect_nan() -> None:
    trace = tl.trace(nn.Identity(), torch.tensor([float("nan")]))
    result = tl.debug.bisect_nan(trace)
    assert (result.found, result.kind) == (True, "nan")


class MadeFromNothing(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.full((2,), float("nan"))  # torch.full reads no tensor


def test_an_origin_with_no_tensor_input_is_not_said_to_have_finite_inputs() -> None:
    report = tl.debug.nonfinite_origin(tl.trace(MadeFromNothing(), torch.ones(2)))
    assert (report.origin.op, report.first_bad_thing.is_proven) == ("full_1", True)
    assert "it read no recorded tensor" in report.lead
    assert "inputs were checked finite" not in report.lead
