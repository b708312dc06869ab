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

from collections.abc import Callable
from functools import partial
from typing import Literal

from torch import nn

from .._undo import Undo, UndoScope
from ..debug._isolation import rng_restorer


def preserved(
    model: nn.Module, *, mode: Literal["eval", "train"] | None = None
) -> UndoScope[nn.Module]:
    """Run a block on ``model`` and restore its modes, buffers and gradients afterwards:
    ``with preserved(model, mode="eval"): ...``.

    Args:
        model: the caller's model.
        mode: ``"eval"`` or ``"train"`` to switch the whole model for the block, None to keep it.

    Side effects: for the block only, ``mode`` is applied and every existing ``.grad`` is cleared
    (so the block reads fresh gradients). Cost: one copy of each buffer and existing gradient,
    plus the RNG states.

    A Ctrl-C at any instant leaves nothing changed, also while a notebook keeps its traceback:
    the restores are registered before anything changes and run in a shielded exit
    (``_undo.UndoScope``). The generator context manager it replaces left the model in eval
    mode when the interrupt landed in ``contextlib``'s ``__exit__`` and the traceback was kept
    (``tests/faults/test_interrupt_sweep_recipes.py``).
    """
    return UndoScope(partial(_switch, model, mode))


def _switch(model: nn.Module, mode: Literal["eval", "train"] | None, undo: Undo) -> nn.Module:
    undo.add(_model_restorer(model))
    undo.add(rng_restorer())
    for param in model.parameters():
        param.grad = None
    if mode == "eval":
        model.eval()
    elif mode == "train":
        model.train()
    return model


def _model_restorer(model: nn.Module) -> Callable[[], None]:
    """Save ``model``'s train/eval flags, buffers and parameter gradients now; the returned
    action puts them back (the same ``.grad`` objects, holding their old bits) and may run any
    number of times (an ``Undo`` action)."""
    flags = [(module, module.training) for module in model.modules()]
    buffers = [(buffer, buffer.detach().clone()) for buffer in model.buffers()]
    grads = [
        (param, param.grad, None if param.grad is None else param.grad.detach().clone())
        for param in model.parameters()
    ]

    def restore() -> None:
        for module, training in flags:
            module.training = training
        for buffer, values in buffers:  # through detached aliases: no `with torch.no_grad()`,
            buffer.detach().copy_(values)  # whose __enter__ an interrupt can leave grad off
        for param, grad, kept in grads:
            if grad is not None and kept is not None:
                grad.detach().copy_(kept)
            param.grad = grad

    return restore
