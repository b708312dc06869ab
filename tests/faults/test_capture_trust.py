"""The capture says what it could not see into (``Trace.blind_spots``) and keeps it checkable.

A TorchScript submodule (``torch.jit.script`` / ``torch.jit.trace``) is recorded as one op whose
parents are its inputs and whose outputs are its outputs; a live NaN check then finds the NaN
that comes out of it instead of calling the run clean.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

import torchlens_nb as tl
from torchlens_nb.capture import opaque_modules

pytestmark = pytest.mark.fault("no_false_clean")


class NanInside(nn.Module):
    """``fc`` then ``log``: a negative pre-activation makes a NaN inside the module."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(2, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log(self.fc(x))


class Host(nn.Module):
    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.pre = nn.Linear(2, 2)
        self.inner = inner
        self.head = nn.Linear(2, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.inner(self.pre(x)))


def scripted_host() -> Host:
    torch.manual_seed(0)
    return Host(torch.jit.script(NanInside()))


def traced_host() -> Host:
    torch.manual_seed(0)
    return Host(torch.jit.trace(NanInside(), torch.ones(1, 2)))


X = torch.tensor([[1.0, -3.0], [-2.0, 0.5]])


@pytest.mark.parametrize("build", [scripted_host, traced_host], ids=["script", "trace"])
def test_a_torchscript_submodule_is_one_op_and_a_named_blind_spot(build) -> None:
    model = build()
    expected = model(X)
    trace = tl.trace(model, X)
    assert torch.equal(trace.output.view(torch.int32), expected.view(torch.int32))  # bitwise
    assert [(op.label, op.module, op.parents) for op in trace] == [
        ("input_1", "", ()),
        ("linear_1", "pre", ("input_1",)),
        ("jit_module_1", "inner", ("linear_1",)),
        ("linear_2", "head", ("jit_module_1",)),
    ]
    # the scripted module's own parameters are what its op used
    assert trace["jit_module_1"].param_names == ("inner.fc.weight", "inner.fc.bias")
    # what came out of it was saved and can be checked
    assert torch.isnan(trace["jit_module_1"].out).any()
    (spot,) = trace.blind_spots
    assert (spot.kind, spot.where, spot.output_labels) == (
        "opaque_module",
        "inner",
        ("jit_module_1",),
    )
    assert "TorchScript" in spot.reason and "jit_module_1" in spot.reason


def test_a_live_nan_check_finds_the_nan_that_comes_out_of_a_scripted_module() -> None:
    report = tl.debug.find_nan(scripted_host(), X)
    assert report.found and report.op == "jit_module_1"
    assert report.first_bad_thing.module == "inner"


def test_opaque_modules_are_listed_without_running_the_model() -> None:
    class NeverRun(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = torch.jit.script(nn.Sequential(nn.Linear(2, 2), nn.ReLU()))
            self.head = nn.Linear(2, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise AssertionError("opaque_modules must not run the model")

    # the scripted Sequential is one entry, not one per scripted layer inside it
    assert opaque_modules(NeverRun()) == (("encoder", "RecursiveScriptModule(Sequential)"),)
    assert opaque_modules(nn.Sequential(nn.Linear(2, 2))) == ()


def test_a_trace_that_saw_everything_has_no_blind_spots_and_a_partial_one_keeps_them() -> None:
    assert tl.trace(nn.Sequential(nn.Linear(2, 2)), X).blind_spots == ()

    class BoomAfter(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise RuntimeError("after the scripted module")

    model = nn.Sequential(torch.jit.script(NanInside()), BoomAfter())
    with pytest.raises(tl.errors.ForwardError, match="after the scripted module") as caught:
        tl.trace(model, X)
    partial = caught.value.partial_trace
    assert [(s.kind, s.where, s.output_labels) for s in partial.blind_spots] == [
        ("opaque_module", "0", ("jit_module_1",))
    ]


@torch.jit.script
def scripted_log(x: torch.Tensor) -> torch.Tensor:
    return torch.log(x) * 2


class ScriptedFunctionInside(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return scripted_log(x + 0) + 1  # log(-1) = nan, born inside the TorchScript function


class PlainAttributeConstant(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.offset = torch.full((2,), float("nan"))  # a plain attribute, not a buffer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x * 2) + self.offset


@pytest.mark.parametrize(
    ("model", "consumer"),
    [(ScriptedFunctionInside(), "add_2"), (PlainAttributeConstant(), "add_1")],
    ids=["torchscript-function", "plain-attribute"],
)
def test_a_tensor_of_unknown_origin_is_disclosed_at_the_op_that_consumes_it(
    model: nn.Module, consumer: str
) -> None:
    trace = tl.trace(model, -torch.ones(2))
    (spot,) = trace.blind_spots
    assert (spot.kind, spot.where, spot.output_labels) == ("untracked_input", "(root)", (consumer,))
    assert "register constants as buffers" in spot.reason and "a loss target" in spot.reason
    assert torch.isnan(trace[consumer].out).all()


class WithLossOf(nn.Module):
    """A model and its loss in one forward, the target captured from outside (as a closure)."""

    def __init__(self, target: torch.Tensor, loss: Any) -> None:
        super().__init__()
        self.net, self.target, self.loss = nn.Linear(4, 3), target, loss

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.loss(self.net(x), self.target)


def test_a_class_index_target_is_no_blind_spot_and_a_float_one_is_named_as_one() -> None:
    x = torch.randn(5, 4)
    indices = WithLossOf(torch.randint(0, 3, (5,)), nn.functional.cross_entropy)
    assert tl.trace(indices, x).blind_spots == ()  # int64 holds no NaN and carries no gradient
    (spot,) = tl.trace(WithLossOf(torch.randn(5, 3), nn.functional.mse_loss), x).blind_spots
    assert (spot.kind, spot.output_labels) == ("untracked_input", ("mse_loss_1",))
    assert "made before the forward (a loss target" in spot.reason


def test_buffers_parameters_and_inputs_are_not_of_unknown_origin() -> None:
    model = nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2)).eval()
    assert tl.trace(model, torch.ones(3, 2)).blind_spots == ()


def finite_scripted_host() -> Host:
    """A host whose scripted block (Linear -> Tanh) is finite: nothing is wrong where it looked."""
    torch.manual_seed(0)
    return Host(torch.jit.script(nn.Sequential(nn.Linear(2, 2), nn.Tanh())))


def saved_trace() -> tl.capture.Trace:
    return tl.trace(finite_scripted_host(), X, save=True)


def backward_trace() -> tl.capture.Trace:
    trace = tl.trace(finite_scripted_host(), X, capture=tl.options.CaptureOptions(save_grads=True))
    trace.backward(trace.output.square().mean())
    return trace


ANALYSES = {
    "find_nan(trace)": lambda: saved_trace().find_nan(),
    "find_nan(model)": lambda: tl.debug.find_nan(finite_scripted_host(), X),
    "nonfinite_origin": lambda: tl.debug.nonfinite_origin(finite_scripted_host(), X),
    "bisect_nan_backward": lambda: tl.debug.bisect_nan_backward(backward_trace()),
    "dtype_range": lambda: tl.debug.dtype_range(saved_trace()),
    "dead_neurons": lambda: tl.debug.dead_neurons(saved_trace()),
    "grad_health": lambda: tl.debug.grad_health(backward_trace()),
    "audit": lambda: saved_trace().audit(),
    "threshold": lambda: tl.threshold(saved_trace(), within=(-10.0, 10.0)),
    "dead": lambda: tl.dead([saved_trace(), saved_trace()]),
    "compare": lambda: tl.debug.compare(saved_trace(), saved_trace()),
    "bisect_precision": lambda: tl.debug.bisect_precision(finite_scripted_host(), X),
    "check_determinism": lambda: tl.debug.check_determinism(finite_scripted_host(), X),
}
CLEAN_WORDS = ("clean", "none_found", "match", "repeatable_under_test")
"""Each report type's word for "nothing wrong where it looked"."""


@pytest.mark.parametrize("analysis", list(ANALYSES))
def test_no_report_built_on_a_trace_with_a_blind_spot_says_clean(analysis: str) -> None:
    """Finite everywhere the capture looked, but it could not look inside ``inner``."""
    report = ANALYSES[analysis]()
    assert report.status not in CLEAN_WORDS
    assert any("'inner'" in text for text in report.disclosures), report.disclosures
    if analysis != "audit":  # the audit lists the unavailable entries of the checks it ran
        assert [u.code for u in report.unavailable] == ["blind_spot_opaque_module"]
        # the lead agrees with the status: it says what was not seen
        assert report.lead.endswith("the capture could not see inside 'inner' (TorchScript).")
    payload = report.to_dict()
    assert payload["tone"] != "ok" and payload["unavailable"]


def test_the_same_analyses_without_a_blind_spot_can_say_clean() -> None:
    """The control: the same host with its block eager is clean in every analysis above."""
    torch.manual_seed(0)
    model = Host(nn.Sequential(nn.Linear(2, 2), nn.Tanh()))
    assert tl.debug.nonfinite_origin(model, X).status == "clean"
    assert tl.debug.dtype_range(tl.trace(model, X, save=True)).status == "clean"
    assert tl.threshold(tl.trace(model, X, save=True), within=(-10.0, 10.0)).status == "clean"
    assert tl.dead([tl.trace(model, X, save=True)] * 2).status == "none_found"
    twin = tl.trace(model, X, save=True)
    assert tl.debug.compare(twin, tl.trace(model, X, save=True)).status == "match"
    assert tl.debug.check_determinism(model, X).status == "repeatable_under_test"
