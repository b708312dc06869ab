"""Captures under threads and nesting: each capture records its own thread and its own ops.

Threads are real threads, and the interpreter's switch interval is lowered to 10 us while they
run, so the forwards interleave at op granularity (at the default 5 ms a 1 ms forward would
rarely be interrupted and a race would go unseen). Nesting is real nesting: a capture started
inside a forward hook or a forward of a model under capture.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from torch import nn
from torch._functorch import apis as functorch_apis
from torch.nn.modules import module as nn_module
from torch.overrides import _get_current_function_mode_stack

import torchlens_nb as tl
from torchlens_nb.capture import run_capture

pytestmark = pytest.mark.fault("concurrency")

VMAP_IMPL = functorch_apis.vmap_impl
ROUNDS = 20
"""Captures per test: enough to see a race that hits one capture in a few."""


def deep_mlp(seed: int) -> nn.Sequential:
    """12 x (Linear(16) -> ReLU): 24 module calls and 24 ops per forward."""
    torch.manual_seed(seed)
    return nn.Sequential(*[layer for _ in range(12) for layer in (nn.Linear(16, 16), nn.ReLU())])


def facts(trace: tl.capture.Trace) -> tuple[Any, ...]:
    """What must not change when other threads run: ops, their modules, parents, module calls."""
    return (
        [(op.label, op.module, op.module_stack, op.parents) for op in trace],
        [(c.address, c.first_op, c.last_op, c.output_labels) for c in trace.module_calls],
    )


@contextlib.contextmanager
def fine_grained_switching() -> Iterator[None]:
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        yield
    finally:
        sys.setswitchinterval(interval)


def run_threads(*targets: Callable[[], None]) -> None:
    errors: list[BaseException] = []

    def guarded(target: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                target()
            except BaseException as exc:  # re-raised in the test's thread below
                errors.append(exc)

        return run

    threads = [threading.Thread(target=guarded(t)) for t in targets]
    with fine_grained_switching():
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads)
    if errors:
        raise errors[0]


def assert_no_capture_state_left() -> None:
    assert not nn_module._global_forward_hooks
    assert not nn_module._global_forward_pre_hooks
    assert _get_current_function_mode_stack() == []
    assert functorch_apis.vmap_impl is VMAP_IMPL  # the vmap entry point is torch's own again


def test_a_forward_in_another_thread_is_not_recorded_into_the_capture() -> None:
    model, x = deep_mlp(0), torch.randn(2, 16)
    expected = facts(tl.trace(model, x, save=False))
    assert len(expected[1]) == 25  # 24 layers + the root
    seen: list[tuple[Any, ...]] = []
    stop = threading.Event()

    def forwards_in_a_loop() -> None:
        with torch.no_grad():
            while not stop.is_set():
                model(x)

    def captures() -> None:
        try:
            for _ in range(ROUNDS):
                seen.append(facts(tl.trace(model, x, save=False)))
        finally:
            stop.set()

    run_threads(forwards_in_a_loop, captures)
    assert len(seen) == ROUNDS
    assert all(capture == expected for capture in seen)
    assert_no_capture_state_left()


def test_two_threads_capturing_at_once_each_record_only_their_own_forward() -> None:
    models = [deep_mlp(1), nn.Sequential(nn.Linear(16, 8), nn.Tanh(), nn.Linear(8, 16))]
    x = torch.randn(2, 16)
    expected = [facts(tl.trace(m, x, save=False)) for m in models]
    seen: list[list[tuple[Any, ...]]] = [[], []]

    def captures(index: int) -> Callable[[], None]:
        def run() -> None:
            for _ in range(ROUNDS):
                seen[index].append(facts(tl.trace(models[index], x, save=False)))

        return run

    run_threads(captures(0), captures(1))
    assert [len(s) for s in seen] == [ROUNDS, ROUNDS]
    assert all(capture == expected[0] for capture in seen[0])
    assert all(capture == expected[1] for capture in seen[1])
    assert_no_capture_state_left()


def test_interleaved_captures_leave_the_compile_stance_at_default() -> None:
    from torch._dynamo import eval_frame
    from torch._dynamo.utils import counters

    model, x = deep_mlp(2), torch.randn(2, 16)

    def captures() -> None:
        for _ in range(ROUNDS):
            tl.trace(model, x, save=False)

    with pytest.warns(tl.errors.TorchlensNbWarning, match="force_eager"):
        torch.compile(lambda t: t + 1, backend="eager")(x)  # dynamo is loaded and has compiled
        run_threads(captures, captures, captures)
    assert eval_frame._stance.stance == "default"
    compiled_before = counters["frames"]["ok"]
    torch.compile(lambda t: t * 3 - 1, backend="eager")(x)
    assert counters["frames"]["ok"] == compiled_before + 1  # a new function really compiled
    assert_no_capture_state_left()


class InnerCapture(nn.Module):
    """Wraps ``inner``: its forward captures ``inner`` (a nested ``tl.trace``), then adds 1."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner
        self.traces: list[tl.capture.Trace] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.traces.append(tl.trace(self.inner, x.detach(), save=False))
        return x + 1


def test_a_capture_inside_a_forward_hook_records_only_its_own_ops() -> None:
    torch.manual_seed(0)
    outer = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    inner = nn.Sequential(nn.Linear(4, 3), nn.Tanh())
    inner_traces: list[tl.capture.Trace] = []

    def capture_inner(module: nn.Module, args: Any, output: torch.Tensor) -> None:
        inner_traces.append(tl.trace(inner, output, save=False))

    outer[1].register_forward_hook(capture_inner)
    trace = tl.trace(outer, torch.randn(2, 4), save=False)
    assert [(op.label, op.module) for op in trace] == [
        ("input_1", ""),
        ("linear_1", "0"),
        ("relu_1", "1"),
        ("linear_2", "2"),
    ]
    assert [c.address for c in trace.module_calls] == ["0", "1", "2", ""]
    assert trace["linear_2"].parents == ("relu_1",)
    (nested,) = inner_traces
    assert [(op.label, op.module) for op in nested] == [
        ("input_1", ""),
        ("linear_1", "0"),
        ("tanh_1", "1"),
    ]
    assert_no_capture_state_left()


def test_a_capture_inside_a_forward_keeps_both_module_stacks() -> None:
    torch.manual_seed(0)
    wrapper = InnerCapture(nn.Sequential(nn.Linear(4, 4), nn.Sigmoid()))
    outer = nn.Sequential(nn.Linear(4, 4), wrapper, nn.Linear(4, 2))
    trace = tl.trace(outer, torch.randn(2, 4), save=False)
    assert [(op.label, op.module_stack) for op in trace] == [
        ("input_1", ()),
        ("linear_1", ("0",)),
        ("detach_1", ("1",)),
        ("add_1", ("1",)),
        ("linear_2", ("2",)),
    ]
    (nested,) = wrapper.traces
    assert [(op.label, op.module_stack) for op in nested] == [
        ("input_1", ()),
        ("linear_1", ("0",)),
        ("sigmoid_1", ("1",)),
    ]


def test_nested_tripwires_each_stop_their_own_capture() -> None:
    torch.manual_seed(0)
    outer = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 4), nn.Tanh())
    inner = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 4))
    nested: list[tl.capture.Trace] = []

    def stop_at_first_linear(op: tl.capture.Op, outputs: tuple[torch.Tensor, ...]) -> bool:
        return op.func == "linear"

    def stop_at_second_tanh(op: tl.capture.Op, outputs: tuple[torch.Tensor, ...]) -> bool:
        return op.label == "tanh_2"

    def capture_inner(module: nn.Module, args: Any, output: torch.Tensor) -> None:
        nested.append(run_capture(inner, output, save=False, tripwire=stop_at_first_linear))

    outer[1].register_forward_hook(capture_inner)  # runs inside the outer capture
    trace = run_capture(outer, torch.randn(2, 4), save=False, tripwire=stop_at_second_tanh)
    # the outer capture stopped at its own second tanh, not at an op of the inner capture
    assert trace.is_partial and trace.labels == (
        "input_1",
        "linear_1",
        "tanh_1",
        "linear_2",
        "tanh_2",
    )
    # the inner capture stopped at its own first linear, and only once
    (inner_trace,) = nested
    assert inner_trace.is_partial and inner_trace.labels == ("input_1", "linear_1")


def test_find_nan_inside_find_nan_keeps_each_verdict() -> None:
    class Log(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.log(x)

    class Sqrt(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.sqrt(x)

    outer = nn.Sequential(nn.Identity(), Log())  # log(-1) = nan, born in module "1"
    inner = nn.Sequential(nn.Identity(), nn.Identity(), Sqrt())  # sqrt(-4) = nan, in "2"
    inner_reports: list[Any] = []

    def check_inner(module: nn.Module, args: Any, output: torch.Tensor) -> None:
        inner_reports.append(tl.debug.find_nan(inner, torch.tensor([[-4.0, 4.0]])))

    outer[0].register_forward_hook(check_inner)
    report = tl.debug.find_nan(outer, torch.tensor([[-1.0, 1.0]]))
    assert report.found and (report.op, report.first_bad_thing.module) == ("log_1", "1")
    (inner_report,) = inner_reports
    assert inner_report.found
    assert (inner_report.op, inner_report.first_bad_thing.module) == ("sqrt_1", "2")
