"""Bad inputs to capture: ``tl.trace``, ``Trace`` lookups and ``trace.backward``, selectors and
options. Each is refused with a typed error naming the bad value and the fix, raised by
torchlens_nb itself, with the model, optimizer, inputs, RNG and every hook registry untouched.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from torch import nn

import torchlens_nb as tl
from tests.faults._guards import assert_refused, untouched
from tests.faults.fault_models import Owned, meta_tensor, quantized_tensor
from torchlens_nb.errors import (
    BackwardError,
    CaptureOptionsError,
    ForwardError,
    InputFormError,
    ModelTypeError,
    OpNotFoundError,
    SelectorError,
)
from torchlens_nb.options import CaptureOptions, HookPlan

pytestmark = pytest.mark.fault("bad_input")


@dataclass
class Scene:
    """The user's objects plus traces of them, built before the guard starts watching."""

    user: Owned
    trace: tl.Trace
    """Captured with save_grads=True; one backward logged."""
    metadata_only: tl.Trace
    """Captured with save=False (no backward support)."""
    linear: nn.Linear
    """A spare Linear(8, 4) (built outside the guard: construction draws from the RNG)."""
    quantized: torch.Tensor


@pytest.fixture
def scene(user: Owned) -> Scene:
    traced = tl.trace(user.model, user.x, capture=CaptureOptions(save_grads=True))
    traced.backward(traced.output.sum())
    user.optimizer.zero_grad()
    return Scene(
        user, traced, tl.trace(user.model, user.x, save=False), nn.Linear(8, 4), quantized_tensor()
    )


def ignore(site: Any, value: Any) -> None:
    """A hook callback that observes nothing."""


CASES: list[tuple[str, Callable[[Scene], Any], type[Exception], str]] = [
    # ----- tl.trace: wrong types (nothing runs) -------------------------------------------------
    (
        "trace-list-of-layers",
        lambda s: tl.trace([s.linear], s.user.x),
        ModelTypeError,
        r"got list \(wrap a list of layers in nn\.Sequential",
    ),
    (
        "trace-model-is-string",
        lambda s: tl.trace("bert-base", s.user.x),
        ModelTypeError,
        r"must be a torch\.nn\.Module, got str",
    ),
    (
        "trace-state-dict",
        lambda s: tl.trace(s.user.model.state_dict(), s.user.x),
        ModelTypeError,
        r"got OrderedDict",
    ),
    (
        "trace-input-text",
        lambda s: tl.trace(s.user.model, "a sentence"),
        InputFormError,
        r"string 'a sentence'; tokenize it first",
    ),
    (
        "trace-input-none",
        lambda s: tl.trace(s.user.model, None),
        InputFormError,
        r"inputs is None; pass a tensor",
    ),
    (
        "trace-input-int-keys",
        lambda s: tl.trace(s.user.model, {0: s.user.x}),
        InputFormError,
        r"keys must be strings; got key 0\. Pass a tuple",
    ),
    (
        "trace-save-string",
        lambda s: tl.trace(s.user.model, s.user.x, save="relu"),
        CaptureOptionsError,
        r"save must be True, False or a selector .* got 'relu'",
    ),
    (
        "trace-save-int",
        lambda s: tl.trace(s.user.model, s.user.x, save=1),
        CaptureOptionsError,
        r"got 1\.",
    ),
    (
        "trace-capture-dict",
        lambda s: tl.trace(s.user.model, s.user.x, capture={"save_grads": True}),
        CaptureOptionsError,
        r"capture must be tl\.options\.CaptureOptions\(\.\.\.\), got dict",
    ),
    (
        "options-flag-string",
        lambda s: CaptureOptions(save_grads="yes"),
        CaptureOptionsError,
        r"save_grads must be True or False, got 'yes'",
    ),
    (
        "options-hooks-list",
        lambda s: CaptureOptions(hooks=[(tl.func("relu"), ignore)]),
        CaptureOptionsError,
        r"hooks must be a HookPlan .* got list",
    ),
    (
        "hookplan-callback-not-callable",
        lambda s: HookPlan(((tl.func("relu"), "print"),)),
        CaptureOptionsError,
        r"must be \(selector, callback\)",
    ),
    (
        "hookplan-selector-string",
        lambda s: HookPlan((("relu", ignore),)),
        CaptureOptionsError,
        r"selector must come from tl\.func\(\.\.\.\) or tl\.module",
    ),
    # ----- selectors ------------------------------------------------------------------------------
    ("func-no-pattern", lambda s: tl.func(), SelectorError, r"at least one pattern"),
    ("func-int-pattern", lambda s: tl.func(1), SelectorError, r"non-empty strings, got 1"),
    ("module-empty-pattern", lambda s: tl.module(""), SelectorError, r"non-empty strings, got ''"),
    # ----- forwards that cannot run the input: ForwardError from the capture, not from torch -------
    (
        "trace-meta-input",
        lambda s: tl.trace(s.linear, meta_tensor()),
        ForwardError,
        r"forward raised RuntimeError: .*meta.*partial_trace",
    ),
    (
        "trace-int-input",
        lambda s: tl.trace(s.linear, 3),
        ForwardError,
        r"forward raised TypeError: .*must be Tensor, not int",
    ),
    (
        "trace-quantized-into-float-linear",
        lambda s: tl.trace(s.linear, s.quantized),
        ForwardError,
        r"forward raised RuntimeError: .*same dtype.*QInt8",
    ),
    (
        "trace-wrong-width",
        lambda s: tl.trace(s.linear, torch.ones(2, 3)),
        ForwardError,
        r"forward raised RuntimeError: .*shapes cannot be multiplied",
    ),
    # ----- Trace lookups --------------------------------------------------------------------------
    (
        "trace-missing-label",
        lambda s: s.trace["conv2d_1"],
        OpNotFoundError,
        r"no op labelled 'conv2d_1' in this trace\. Try 'linear_2'",
    ),
    (
        "trace-near-label",
        lambda s: s.trace["linear_9"],
        OpNotFoundError,
        r"no op labelled 'linear_9'.* Labels like it: \['linear_1', 'linear_2'\]",
    ),
    (
        "trace-index-out-of-range",
        lambda s: s.trace[99],
        OpNotFoundError,
        r"op index 99 is out of range for 7 ops",
    ),
    (
        "trace-float-index",
        lambda s: s.trace[1.5],
        OpNotFoundError,
        r"op label .* or an int, got float",
    ),
    ("trace-none-index", lambda s: s.trace[None], OpNotFoundError, r"got NoneType"),
    (
        "trace-missing-module",
        lambda s: s.trace.module("encoder"),
        OpNotFoundError,
        r"no module 'encoder' ran in this trace; modules: \['', '0', '1'",
    ),
    (
        "trace-grad-fn-of-missing",
        lambda s: s.trace.grad_fn_of("nope_1"),
        OpNotFoundError,
        r"no op labelled 'nope_1'",
    ),
    # ----- trace.backward -------------------------------------------------------------------------
    (
        "backward-without-support",
        lambda s: s.metadata_only.backward(s.metadata_only.output.sum()),
        BackwardError,
        r"captured without backward support; capture with .*save_grads=True",
    ),
    (
        "backward-of-int",
        lambda s: s.trace.backward(3),
        BackwardError,
        r"loss must be a tensor with a grad_fn .* got int",
    ),
    (
        "backward-of-detached",
        lambda s: s.trace.backward(s.trace.output.detach().sum()),
        BackwardError,
        r"got Tensor without grad_fn",
    ),
    (
        "backward-twice",
        lambda s: s.trace.backward(s.trace.output.sum()),
        BackwardError,
        r"second backward .* pass retain_graph=True to the first one",
    ),
]


@pytest.mark.parametrize("call, error, match", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_capture_refuses_bad_input(
    scene: Scene, call: Callable[[Scene], Any], error: type[Exception], match: str
) -> None:
    assert_refused(
        lambda: call(scene),
        error,
        match,
        models=[scene.user.model],
        optimizers=[scene.user.optimizer],
        inputs=scene.user.batch,
    )


def test_refused_capture_keeps_the_partial_trace() -> None:
    model = nn.Sequential(nn.ReLU(), nn.Linear(8, 4))
    err = assert_refused(
        lambda: tl.trace(model, torch.ones(2, 3)),
        ForwardError,
        "shapes cannot be multiplied",
        models=[model],
    )
    # relu ran on the (2, 3) input, then the Linear refused it
    assert [op.label for op in err.partial_trace] == ["input_1", "relu_1"]
    assert err.partial_trace.is_partial
    assert isinstance(err.__cause__, RuntimeError)


def test_backward_twice_logs_nothing_the_second_time(scene: Scene) -> None:
    with pytest.raises(BackwardError):
        scene.trace.backward(scene.trace.output.sum())
    assert len(scene.trace.backward_passes) == 1
    assert all(len(op.grads) == 1 for op in scene.trace)


ODD_INPUTS: list[tuple[str, Callable[[], torch.Tensor], list[str]]] = [
    # inputs that are legal but unusual: capture records them; nothing is refused
    ("sparse-coo", lambda: torch.randn(4, 8).to_sparse(), ["input_1", "linear_1"]),
    ("requires-grad-input", lambda: torch.randn(4, 8, requires_grad=True), ["input_1", "linear_1"]),
    ("non-leaf-input", lambda: torch.randn(4, 8, requires_grad=True) * 2, ["input_1", "linear_1"]),
    ("empty-batch", lambda: torch.empty(0, 8), ["input_1", "linear_1"]),
]


@pytest.mark.parametrize(
    "make, labels", [c[1:] for c in ODD_INPUTS], ids=[c[0] for c in ODD_INPUTS]
)
def test_capture_records_odd_but_legal_inputs(
    make: Callable[[], torch.Tensor], labels: list[str]
) -> None:
    torch.manual_seed(0)
    model, x = nn.Linear(8, 4), make()
    with untouched([model], inputs=(x,)):
        traced = tl.trace(model, x)
    assert [op.label for op in traced] == labels
    assert traced.output.shape == (x.shape[0], 4)


def test_quantized_input_is_recorded_by_a_model_that_accepts_it() -> None:
    x = quantized_tensor()
    with untouched(inputs=(x,)):
        traced = tl.trace(nn.Identity(), x)
    assert [(op.label, op.dtype) for op in traced] == [("input_1", "qint8")]


def test_parameter_free_and_empty_models_trace() -> None:
    x = torch.ones(2, 8)
    assert [op.label for op in tl.trace(nn.Sequential(), x)] == ["input_1"]

    class Constant(nn.Module):
        def forward(self, n: int) -> int:
            return n + 1

    empty = tl.trace(Constant(), 3)
    assert (len(empty), empty.output) == (0, 4)
    with pytest.raises(OpNotFoundError, match="op index 0 is out of range for 0 ops"):
        empty[0]
