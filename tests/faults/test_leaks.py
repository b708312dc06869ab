"""No hook outlives its owner: after an exception inside a ``with ChecksSession(...)`` block, inside
a model's forward during capture (with hook plans, a tripwire, backward support), inside a hook
callback, or inside ``trace.backward``, there are zero module hooks, tensor hooks, autograd-node
hooks and optimizer hooks left, no torch function/dispatch mode on the stack, and grad mode,
anomaly mode and the deterministic flags are what they were.

The guard (``_guards.untouched``) counts every registry before and after; ``.grad`` is left out
where the user's own loop runs backward inside the block.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn

import torchlens_nb as tl
from tests.capture.golden_models import hf_gpt2
from tests.faults._guards import global_flags, hook_counts, untouched
from tests.faults.fault_models import Owned, owned
from torchlens_nb.errors import CheckViolationError, ForwardError
from torchlens_nb.options import CaptureOptions, HookPlan

pytestmark = pytest.mark.fault("no_leak")

D = tl.debug
CE = nn.CrossEntropyLoss()


class UserBug(Exception):
    """What the user's loop raises inside the session block."""


def full_session(user: Owned) -> tl.debug.ChecksSession:
    """A session with every check registered (every site installs its hooks)."""
    checks = D.ChecksSession(user.model, user.optimizer, scaler=None)
    checks.register_change_check()
    checks.register_nonfinite_grad_check()
    checks.register_update_ratio_check(every=1)
    checks.register_magnitude_check()
    checks.register_no_accepted_steps_check()
    checks.register_param_scan(every=1)
    return checks


def raise_before_backward(user: Owned) -> None:
    user.model(user.x)
    raise UserBug("data loader broke")


def raise_after_backward(user: Owned) -> None:
    CE(user.model(user.x), user.y).backward()  # the S-A hooks fired
    raise UserBug("logging broke")


def raise_inside_optimizer_step(user: Owned) -> None:
    CE(user.model(user.x), user.y).backward()

    def broken_pre_hook(optimizer: torch.optim.Optimizer, args: object, kwargs: object) -> None:
        raise UserBug("a scheduler hook broke")

    handle = user.optimizer.register_step_pre_hook(broken_pre_hook)
    try:
        user.optimizer.step()
    finally:
        handle.remove()


def raise_after_a_few_steps(user: Owned) -> None:
    for _ in range(3):
        user.optimizer.zero_grad()
        CE(user.model(user.x), user.y).backward()
        user.optimizer.step()
    raise UserBug("evaluation broke")


def interrupt_mid_backward(user: Owned) -> None:
    def ctrl_c(grad: torch.Tensor) -> torch.Tensor:
        raise KeyboardInterrupt  # the user pressed Ctrl-C while autograd ran

    loss = CE(user.model(user.x), user.y)
    loss.register_hook(ctrl_c)
    loss.backward()


SESSION_FAULTS: list[tuple[str, Callable[[Owned], None], type[BaseException]]] = [
    ("before-backward", raise_before_backward, UserBug),
    ("after-backward", raise_after_backward, UserBug),
    ("inside-optimizer-step", raise_inside_optimizer_step, UserBug),
    ("after-three-steps", raise_after_a_few_steps, UserBug),
    ("keyboard-interrupt-mid-backward", interrupt_mid_backward, KeyboardInterrupt),
]


@pytest.mark.parametrize(
    "fault, error", [c[1:] for c in SESSION_FAULTS], ids=[c[0] for c in SESSION_FAULTS]
)
def test_an_exception_in_the_session_block_removes_every_hook(
    fault: Callable[[Owned], None], error: type[BaseException]
) -> None:
    user = owned()
    before = hook_counts([user.model], [user.optimizer], user.batch)
    flags = global_flags()
    checks = full_session(user)
    with pytest.raises(error):
        with checks:
            assert hook_counts([user.model], [user.optimizer], user.batch) != before  # attached
            with checks.step(global_step=0):
                fault(user)
    assert hook_counts([user.model], [user.optimizer], user.batch) == before
    assert global_flags() == flags
    report = checks.report()
    assert report.exit_reason == f"exception {error.__name__}"
    assert checks.detach() is report  # idempotent: already final


def test_a_raising_check_removes_every_hook_and_keeps_the_weights() -> None:
    user = owned()
    user.model.eval()
    user.optimizer.zero_grad()
    with untouched([user.model], [user.optimizer], user.batch, grads=False):
        checks = full_session(user)
        with pytest.raises(CheckViolationError, match="nonfinite_grad"):
            with checks:
                (CE(user.model(user.x), user.y) * float("nan")).backward()
                user.optimizer.step()
    assert checks.report().exit_reason == "raised CheckViolationError"


def test_a_paused_session_that_raises_still_detaches() -> None:
    user = owned()
    user.model.eval()
    with untouched([user.model], [user.optimizer], user.batch, grads=False):
        checks = full_session(user)
        with pytest.raises(UserBug):
            with checks, checks.paused():
                raise_after_backward(user)


class RaisesMidForward(nn.Module):
    """Linear -> ReLU -> (softmax) -> raise: every probe and hook plan has fired before it."""

    def __init__(self, error: type[BaseException]) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.error = error

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = torch.softmax(torch.relu(self.fc(x)), dim=-1)
        raise self.error(f"failed after {tuple(hidden.shape)}")


def all_probes_plan() -> HookPlan:
    return (
        D.RangeProbe({tl.func("relu"): (0.0, 1.0)}).hook_plan()
        + D.LivenessProbe([tl.func("relu")]).hook_plan()
        + D.SinkProbe([tl.func("softmax")], [tl.module("fc")]).hook_plan()
    )


CAPTURES: list[tuple[str, Callable[[nn.Module, torch.Tensor], object]]] = [
    ("trace", lambda m, x: tl.trace(m, x)),
    ("trace-save-grads", lambda m, x: tl.trace(m, x, capture=CaptureOptions(save_grads=True))),
    ("trace-probes", lambda m, x: tl.trace(m, x, capture=CaptureOptions(hooks=all_probes_plan()))),
    ("trace-selective-save", lambda m, x: tl.trace(m, x, save=tl.func("relu") | tl.module("fc"))),
    ("find_nan-live", lambda m, x: D.find_nan(m, x)),
    ("nonfinite_origin-live", lambda m, x: D.nonfinite_origin(m, x)),
    ("attention_sinks", lambda m, x: D.attention_sinks(m, x, attention=[tl.func("softmax")])),
    ("isolated_capture", lambda m, x: D.isolated_capture(m, x, seed=0)),
    ("flops_vs_dispatch", lambda m, x: D.flops_vs_dispatch(m, x)),
]


@pytest.mark.parametrize("error", [RuntimeError, KeyboardInterrupt], ids=["runtime", "interrupt"])
@pytest.mark.parametrize("capture", [c[1] for c in CAPTURES], ids=[c[0] for c in CAPTURES])
def test_an_exception_in_the_forward_during_capture_leaves_nothing_behind(
    capture: Callable[[nn.Module, torch.Tensor], object], error: type[BaseException]
) -> None:
    torch.manual_seed(0)
    model, x = RaisesMidForward(error).eval(), torch.randn(2, 8)
    with untouched([model], inputs=(x,)):
        try:
            capture(model, x)
        except (ForwardError, KeyboardInterrupt):
            pass  # a live NaN check reports the raise in its report instead


@pytest.mark.parametrize("grad_mode", [True, False], ids=["grad", "no_grad"])
def test_grad_and_anomaly_modes_survive_a_failing_capture(grad_mode: bool) -> None:
    model = RaisesMidForward(RuntimeError)
    with torch.set_grad_enabled(grad_mode), torch.autograd.set_detect_anomaly(True):
        with untouched([model]):
            with pytest.raises(ForwardError):
                tl.trace(model, torch.ones(2, 8), capture=CaptureOptions(save_grads=True))


def test_a_raising_hook_callback_ends_the_capture_cleanly() -> None:
    def broken(site: object, value: object) -> None:
        raise RuntimeError("callback bug")

    model, x = nn.Sequential(nn.Linear(8, 8), nn.ReLU()), torch.ones(2, 8)
    plan = HookPlan(((tl.func("relu"), broken),))
    with untouched([model], inputs=(x,)):
        with pytest.raises(ForwardError, match="callback bug") as info:
            tl.trace(model, x, capture=CaptureOptions(hooks=plan))
    assert [op.label for op in info.value.partial_trace] == ["input_1", "linear_1", "relu_1"]


def second_backward(traced: tl.Trace, loss: torch.Tensor) -> Callable[[], object]:
    traced.backward(loss)  # frees the graph: the next backward is a second one
    return lambda: traced.backward(loss)


def wrong_gradient_shape(traced: tl.Trace, loss: torch.Tensor) -> Callable[[], object]:
    return lambda: traced.backward(loss, gradient=torch.ones(3))


def raising_grad_hook(traced: tl.Trace, loss: torch.Tensor) -> Callable[[], object]:
    def broken(grad: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("grad hook bug")

    loss.register_hook(broken)  # the user's hook, registered before the guard looks
    return lambda: traced.backward(loss)


BACKWARD_FAULTS = [second_backward, wrong_gradient_shape, raising_grad_hook]


@pytest.mark.parametrize("prepare", BACKWARD_FAULTS, ids=[f.__name__ for f in BACKWARD_FAULTS])
def test_a_failing_trace_backward_removes_its_node_hooks(
    prepare: Callable[[tl.Trace, torch.Tensor], Callable[[], object]],
) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 4), nn.Tanh())
    traced = tl.trace(model, torch.randn(2, 8), capture=CaptureOptions(save_grads=True))
    loss = traced.output.sum()
    traced.backward(loss, retain_graph=True)
    first = [fire.node for fire in traced.backward_passes[0].fires]
    call = prepare(traced, loss)
    passes = len(traced.backward_passes)
    with untouched([model], inputs=(loss,), grads=False):
        with pytest.raises(tl.errors.BackwardError):
            call()
    assert len(traced.backward_passes) == passes  # a failed pass is not logged
    assert [fire.node for fire in traced.backward_passes[0].fires] == first


def test_graph_breaks_leaves_no_compile_frames_for_later_captures() -> None:
    import torch._dynamo.utils  # graph_breaks loads it; so does this test

    frames = dict(torch._dynamo.utils.counters["frames"])
    model, x = nn.Linear(4, 2), torch.ones(1, 4)
    with untouched([model], inputs=(x,)):
        report = D.graph_breaks(model, x)
    assert (report.status, report.graph_count) == ("single_graph", 1)
    assert dict(torch._dynamo.utils.counters["frames"]) == frames


@pytest.mark.parametrize("error", [RuntimeError, KeyboardInterrupt], ids=["runtime", "interrupt"])
def test_an_exception_inside_a_recorded_attention_call_restores_the_lookup(
    error: type[BaseException], monkeypatch: pytest.MonkeyPatch
) -> None:
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.modeling_utils import AttentionInterface

    def raising(*args: object, **kwargs: object) -> object:
        sdpa_attention_forward(*args, **kwargs)  # inside the recompute mode
        raise error("attention broke")

    monkeypatch.setitem(AttentionInterface._global_mapping, "raising", raising)
    lookup = AttentionInterface.__dict__["get_interface"]
    model, inputs = hf_gpt2()
    model.set_attn_implementation("raising")
    with untouched([model], inputs=inputs), pytest.raises(error, match="attention broke"):
        with tl.bridge.transformers.record_attention(model):
            model(**inputs)
    assert AttentionInterface.__dict__["get_interface"] is lookup
