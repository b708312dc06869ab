"""Leave the caller's model as it was: train/eval flags, buffers, parameter gradients and the
global RNG streams.

Recipes that must run the caller's own model (not a copy) enter :func:`preserved`: on exit,
exceptions included, every submodule's ``training`` flag is restored, every buffer holds its
old bits again (a train-mode forward updates BatchNorm running statistics), every
parameter's ``.grad`` is the same object holding the same bits as before (``backward``
accumulates into an existing ``.grad`` in place, so keeping the reference alone would not be
enough), and the global RNG streams are where they were (a forward may draw from them, e.g. a
sampling layer; tests/faults/test_corruption.py checks it).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Literal

import torch
from torch import nn

from ..debug import preserved_rng_state


@contextlib.contextmanager
def preserved(
    model: nn.Module, *, mode: Literal["eval", "train"] | None = None
) -> Iterator[nn.Module]:
    """Run a block on ``model`` and restore its modes, buffers and gradients afterwards.

    Args:
        model: the caller's model.
        mode: ``"eval"`` or ``"train"`` to switch the whole model for the block, None to keep it.

    Side effects: for the block only, ``mode`` is applied and every existing ``.grad`` is cleared
    (so the block reads fresh gradients). Cost: one copy of each buffer and existing gradient,
    plus the RNG states.
    """
    flags = [(module, module.training) for module in model.modules()]
    buffers = [(buffer, buffer.detach().clone()) for buffer in model.buffers()]
    saved: list[tuple[torch.nn.Parameter, torch.Tensor | None, torch.Tensor | None]] = []
    for param in model.parameters():
        grad = param.grad
        saved.append((param, grad, None if grad is None else grad.detach().clone()))
        param.grad = None
    try:
        with preserved_rng_state():
            if mode == "eval":
                model.eval()
            elif mode == "train":
                model.train()
            yield model
    finally:
        for module, training in flags:
            module.training = training
        with torch.no_grad():
            for buffer, values in buffers:
                buffer.copy_(values)
            for param, grad, grad_values in saved:
                if grad is not None and grad_values is not None:
                    grad.copy_(grad_values)
                param.grad = grad
