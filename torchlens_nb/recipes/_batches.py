"""Batch forms every recipe accepts, and how a batch reaches the model.

A *batch* is a tensor, a dict of tensors, or a tuple/list of tensors (``(inputs, targets)``); a
*loader* is a ``torch.utils.data.DataLoader`` or any other iterable of batches. A batch splits
into the model's inputs and its targets:

* ``(inputs, targets)`` (any 2-sequence, e.g. what a ``TensorDataset`` loader yields);
* a dict with a target key (``target``, ``targets``, ``label``, ``labels``, ``y``): the inputs are
  the one remaining input-like entry (``input``, ``inputs``, ``x``, ``image``, ...) when there is
  exactly one, else the remaining entries as keyword arguments (a Hugging Face batch).

Inputs reach ``forward`` exactly as ``tl.trace`` passes them (``tl.capture.call_arguments``).
"""

from __future__ import annotations

import copy
import inspect
import itertools
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import torch
from torch import nn

from .._validate import is_number
from ..capture import call_arguments, iter_tensors, validate_model
from ..debug import preserved_rng_state
from ..errors import (
    DiagnosticArgumentError,
    ForwardError,
    InputFormError,
    ModelTypeError,
    TorchlensNbError,
)

TARGET_KEYS = ("target", "targets", "label", "labels", "y")
"""Dict keys read as the targets of a batch, in this order of preference."""
INPUT_KEYS = ("input", "inputs", "x", "image", "images", "features", "pixel_values")
"""Dict keys read as the single model input when the batch has exactly one of them."""


def is_single_batch(value: Any) -> bool:
    """A tensor, a dict, a tuple/list whose items are all tensors, or ``(dict inputs,
    targets)`` (a Hugging Face batch beside its labels) is one batch."""
    if isinstance(value, (torch.Tensor, Mapping)):
        return True
    if not isinstance(value, (tuple, list)) or not value:
        return False
    if len(value) == 2 and isinstance(value[0], Mapping) and isinstance(value[1], torch.Tensor):
        return True
    return all(isinstance(v, torch.Tensor) for v in value)


def iter_batches(source: Any, *, what: str = "batch_or_loader") -> Iterator[Any]:
    """Yield the batches of ``source``: one batch itself, or each batch of a loader/iterable.

    Raises:
        InputFormError: ``source`` is a string, None, or not iterable.
    """
    if source is None or isinstance(source, (str, bytes)):
        raise InputFormError(
            f"{what} must be a batch (tensor, dict or (inputs, targets) tuple) or a DataLoader / "
            f"iterable of batches, got {type(source).__name__}."
        )
    if is_single_batch(source):
        yield source
        return
    if not isinstance(source, Iterable):
        raise InputFormError(
            f"{what} must be a batch or an iterable of batches, got {type(source).__name__}; "
            "pass next(iter(loader)) or the DataLoader itself."
        )
    if (
        isinstance(source, (list, tuple))
        and source
        and all(is_number(v) or isinstance(v, complex) for v in source)
    ):
        raise InputFormError(
            f"{what} is a {type(source).__name__} of {len(source)} Python numbers, not a batch; "
            "pass a tensor (torch.tensor(values)) or (inputs, targets)."
        )
    yield from source


def read_batches(source: Any, limit: int, *, what: str = "batch_or_loader") -> list[Any]:
    """The first ``limit`` batches of ``source``, read with the global
    RNG streams restored afterwards: a shuffling DataLoader draws its base seed from the global
    torch RNG when iterated (tests/recipes/test_contract.py)."""
    with preserved_rng_state():
        return list(itertools.islice(iter_batches(source, what=what), limit))


def first_batch(source: Any, *, what: str = "batch") -> Any:
    """The batch itself, or the first batch of a loader (raises when the loader is empty)."""
    for batch in read_batches(source, 1, what=what):
        return batch
    raise DiagnosticArgumentError(f"{what} yielded no batch; pass a non-empty loader or a batch.")


def check_model(model: Any) -> nn.Module:
    """``model`` when it is an ``nn.Module`` whose tensors hold values.

    Raises:
        ModelTypeError: not an ``nn.Module``.
        InputFormError: a parameter or buffer is on the meta device (a model built under
            ``torch.device("meta")`` before its weights were loaded).
    """
    validate_model(model)
    meta = next((name for name, t in _named_tensors(model) if t.device.type == "meta"), None)
    if meta is not None:
        raise InputFormError(
            f"the model's {meta!r} is on the meta device: it has no values to run; materialise "
            "it first (model.to_empty(device='cpu'), then load_state_dict)."
        )
    return model


def _named_tensors(model: nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    yield from model.named_parameters()
    yield from model.named_buffers()


def trainable_copy(model: nn.Module, recipe: str) -> nn.Module:
    """A deep copy of ``model`` whose parameters an optimizer can train.

    Raises:
        ModelTypeError: a TorchScript module (its deep copy holds non-leaf parameters).
        DiagnosticArgumentError: ``copy.deepcopy`` failed (e.g. a hook holding a lock).
    """
    if isinstance(model, torch.jit.ScriptModule):
        raise ModelTypeError(
            f"the model is a TorchScript module ({type(model).__name__}): {recipe} trains a "
            "deep copy, and a scripted module copies into parameters an optimizer cannot "
            "train; pass the eager nn.Module (the one given to torch.jit.script)."
        )
    try:
        return copy.deepcopy(model)
    except Exception as exc:  # a model holding an unpicklable handle cannot be copied
        raise DiagnosticArgumentError(
            f"{recipe} trains a deep copy and copy.deepcopy(model) failed with "
            f"{type(exc).__name__}: {exc}; remove the handle (e.g. a registered hook holding a "
            "lock) or pass a freshly built model."
        ) from exc


def split_batch(batch: Any, *, what: str = "batch") -> tuple[Any, Any]:
    """``(inputs, targets)`` of one batch (see the module docstring for the accepted forms).

    Raises:
        InputFormError: the batch has no recognisable targets.
        DiagnosticArgumentError: its inputs hold no sample (:func:`check_nonempty`).
    """
    if isinstance(batch, Mapping):
        target_key = next((k for k in TARGET_KEYS if k in batch), None)
        if target_key is None:
            raise InputFormError(
                f"the {what} dict has keys {sorted(map(str, batch))} but none of {TARGET_KEYS}; "
                "rename the target entry or pass (inputs, targets)."
            )
        rest = {k: v for k, v in batch.items() if k != target_key}
        named = [k for k in INPUT_KEYS if k in rest]
        inputs = rest[named[0]] if len(named) == 1 and len(rest) == 1 else rest
        check_nonempty(inputs, what)
        return inputs, batch[target_key]
    if isinstance(batch, (tuple, list)) and len(batch) == 2:
        check_nonempty(batch[0], what)
        return batch[0], batch[1]
    raise InputFormError(
        f"the {what} must be (inputs, targets) or a dict with a target key {TARGET_KEYS}, got "
        f"{_describe(batch)}; pass the batch as (inputs, targets)."
    )


def check_nonempty(inputs: Any, what: str = "batch") -> None:
    """Refuse inputs with a tensor of no sample (leading size 0): every recipe that runs the
    model needs at least one (statistics of nothing are no verdict, and reductions raise)."""
    for tensor in iter_tensors(inputs):
        if tensor.dim() and tensor.shape[0] == 0:
            raise DiagnosticArgumentError(
                f"the {what} holds no sample (an input of shape {tuple(tensor.shape)}); pass a "
                "batch with at least one example."
            )


def target_tensor(batch: Any) -> Any:
    """The targets of ``batch``; a bare tensor or list is taken to be the targets themselves."""
    if isinstance(batch, torch.Tensor):
        return batch
    if isinstance(batch, Mapping) or (
        isinstance(batch, (tuple, list)) and len(batch) == 2 and isinstance(batch[1], torch.Tensor)
    ):
        return split_batch(batch)[1]
    return batch


def model_device(model: nn.Module) -> torch.device | None:
    """Device of the model's first parameter or buffer (None for a stateless model)."""
    for _, tensor in _named_tensors(model):
        return tensor.device
    return None


def to_device(value: Any, device: torch.device | None) -> Any:
    """``value`` with its tensors moved to ``device`` (copies; the caller's tensors stay put)."""
    if device is None:
        return value
    if isinstance(value, torch.Tensor):
        if value.device.type == "meta" and device.type != "meta":
            raise InputFormError(
                f"the batch holds a meta tensor of shape {tuple(value.shape)}: it has no values "
                f"to run the {device.type} model on; load the real data first."
            )
        return value.to(device)
    if isinstance(value, Mapping):
        return {k: to_device(v, device) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(to_device(v, device) for v in value)
    if isinstance(value, list):
        return [to_device(v, device) for v in value]
    return value


def call_model(model: nn.Module, inputs: Any) -> Any:
    """``model(inputs)`` with the inputs passed as ``tl.trace`` passes them.

    Raises:
        ForwardError: the model's forward raised (its exception is the ``__cause__``; no
            capture ran, so ``partial_trace`` is None), as ``tl.trace`` reports it.
    """
    args, kwargs = call_arguments(inputs)
    try:
        return model(*args, **kwargs)
    except TorchlensNbError:
        raise
    except Exception as exc:
        raise ForwardError(
            f"the model's forward raised {type(exc).__name__}: {exc} (the recipe stopped there "
            "and restored the model; check that the batch fits the model's forward).",
            None,
        ) from exc


def primary_output(output: Any) -> torch.Tensor:
    """The tensor a loss reads from a model's return value.

    A tensor is itself; an object or dict with ``logits`` (Hugging Face outputs) gives that; a
    tuple gives its first tensor.

    Raises:
        InputFormError: the return value holds no tensor.
    """
    if isinstance(output, torch.Tensor):
        return output
    logits = (
        output.get("logits") if isinstance(output, Mapping) else getattr(output, "logits", None)
    )
    if isinstance(logits, torch.Tensor):
        return logits
    for tensor in iter_tensors(output):
        return tensor
    raise InputFormError(
        f"the model returned {type(output).__name__} with no tensor in it; recipes need the "
        "model to return its predictions as a tensor (or an object with .logits)."
    )


def loss_input(output: Any) -> Any:
    """What the caller's ``loss_fn`` receives from a model's return value, as their own loop
    passes it: a tuple or list whole (a VAE's ``(recon, mu, logvar)`` is unpacked by its loss),
    anything else as :func:`primary_output` reads it (a tensor, or a Hugging Face output's
    ``logits``)."""
    if isinstance(output, (tuple, list)):
        return output
    return primary_output(output)


def check_loss_fn(loss_fn: Any) -> Any:
    """``loss_fn`` itself when it is callable with two positional arguments (an ``nn.Module``
    loss or a function); one whose signature refuses ``(outputs, targets)`` is refused before
    anything runs. A callable without a readable signature (a C builtin) is taken as it is."""
    if not callable(loss_fn):
        raise DiagnosticArgumentError(
            f"loss_fn must be callable as loss_fn(outputs, targets), got {type(loss_fn).__name__}; "
            "pass e.g. nn.CrossEntropyLoss() or torch.nn.functional.mse_loss."
        )
    target = loss_fn.forward if isinstance(loss_fn, nn.Module) else loss_fn
    try:
        signature = inspect.signature(target)
    except (TypeError, ValueError):  # no signature to read: the call itself will tell
        return loss_fn
    try:
        signature.bind(None, None)
    except TypeError:
        raise DiagnosticArgumentError(
            f"loss_fn must be callable as loss_fn(outputs, targets), but its signature is "
            f"{signature}; wrap it, e.g. lambda outputs, targets: my_loss(outputs)."
        ) from None
    return loss_fn


def loss_value(loss: Any) -> float:
    """The Python float of a scalar loss tensor (typed error for anything else: a Python float
    has no autograd graph, and every recipe that trains needs one)."""
    if isinstance(loss, torch.Tensor):
        if loss.numel() != 1:
            raise DiagnosticArgumentError(
                f"loss_fn returned a tensor of shape {tuple(loss.shape)}; it must return a scalar "
                "(use reduction='mean')."
            )
        return float(loss.detach().float().item())
    what = f"the {type(loss).__name__} {loss!r}" if is_number(loss) else type(loss).__name__
    raise DiagnosticArgumentError(
        f"loss_fn returned {what}; it must return a scalar tensor computed from the outputs "
        "with torch operations (e.g. nn.CrossEntropyLoss()(outputs, targets)), not .item()."
    )


def check_loss_follows_outputs(loss: torch.Tensor, output: torch.Tensor) -> None:
    """Refuse a loss with no autograd graph back to outputs that have one: an integer loss, a
    detached one, or one computed without the outputs does not depend on the parameters."""
    if output.requires_grad and (not loss.is_floating_point() or loss.grad_fn is None):
        raise DiagnosticArgumentError(
            f"the loss does not depend on the model's parameters (a {loss.dtype} tensor with "
            f"{'no' if loss.grad_fn is None else 'an'} autograd graph, while the outputs have "
            "one): loss_fn must compute the loss from the outputs with differentiable torch "
            "operations (no .detach(), .item() or integer casts)."
        )


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)}"
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of {len(value)} items"
    return type(value).__name__
