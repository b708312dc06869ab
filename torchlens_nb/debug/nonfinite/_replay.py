"""What ``investigate`` needs to replay one training step without touching what the user owns.

* :class:`StepModule`: the model's forward followed by the loss, as one module the capture
  records, so an op of the loss function is checked and named like an op of the model. It adds
  no name: module addresses, parameter and buffer names are the model's own.
* :func:`keep_user_state`: train/eval flags, every parameter's ``.grad`` (the replay's
  backward accumulates into fresh ones), buffers, every global RNG stream and torch's global
  switches come back bitwise, whatever instant an interrupt arrives at.
* :func:`check_rng_state` / :func:`replay_rng`: the kept RNG state of a step.
* :func:`forward_call`: how the model is called on the batch (``forward_fn``, the whole batch,
  or the first element of an ``(x, y)`` batch).
* :func:`input_fields`: where each tensor of a batch sits (``input_ids``, ``inputs[1]``), in the
  order the capture numbers its input ops.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Literal

import torch
from torch import nn

from ..._undo import Undo
from ...errors import DiagnosticArgumentError
from ...report._investigation import LossSource
from .._isolation import keep_model_state, keep_torch_switches

RNG_KEYS = ("cpu", "cuda")


def check_rng_state(rng_state: Any) -> None:
    """Refuse a ``rng_state`` that is not ``{"cpu": ByteTensor, "cuda": [ByteTensor, ...]}``.

    Both keys are optional; ``cpu`` is what ``torch.get_rng_state()`` returns and ``cuda`` what
    ``torch.cuda.get_rng_state_all()`` returns (one state per visible device).
    """
    if rng_state is None:
        return
    fix = (
        "pass rng_state={'cpu': torch.get_rng_state(), 'cuda': torch.cuda.get_rng_state_all()} "
        "taken before the step (cuda only when CUDA is in use)."
    )
    if not isinstance(rng_state, Mapping):
        raise DiagnosticArgumentError(
            f"rng_state must be a mapping, got {type(rng_state).__name__}; {fix}"
        )
    unknown = sorted(str(k) for k in rng_state if k not in RNG_KEYS)
    if unknown:
        raise DiagnosticArgumentError(f"rng_state has unknown key(s) {unknown}; {fix}")
    if "cpu" in rng_state and not _is_state(rng_state["cpu"]):
        raise DiagnosticArgumentError(
            f"rng_state['cpu'] must be a 1-D uint8 CPU tensor (torch.get_rng_state()), got "
            f"{_describe(rng_state['cpu'])}; {fix}"
        )
    if "cuda" in rng_state:
        states = rng_state["cuda"]
        if not isinstance(states, (list, tuple)) or not all(_is_state(s) for s in states):
            raise DiagnosticArgumentError(
                "rng_state['cuda'] must be a list of 1-D uint8 CPU tensors "
                f"(torch.cuda.get_rng_state_all()), got {_describe(states)}; {fix}"
            )
        available = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if states and len(states) != available:
            raise DiagnosticArgumentError(
                f"rng_state['cuda'] holds {len(states)} device states but {available} CUDA "
                f"devices are visible; {fix}"
            )


def _is_state(value: Any) -> bool:
    return (
        isinstance(value, torch.Tensor)
        and value.dtype == torch.uint8
        and value.dim() == 1
        and value.device.type == "cpu"
    )


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"a {value.dtype} tensor of shape {tuple(value.shape)} on {value.device}"
    return type(value).__name__


def replay_rng(rng_state: Mapping[str, Any] | None, undo: Undo) -> None:
    """Set torch's CPU and CUDA generators to the kept state (nothing when None).

    The CPU stream (and every CUDA stream of an initialised CUDA) is restored by the
    :func:`keep_user_state` registered before; CUDA streams set here get their own restore,
    registered before they are set, so a replay that initialises CUDA leaves its generators as
    they were.
    """
    if rng_state and rng_state.get("cuda"):
        cuda_before = torch.cuda.get_rng_state_all()
        undo.add(lambda: torch.cuda.set_rng_state_all(cuda_before))
    if rng_state and "cpu" in rng_state:
        torch.set_rng_state(rng_state["cpu"])
    if rng_state and rng_state.get("cuda"):
        torch.cuda.set_rng_state_all(rng_state["cuda"])


def keep_user_state(model: nn.Module, undo: Undo) -> None:
    """Register in ``undo`` everything a replay of ``model`` must leave as the user had it, then
    clear each parameter's ``.grad`` for the replay (its restore is already registered).

    Train/eval flags of every module, the ``.grad`` of every parameter (set to None for the
    replay, so a backward writes fresh tensors; the user's own tensors are put back untouched),
    buffers (BatchNorm running statistics), every global RNG stream (``keep_model_state``) and
    torch's grad mode, anomaly mode and default dtype (``keep_torch_switches``). Parameters are
    not copied: neither a forward nor a backward writes them. Cost: one copy of each buffer.
    Under ``_undo.undoing`` all of it is restored whatever instant an interrupt
    arrives at.
    """
    flags = [(module, module.training) for module in model.modules()]
    grads = [(param, param.grad) for param in model.parameters()]

    def restore() -> None:
        for param, grad in grads:
            param.grad = grad
        for module, training in flags:
            module.training = training

    undo.add(restore)
    keep_model_state(model, undo)
    keep_torch_switches(undo)
    for param, _ in grads:
        param.grad = None


def loss_arity(loss_fn: Any) -> int:
    """1 for ``loss_fn(output)``, 2 for ``loss_fn(output, inputs)`` (two positional parameters).

    Raises:
        DiagnosticArgumentError: ``loss_fn`` is not callable or takes no positional argument.
    """
    if not callable(loss_fn):
        raise DiagnosticArgumentError(
            f"loss_fn must be callable, loss_fn(output) or loss_fn(output, inputs), got "
            f"{type(loss_fn).__name__}."
        )
    try:
        signature = inspect.signature(loss_fn)
    except (TypeError, ValueError):  # a builtin without a signature: one argument
        return 1
    for arity in (1, 2):
        try:
            signature.bind(*([None] * arity))
            return arity
        except TypeError:
            continue
    raise DiagnosticArgumentError(
        f"loss_fn{signature} takes neither (output) nor (output, inputs); write it as "
        "loss_fn(output) or loss_fn(output, inputs)."
    )


ForwardFn = Callable[[nn.Module, Any], Any]
"""``forward_fn(model, batch)``: how a replay calls the model on the batch (a trainer's own
training step); it returns the model's output or the loss."""

ForwardCall = Literal["whole", "first"]
"""``whole``: ``model(*batch)`` / ``model(**batch)`` / ``model(batch)``; ``first``:
``model(batch[0])``, the ``(x, y)`` convention (see :func:`forward_call`)."""


def forward_call(model: nn.Module, inputs: Any, arity: int) -> ForwardCall:
    """``first`` when the batch is a list/tuple of two or more items, ``loss_fn`` takes the batch
    (``arity == 2``), and the forward's signature takes ``batch[0]`` alone but not the items as
    positional arguments (``nn.Linear(3, 1)`` with ``[x, y]``); else ``whole``.

    A forward whose signature cannot be read (``*args``) is called with the whole batch.
    """
    if arity != 2 or not isinstance(inputs, (list, tuple)) or len(inputs) < 2:
        return "whole"
    try:
        signature = inspect.signature(model.forward)
    except (TypeError, ValueError):
        return "whole"
    try:
        signature.bind(*inputs)
        return "whole"
    except TypeError:
        pass
    try:
        signature.bind(inputs[0])
    except TypeError:
        return "whole"
    return "first"


def describe_call(forward_fn: ForwardFn | None, call: ForwardCall) -> str | None:
    """The disclosure that says how the replay called the model (None for the plain call)."""
    if forward_fn is not None:
        name = getattr(forward_fn, "__qualname__", None)
        shown = f"{name}(model, batch)" if name else repr(forward_fn)
        return f"the model was called through forward_fn: {shown}."
    if call == "first":
        return (
            "the forward does not take the batch's items as positional arguments and loss_fn "
            "takes the batch: the model was called as model(inputs[0]) (the (x, y) convention) "
            "and the loss as loss_fn(output, inputs) with the whole batch."
        )
    return None


class StepModule(nn.Module):
    """The model's forward, then the loss: what one training step computes before backward.

    The model is not registered as a child, and ``named_modules`` / ``named_parameters`` /
    ``named_buffers`` are the model's own, so a capture of this module names every op, parameter
    and buffer exactly as a capture of the model would; ops of the loss run in the root module
    (address ``""``) at the loss function's own lines.
    """

    _model: nn.Module
    _loss_fn: Callable[..., Any] | None
    _forward_fn: ForwardFn | None

    def __init__(
        self,
        model: nn.Module,
        loss_fn: Callable[..., Any] | None,
        arity: int,
        inputs: Any,
        forward_fn: ForwardFn | None = None,
        call: ForwardCall = "whole",
    ) -> None:
        super().__init__()
        object.__setattr__(self, "_model", model)  # not a child: no "model." prefix
        object.__setattr__(self, "_loss_fn", loss_fn)  # an nn.Module loss is not a child either
        object.__setattr__(self, "_forward_fn", forward_fn)
        self._call = call
        self._arity = arity
        self._inputs = inputs
        self.loss_source: LossSource | None = None
        """Where the loss came from, once the forward ran."""
        self.loss_problem: str | None = None
        """Why no loss could be formed from the output (then ``forward`` returns the output)."""
        self.in_loss_fn = False
        """True while the caller's ``loss_fn`` runs (an exception there is the caller's)."""
        self.loss_value: float | None = None
        """The loss the forward produced (``item()``: one host read, recorded as no op)."""

    def again(self, inputs: Any) -> StepModule:
        """A fresh step of the same model, loss and call on ``inputs`` (the backward replay)."""
        return StepModule(
            self._model, self._loss_fn, self._arity, inputs, self._forward_fn, self._call
        )

    def named_modules(
        self, memo: set[nn.Module] | None = None, prefix: str = "", remove_duplicate: bool = True
    ) -> Iterator[tuple[str, nn.Module]]:
        yield prefix, self
        yield from self._model.named_modules(memo, prefix, remove_duplicate)

    def named_parameters(
        self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True
    ) -> Iterator[tuple[str, nn.Parameter]]:
        return self._model.named_parameters(prefix, recurse, remove_duplicate)

    def named_buffers(
        self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True
    ) -> Iterator[tuple[str, torch.Tensor]]:
        return self._model.named_buffers(prefix, recurse, remove_duplicate)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """The capture passes the items of ``self._inputs`` (the same tensors); ``forward_fn``
        and ``loss_fn`` get the batch object itself."""
        if self._forward_fn is not None:
            output = self._forward_fn(self._model, self._inputs)
        elif self._call == "first":
            output = self._model(args[0])
        else:
            output = self._model(*args, **kwargs)
        source: LossSource
        if self._loss_fn is not None:
            self.in_loss_fn = True
            loss = self._loss_fn(*(output, self._inputs)[: self._arity])
            self.in_loss_fn = False
            source = "loss_fn"
        elif isinstance(getattr(output, "loss", None), torch.Tensor):
            loss, source = output.loss, "output.loss"
        elif isinstance(output, Mapping) and isinstance(output.get("loss"), torch.Tensor):
            loss, source = output["loss"], "output['loss']"
        else:
            loss, source = output, "output"
        if not (isinstance(loss, torch.Tensor) and loss.numel() == 1 and loss.is_floating_point()):
            self.loss_problem = _loss_problem(source, loss)
            return output
        self.loss_source = source
        self.loss_value = loss.item()
        return loss


def _loss_problem(source: LossSource, loss: Any) -> str:
    what = _describe(loss)
    if source == "loss_fn":
        return (
            f"loss_fn returned {what}; it must return a floating-point tensor with one element "
            "(e.g. loss.mean())."
        )
    return (
        f"the model returned {what} with no tensor .loss or ['loss'], so there is no loss to "
        "replay; pass "
        "loss_fn=lambda output: ... (or loss_fn(output, inputs)) returning a scalar tensor, or "
        "call a Hugging Face model with labels= so its output carries .loss."
    )


def input_fields(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[tuple[str, torch.Tensor]]:
    """``(field, tensor)`` of each distinct tensor of a batch, in the order the capture numbers
    its input ops (``input_1`` first): the walk of ``capture.iter_tensors`` with names."""
    found: list[tuple[str, torch.Tensor]] = []
    seen: set[int] = set()
    top: list[tuple[str, Any]] = [
        ("inputs" if len(args) == 1 and not kwargs else f"inputs[{i}]", a)
        for i, a in enumerate(args)
    ]
    top += list(kwargs.items())
    for name, value in top:
        for field, tensor in _walk(value, name, 2):
            if id(tensor) not in seen:
                seen.add(id(tensor))
                found.append((field, tensor))
    return found


def _walk(value: Any, path: str, depth: int) -> Iterator[tuple[str, torch.Tensor]]:
    if isinstance(value, torch.Tensor):
        yield path, value
    elif depth > 4:
        return
    elif isinstance(value, (tuple, list)):
        for index, item in enumerate(value):
            yield from _walk(item, f"{path}[{index}]", depth + 1)
    elif isinstance(value, dict) or (hasattr(value, "items") and hasattr(value, "keys")):
        for key, item in value.items():
            yield from _walk(item, f"{path}[{key!r}]", depth + 1)


__all__ = [
    "ForwardCall",
    "ForwardFn",
    "StepModule",
    "check_rng_state",
    "describe_call",
    "forward_call",
    "input_fields",
    "keep_user_state",
    "loss_arity",
    "replay_rng",
]
