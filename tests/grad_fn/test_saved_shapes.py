"""Saved tensors: shapes only, never values, never an unpack hook, never an error after backward."""

from __future__ import annotations

import torch

import torchlens_nb as tl
from torchlens_nb.report import SavedShape


def _node(sketch, name: str):
    (node,) = [n for n in sketch.nodes if n.name == name]
    return node


def test_matmul_saves_both_operands_by_shape() -> None:
    x = torch.randn(3, 4, requires_grad=True)
    w = torch.randn(4, 5, requires_grad=True)
    sketch = tl.debug.walk_grad_fn((x @ w).relu().sum())

    assert _node(sketch, "MmBackward0").saved == (
        SavedShape("mat2", (4, 5), "ok"),
        SavedShape("self", (3, 4), "ok"),
    )
    assert _node(sketch, "ReluBackward0").saved == (SavedShape("result", (3, 5), "ok"),)


def test_after_backward_kept_sizes_stay_and_freed_buffers_are_marked() -> None:
    x = torch.randn(3, 4, requires_grad=True)
    w = torch.randn(4, 5, requires_grad=True)
    loss = (x @ w).relu().sum()
    loss.backward()

    sketch = tl.debug.walk_grad_fn(loss)

    # MmBackward0 keeps _saved_*_sym_sizes after freeing; ReluBackward0 keeps nothing
    assert _node(sketch, "MmBackward0").saved[0] == SavedShape("mat2", (4, 5), "ok")
    assert _node(sketch, "ReluBackward0").saved == (SavedShape("result", None, "freed"),)
    (freed,) = [f for f in sketch.findings if f.code == "grad_fn_saved_freed"]
    assert freed.fields["num_saved"] == 1 and "retain_graph=True" in freed.remedy


def test_an_unused_optional_saved_slot_is_left_out() -> None:
    x = torch.randn(3, requires_grad=True)
    # x * constant: MulBackward0 saves `self` only when `other` needs a gradient
    sketch = tl.debug.walk_grad_fn((x * torch.ones(3)).sum())

    assert _node(sketch, "MulBackward0").saved == (SavedShape("other", (3,), "ok"),)


def test_saved_tensor_hooks_are_never_run() -> None:
    unpacked = []
    x = torch.randn(3, 4, requires_grad=True)
    w = torch.randn(4, 5, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: unpacked.append(t) or t):
        loss = (x @ w).relu().sum()

    sketch = tl.debug.walk_grad_fn(loss)

    assert unpacked == []  # unpacking would have run the hook (a recompute under checkpointing)
    assert _node(sketch, "ReluBackward0").saved == (SavedShape("result", None, "hooked"),)
    assert _node(sketch, "MmBackward0").saved[1] == SavedShape("self", (3, 4), "ok")  # sizes kept
    assert "grad_fn_saved_hooked" in {f.code for f in sketch.findings}


class _Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return 2 * x * grad


def test_custom_function_saved_tensors_before_and_after_backward() -> None:
    x = torch.randn(2, 3, requires_grad=True)
    loss = _Square.apply(x).sum()

    before = _node(tl.debug.walk_grad_fn(loss), "_SquareBackward")
    loss.backward()
    after = _node(tl.debug.walk_grad_fn(loss), "_SquareBackward")

    assert before.saved == (SavedShape("tensors[0]", (2, 3), "ok"),)
    assert after.saved == (SavedShape("tensors", None, "freed"),)
