"""Ops run by a module's own forward hooks and pre-hooks belong to that module (``Op.hook_kind``)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

import torchlens_nb as tl


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x).relu()


def block_model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(Block(), nn.Linear(4, 2))


def plant_nan(module: nn.Module, args: Any, output: torch.Tensor) -> torch.Tensor:
    return output * float("nan")  # the NaN is born in block.fc's own forward hook


def scale_input(module: nn.Module, args: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor]:
    return (args[0] * 2,)


def test_ops_in_a_forward_hook_belong_to_the_hooked_module() -> None:
    model = block_model()
    model[0].fc.register_forward_hook(plant_nan)
    trace = tl.trace(model, torch.ones(1, 4))
    rows = [(op.label, op.module, op.hook_kind) for op in trace]
    assert rows == [
        ("input_1", "", None),
        ("linear_1", "0.fc", None),
        ("mul_1", "0.fc", "forward_hook"),
        ("relu_1", "0", None),
        ("linear_2", "1", None),
    ]
    assert trace["mul_1"].module_stack == ("0", "0.fc") and trace["mul_1"].in_hook
    assert not trace["linear_1"].in_hook
    # the call's output is what the hook returned, and the call spans the hook's op
    (call,) = [c for c in trace.module_calls if c.address == "0.fc"]
    assert (call.output_labels, call.first_op, call.last_op) == (("mul_1",), 1, 3)
    assert trace["relu_1"].parents == ("mul_1",)


def test_ops_in_a_forward_pre_hook_are_marked_as_such() -> None:
    model = block_model()
    model[0].register_forward_pre_hook(scale_input)
    trace = tl.trace(model, torch.ones(1, 4))
    rows = [(op.label, op.module, op.hook_kind) for op in trace]
    assert rows == [
        ("input_1", "", None),
        ("mul_1", "0", "forward_pre_hook"),
        ("linear_1", "0.fc", None),
        ("relu_1", "0", None),
        ("linear_2", "1", None),
    ]


class Probed(nn.Module):
    """``probe`` is part of the model but only ever called by a forward hook of ``block``."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.block = Block()
        self.head = nn.Linear(4, 2)
        self.probe = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.block(x))


def test_a_submodule_called_inside_a_hook_runs_in_that_hook() -> None:
    model = Probed()

    def run_probe(module: nn.Module, args: Any, output: torch.Tensor) -> None:
        model.probe(output)

    model.block.register_forward_hook(run_probe)
    trace = tl.trace(model, torch.ones(1, 4))
    rows = [(op.label, op.module_stack, op.hook_kind) for op in trace]
    assert rows == [
        ("input_1", (), None),
        ("linear_1", ("block", "block.fc"), None),
        ("relu_1", ("block",), None),
        ("linear_2", ("block", "probe"), "forward_hook"),
        ("linear_3", ("head",), None),
    ]


def test_the_users_hooks_stay_and_the_capture_leaves_none_of_its_own() -> None:
    model = block_model()
    handle = model[0].fc.register_forward_hook(plant_nan)
    pre_handle = model[0].register_forward_pre_hook(scale_input)
    before = (dict(model[0].fc._forward_hooks), dict(model[0]._forward_pre_hooks))

    class Boom(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise RuntimeError("boom after the hooked block")

    failing = nn.Sequential(model[0], Boom())
    with pytest.raises(tl.errors.ForwardError, match="boom"):
        tl.trace(failing, torch.ones(1, 4))
    tl.trace(model, torch.ones(1, 4))
    assert (dict(model[0].fc._forward_hooks), dict(model[0]._forward_pre_hooks)) == before
    assert not model[0].fc._forward_hooks_always_called
    handle.remove()
    pre_handle.remove()
