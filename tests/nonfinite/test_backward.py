"""bisect_nan_backward: a NaN born in backward is found there and not claimed by forward tools."""

from __future__ import annotations

import pytest
import torch

import torchlens_nb as tl
from torchlens_nb.errors import DiagnosticArgumentError, UnavailableError

from .nan_models import HealedSqrt, Net, SqrtAtZero, X, line_of

GRADS = tl.options.CaptureOptions(save_grads=True)


def _backward_trace(block: torch.nn.Module, passes: int = 1, **options) -> tl.Trace:
    trace = tl.trace(
        Net(block), X, capture=tl.options.CaptureOptions(**options) if options else GRADS
    )
    for index in range(passes):
        trace.backward(trace.output.sum(), retain_graph=index < passes - 1)
    return trace


def test_a_nan_born_in_backward_is_found_at_its_grad_fn_and_forward_line() -> None:
    report = tl.debug.bisect_nan_backward(_backward_trace(SqrtAtZero()))
    birth = report.first_bad_thing
    assert (report.status, report.found, report.kind) == ("found", True, "inf")
    assert (birth.phase, birth.node, birth.op, birth.module) == (
        "backward",
        "SqrtBackward0",
        "sqrt_1",
        "block",
    )
    assert birth.line == line_of(SqrtAtZero.forward, "torch.sqrt(zeros)")
    assert birth.is_proven
    # the ledger is in measured fire order: every fire before the birth is clean
    ledger = report.to_pandas()
    assert ledger.attrs["highlight_order"] == birth.fire_order
    assert ledger.loc[birth.fire_order, "transition"] == "birth"
    assert (ledger.transition.iloc[: birth.fire_order] == "clean").all()
    # sqrt's inf meets `h * 0.0` on the way back: inf * 0 = nan, propagated from there on
    assert report.counts["birth"] == 1 and report.counts["propagated"] >= 1


def test_forward_tools_do_not_claim_a_backward_born_nan_and_point_to_the_recipe() -> None:
    model = Net(SqrtAtZero())
    trace = tl.trace(model, X)
    for report in (
        tl.debug.nonfinite_origin(model, X),
        tl.debug.find_nan(model, X),
        trace.find_nan(),
        tl.debug.nonfinite_origin(trace),
    ):
        assert (report.status, report.found) == ("clean", False)
        assert any("bisect_nan_backward" in e.code for e in report.exits)
        assert any("set_detect_anomaly" in d for d in report.disclosures)
    origin = tl.debug.nonfinite_origin(model, X)
    assert "with torch.autograd.set_detect_anomaly(True, check_nan=True):" in origin.anomaly_recipe
    assert "set_detect_anomaly" in origin.card()


def test_a_healed_nan_is_recorded_and_the_birth_still_headlined() -> None:
    report = tl.debug.bisect_nan_backward(_backward_trace(HealedSqrt()))
    ledger = {row.node: row.transition for row in report.transitions}
    assert (report.first_bad_thing.node, report.first_bad_thing.op) == ("SqrtBackward0", "sqrt_1")
    assert ledger["MulBackward0"] == "propagated"  # inf * 0 = nan
    assert ledger["ClampBackward1"] == "healed"  # clamp's mask zeroes the nan
    assert report.counts["healed"] == 1
    assert any(f.code == "healed" for f in report.findings)


def test_a_nonfinite_seed_is_a_root_seed_not_a_birth() -> None:
    trace = tl.trace(Net(SqrtAtZero()), X, capture=GRADS)
    trace.backward(trace.output, gradient=torch.tensor([[float("nan")]]))
    report = tl.debug.bisect_nan_backward(trace)
    assert report.transitions[0].transition == "root_seed"
    assert (report.first_bad_thing.fire_order, report.first_bad_thing.is_proven) == (0, False)
    assert report.findings[0].code == "nonfinite_seed"


def _half_backward_trace(model: torch.nn.Module) -> tl.Trace:
    trace = tl.trace(model.half(), X.half(), capture=GRADS)
    trace.backward(trace.output.sum())
    return trace


def test_fp16_inf_results_carry_the_amp_hint_unless_a_grad_scale_is_disclosed() -> None:
    trace = _half_backward_trace(Net(SqrtAtZero()))
    plain = tl.debug.bisect_nan_backward(trace)
    scaled = tl.debug.bisect_nan_backward(trace, grad_scale=65536.0)
    # head's parameter gradients stay finite (head.weight's is h * 2 * 0 = 0): the plain hint
    assert plain.amp_hint == tl.debug.amp_scaled_grads_hint()
    assert plain.amp_hint in plain.disclosures
    assert (scaled.amp_hint, scaled.grad_scale) == ("", 65536.0)
    assert any("65536" in d for d in scaled.disclosures)


def test_a_float32_backward_carries_no_amp_hint() -> None:
    # float32 gradients cannot be a GradScaler overflow: the paragraph does not apply
    report = tl.debug.bisect_nan_backward(_backward_trace(SqrtAtZero()))
    assert (report.kind, report.amp_hint) == ("inf", "")
    assert not any("GradScaler" in d for d in report.disclosures)


def test_the_amp_hint_names_scale_overflow_when_every_parameter_gradient_is_nonfinite() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), SqrtAtZero())
    report = tl.debug.bisect_nan_backward(_half_backward_trace(model))
    # both AccumulateGrad sinks (weight, bias) receive nan: the all-non-finite variant
    assert report.amp_hint == tl.debug.amp_scaled_grads_hint(all_nonfinite=True)
    # the sentence is about parameter gradients; the ledger's first fires are clean
    assert "Every parameter gradient of this pass received a non-finite value" in report.amp_hint
    assert report.transitions[0].transition == "clean"


def test_several_backward_passes_are_never_collapsed() -> None:
    trace = _backward_trace(SqrtAtZero(), passes=2)
    with pytest.raises(DiagnosticArgumentError, match=r"logged 2 backward passes; pass bwd=N"):
        tl.debug.bisect_nan_backward(trace)
    with pytest.raises(DiagnosticArgumentError, match=r"bwd must be an int in 0..1"):
        tl.debug.bisect_nan_backward(trace, bwd=2)
    assert tl.debug.bisect_nan_backward(trace, bwd=1).bwd == 1


def test_a_trace_without_a_backward_or_without_saved_grads_is_not_called_clean() -> None:
    with pytest.raises(UnavailableError, match="no logged backward pass") as caught:
        tl.debug.bisect_nan_backward(tl.trace(Net(SqrtAtZero()), X))
    assert caught.value.code == "no_backward_pass"
    report = tl.debug.bisect_nan_backward(_backward_trace(SqrtAtZero(), backward_ready=True))
    assert (report.status, report.coverage, report.found) == ("unchecked", "none", False)
    assert set(report.counts.items()) >= {("unchecked", len(report.transitions))}


def test_a_finite_backward_is_clean_with_full_coverage() -> None:
    report = tl.debug.bisect_nan_backward(_backward_trace(torch.nn.Tanh(), save_grads=True))
    assert (report.status, report.coverage, report.first_bad_thing) == ("clean", "full", None)
    assert report.counts["clean"] == len(report.transitions)


def test_bad_grad_scale_is_refused() -> None:
    with pytest.raises(DiagnosticArgumentError, match="positive finite"):
        tl.debug.bisect_nan_backward(_backward_trace(SqrtAtZero()), grad_scale=float("inf"))
