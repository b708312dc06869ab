"""The arguments ``tl.recipes.triage`` refuses before any check runs, each with a typed error
that names the argument and says what to pass instead.

:func:`check_options` reads the plain options; :func:`check_batch_and_loss` runs the caller's
loss once on a copy's outputs (one forward under no_grad on the working copy, so nothing of the
caller's is touched) to refuse a batch with no examples, a ``seq_dim`` the input does not have,
and a loss that returns something ``backward()`` cannot start from (a Python number, an integer
tensor, more than one value): those fail much later otherwise, inside a check, and lose the
whole report.
"""

from __future__ import annotations

from typing import Any, get_args

import torch
from torch import nn

from ..._validate import check_int
from ...capture import iter_tensors
from ...errors import DiagnosticArgumentError
from ...report._recipes_data import LossKind
from .._batches import (
    call_model,
    loss_input,
    model_device,
    primary_output,
    split_batch,
    to_device,
)
from .._model_state import preserved

LOSS_KINDS: tuple[str, ...] = get_args(LossKind)


def check_options(seq_dim: Any, num_classes: Any, loss_kind: Any) -> None:
    """``seq_dim`` and ``num_classes`` ints >= 1 (or None), ``loss_kind`` one of the families."""
    if seq_dim is not None:
        check_int("seq_dim", seq_dim, low=1, expect="None or an int >= 1 (dim 0 is the batch)")
    if num_classes is not None:
        check_int("num_classes", num_classes, low=1)
    if loss_kind is not None and loss_kind not in LOSS_KINDS:
        raise DiagnosticArgumentError(
            f"loss_kind must be None or one of {list(LOSS_KINDS)}, got {loss_kind!r}; leave it "
            "None for torch's own losses (recognised), or name the family of your loss."
        )


def _first_input(inputs: Any) -> torch.Tensor | None:
    return next(iter_tensors(inputs), None)


def check_batch_and_loss(model: nn.Module, batch: Any, loss_fn: Any, seq_dim: int | None) -> bool:
    """Refuse a ``seq_dim`` beyond the input's dimensions and a loss that does not return one
    floating-point value, by running ``loss_fn`` once on ``model``'s outputs (``split_batch``
    has refused an empty batch already).

    ``model`` must be the working copy (it runs in its own mode under no_grad; its buffers,
    modes and RNG are restored).

    Returns:
        Whether the model returns a tuple or list (handed to ``loss_fn`` whole).

    Raises:
        DiagnosticArgumentError: the batch holds no example, ``seq_dim`` names no dimension of the input, or ``loss_fn``
            returned a number, an integer tensor or a non-scalar.
    """
    inputs, targets = split_batch(batch)
    first = _first_input(inputs)
    if seq_dim is not None and first is not None and seq_dim >= first.dim():
        raise DiagnosticArgumentError(
            f"seq_dim={seq_dim} but the input has {first.dim()} dimensions (shape "
            f"{tuple(first.shape)}); pass the index of its sequence axis (1 for (batch, seq))."
        )
    device = model_device(model)
    with preserved(model), torch.no_grad():  # BatchNorm statistics of the copy stay as they were
        raw = call_model(model, to_device(inputs, device))
        primary_output(raw)  # refuses a return value that holds no tensor
        loss = loss_fn(loss_input(raw), to_device(targets, device))
    if not isinstance(loss, torch.Tensor):
        raise DiagnosticArgumentError(
            f"loss_fn returned {type(loss).__name__} {loss!r}; it must return a scalar float "
            "tensor that backward() can start from (do not call .item() or float() on it)."
        )
    if not loss.is_floating_point() or loss.numel() != 1:
        raise DiagnosticArgumentError(
            f"loss_fn returned a {loss.dtype} tensor of shape {tuple(loss.shape)}; it must "
            "return one floating-point value (reduction='mean'; no argmax or integer cast)."
        )
    return isinstance(raw, (tuple, list))
