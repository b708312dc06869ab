"""``torch.vmap`` and ``torch.func.grad`` inside a forward, and the one spelling of
``torch.compile``'d addresses."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import torchlens_nb as tl


class VmapBlock(nn.Module):
    """``fc`` then a per-row function under ``torch.vmap``, then ``+ 1``."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = torch.vmap(lambda row: row.sin() * row.sum())(self.fc(x))
        return rows + 1


@pytest.mark.parametrize(
    "capture",
    [None, tl.options.CaptureOptions(save_grads=True)],
    ids=["save", "save_grads"],
)
def test_a_vmap_call_is_one_op_and_the_output_is_unchanged(
    capture: tl.options.CaptureOptions | None,
) -> None:
    model, x = VmapBlock(), torch.randn(3, 4)
    expected = model(x)
    trace = tl.trace(model, x, save=True, capture=capture)
    assert torch.equal(trace.output, expected)
    assert [(op.label, op.parents) for op in trace] == [
        ("input_1", ()),
        ("linear_1", ("input_1",)),
        ("vmap_1", ("linear_1",)),
        ("add_1", ("vmap_1",)),
    ]
    assert trace["vmap_1"].shape == (3, 4)
    assert torch.allclose(trace["vmap_1"].out, expected - 1)
    (spot,) = trace.blind_spots
    assert (spot.kind, spot.where, spot.output_labels) == ("vmap", "vmap_1", ("vmap_1",))
    assert "torch.vmap" in spot.reason


def test_without_saving_the_vmap_output_is_still_linked() -> None:
    trace = tl.trace(VmapBlock(), torch.randn(3, 4), save=False)
    assert trace["add_1"].parents == ("vmap_1",)
    assert trace.output_layers == ("add_1",)


def test_vmap_outside_a_capture_is_untouched() -> None:
    x = torch.randn(3, 4)
    assert torch.equal(torch.vmap(torch.sin)(x), torch.sin(x))
    tl.trace(VmapBlock(), x)
    assert torch.equal(torch.func.vmap(torch.cos)(x), torch.cos(x))


class GradInside(nn.Module):
    """Uses ``torch.func.grad`` of a per-sample energy inside its forward."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        force = torch.func.grad(lambda v: (v.sin() ** 2).sum())(self.fc(x))
        return force * 2


def test_ops_inside_a_func_transform_are_a_named_blind_spot_and_not_saved() -> None:
    model, x = GradInside(), torch.randn(2, 3)
    expected = model(x)
    trace = tl.trace(model, x, save=True)
    assert torch.equal(trace.output, expected)
    inside = ["sin_1", "pow_1", "sum_1"]  # the energy, run on grad-tracking wrappers
    assert all(not trace[label].has_saved for label in inside)
    assert trace["linear_1"].has_saved and trace["mul_1"].has_saved
    inner, after = trace.blind_spots
    assert (inner.kind, inner.where, inner.output_labels) == ("functorch_transform", "(root)", ())
    assert "ops sin_1, pow_1, sum_1" in inner.reason and "torch.func" in inner.reason
    # the gradient comes out of the transform unlinked: the op that uses it says so
    assert (after.kind, after.output_labels) == ("untracked_input", ("mul_1",))
    assert trace["mul_1"].parents == ()


class Outer(nn.Module):
    """A model holding a compiled submodule (``block`` wraps ``block._orig_mod``)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.block = torch.compile(nn.Sequential(nn.Linear(4, 4), nn.ReLU()), backend="eager")
        self.head = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.block(x))


def test_a_compiled_model_is_spelled_without_orig_mod_and_both_spellings_select() -> None:
    torch.manual_seed(0)
    compiled = torch.compile(nn.Sequential(nn.Linear(4, 4), nn.ReLU()), backend="eager")
    assert [name for name, _ in compiled.named_modules()] == [
        "",
        "_orig_mod",
        "_orig_mod.0",
        "_orig_mod.1",
    ]
    with pytest.warns(tl.errors.TorchlensNbWarning, match="force_eager"):
        trace = tl.trace(compiled, torch.ones(1, 4), save=tl.module("_orig_mod.0"))
    assert [op.module for op in trace] == ["", "0", "1"]
    assert trace.module("_orig_mod.0") == trace.module("0") == [trace["linear_1"]]
    assert [op.label for op in trace if op.has_saved] == ["linear_1"]


def test_a_compiled_submodule_is_one_module_spelled_without_orig_mod() -> None:
    model = Outer()
    with pytest.warns(tl.errors.TorchlensNbWarning, match=r"submodules \['block'\]"):
        trace = tl.trace(model, torch.ones(1, 4))
    assert [(op.label, op.module_stack) for op in trace] == [
        ("input_1", ()),
        ("linear_1", ("block", "block.0")),
        ("relu_1", ("block", "block.1")),
        ("linear_2", ("head",)),
    ]
    assert [(c.address, c.type_name) for c in trace.module_calls] == [
        ("block.0", "Linear"),
        ("block.1", "ReLU"),
        ("block", "Sequential"),
        ("head", "Linear"),
        ("", "Outer"),
    ]
    assert trace["linear_1"].param_names == ("block.0.weight", "block.0.bias")
    assert trace.module("block._orig_mod.0") == trace.module("block.0")
