"""The capture's raw rows and the process-wide module-call wrapper (issue 34).

A trace builds its ``Op`` objects on first use, the same ones whatever asks first; a live
observer (a tripwire, an op hook) sees built ops while the forward runs; ``nn.Module._call_impl``
is wrapped only while a capture runs, in any thread, after a raise too; a forward in a thread
without a capture is not recorded; copy on write still protects a value saved before the first
in-place op.
"""

from __future__ import annotations

import threading

import pytest
import torch
from torch import nn

import torchlens_nb as tl
from torchlens_nb.errors import ForwardError

ORIGINAL_CALL_IMPL = nn.Module.__dict__["_call_impl"]


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.fc(x)) + x


def test_ops_are_built_once_on_first_use_whatever_asks_first() -> None:
    model, x = nn.Sequential(Block(), Block()), torch.ones(2, 3)
    by_label = tl.trace(model, x)["relu_2"]
    by_iteration = list(tl.trace(model, x))
    trace = tl.trace(model, x)
    assert "_recording" in vars(trace) and "ops" not in vars(trace)  # nothing built yet
    assert trace.output_layers == ("add_2",)
    assert trace.ops is trace.ops and trace["linear_1"] is trace.ops[1]
    assert trace["add_2"].is_output and trace["linear_1"].children == ("relu_1",)
    assert [call.address for call in trace.module_calls] == ["0.fc", "0", "1.fc", "1", ""]
    assert [call.output_labels for call in trace.module_calls][:2] == [("linear_1",), ("add_1",)]
    assert by_label.parents == ("linear_2",) and by_label.module == "1"
    assert [op.label for op in by_iteration] == [op.label for op in trace]


def test_ops_built_from_several_threads_are_one_list() -> None:
    trace = tl.trace(nn.Sequential(*[Block() for _ in range(20)]), torch.ones(2, 3))
    seen: list[object] = []
    threads = [threading.Thread(target=lambda: seen.append(trace.ops)) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(seen) == 4 and all(ops is trace.ops for ops in seen) and len(trace.ops) == 61


def test_a_live_hook_sees_built_ops_while_the_forward_runs() -> None:
    seen: list[tuple[str, tuple[int, ...]]] = []

    def observe(site: tl.options.Site, value: torch.Tensor) -> None:
        seen.append((site.label, tuple(value.shape)))

    plan = tl.options.HookPlan(((tl.func("relu"), observe),))
    trace = tl.trace(Block(), torch.ones(2, 3), capture=tl.options.CaptureOptions(hooks=plan))
    assert seen == [("relu_1", (2, 3))] and trace["relu_1"].module == ""


def test_the_module_call_wrapper_lives_only_while_a_capture_runs() -> None:
    class Raises(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            assert nn.Module.__dict__["_call_impl"] is not ORIGINAL_CALL_IMPL
            raise ValueError("boom")

    tl.trace(Block(), torch.ones(1, 3))
    assert nn.Module.__dict__["_call_impl"] is ORIGINAL_CALL_IMPL
    with pytest.raises(ForwardError):
        tl.trace(Raises(), torch.ones(1))
    assert nn.Module.__dict__["_call_impl"] is ORIGINAL_CALL_IMPL


def test_a_forward_in_a_thread_without_a_capture_is_neither_recorded_nor_tracked() -> None:
    other, started, release = Block(), threading.Event(), threading.Event()
    results: list[torch.Tensor] = []

    class Waits(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            started.set()
            release.wait(5)
            return x * 2

    def in_other_thread() -> None:
        started.wait(5)
        results.append(other(torch.ones(1, 3)))  # runs while the capture's wrapper is in place
        release.set()

    thread = threading.Thread(target=in_other_thread)
    thread.start()
    trace = tl.trace(Waits(), torch.ones(1, 3))
    thread.join()
    assert [op.func for op in trace] == ["input", "mul"]
    assert [call.address for call in trace.module_calls] == [""]
    assert torch.equal(results[0], other(torch.ones(1, 3)))


def test_copy_on_write_covers_values_saved_before_the_first_in_place_op() -> None:
    class WritesLate(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = torch.tanh(x)
            z = y * 2
            y.add_(1)  # the first in-place op: y's saved value must stay the tanh
            return z + y

    x = torch.ones(2)
    trace = tl.trace(WritesLate(), x)
    assert torch.equal(trace["tanh_1"].out, torch.tanh(x))
    assert torch.equal(trace["add__1"].out, torch.tanh(x) + 1)
