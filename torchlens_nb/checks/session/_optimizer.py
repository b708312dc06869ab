"""The optimizer a session hooks: wrappers unwrapped, one attached session per optimizer, and
closure steps evaluated where their gradients can still be judged.

* Wrappers. accelerate's ``AcceleratedOptimizer`` (what ``accelerator.prepare`` and a Hugging Face
  ``Trainer`` hand out) subclasses ``torch.optim.Optimizer`` without running its ``__init__``, so
  it has no hook registries (``AttributeError: ... '_optimizer_step_pre_hooks'``). The session
  follows ``.optimizer`` down to the first object that is a fully built ``torch.optim.Optimizer``
  and hooks that one; the wrapper's ``step()`` calls it. A wrapper's ``.scaler`` (accelerate's
  GradScaler, or None) is the scaler declaration when the caller gave none.
* Optimizers that wrap a writing optimizer (SAM, github:davda54/sam ``sam.py``: ``first_step``
  perturbs the weights, ``second_step`` restores them and calls ``base_optimizer.step()``; the
  wrapper's own ``step`` is never called in its README's loop). The session hooks the optimizer
  that writes the update: ``.base_optimizer`` is followed before ``.optimizer`` (issue 42: on
  ``SAM.step`` the session saw no step at all); timm's Lookahead keeps it as
  ``_base_optimizer``. The wrapper's own writes (SAM's perturbation and its undoing, Lookahead's
  pull to the slow weights) are its method's work, not writes from outside the step:
  :func:`watch_wrapper_writes` tells the session when each of those methods returns.
* One session per optimizer. Two sessions on one optimizer cannot see the same evidence: the
  first one's pre-step raise stops ``step()`` before the second one's hook runs. The second
  :meth:`AttachedSessions.claim` is refused with a typed error instead.
* Closures (``torch.optim.LBFGS``, any ``step(closure)``, Lightning's automatic optimization).
  The backward runs inside ``step()``, after the step pre-hook. The pre-hook therefore runs the
  closure's first evaluation itself (under ``torch.enable_grad()``, as the optimizers do), judges
  its gradients before the optimizer's own code runs, and hands the optimizer an
  :class:`EvaluatedClosure` that returns that first loss and judges every later evaluation
  before the optimizer uses its gradients.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable
from typing import Any

import torch

from ...errors import DiagnosticArgumentError

MAX_WRAPPER_DEPTH = 8
"""``.optimizer`` links followed before giving up (accelerate nests one)."""


def unwrap_optimizer(optimizer: Any) -> torch.optim.Optimizer:
    """The fully built ``torch.optim.Optimizer`` inside ``optimizer`` (itself when it is one).

    Raises:
        DiagnosticArgumentError: no such optimizer is reachable through ``.optimizer``.
    """
    current = optimizer
    for _ in range(MAX_WRAPPER_DEPTH):
        base = _base_of(current)
        if base is not None and base is not current:
            current = base
            continue
        if isinstance(current, torch.optim.Optimizer) and hasattr(
            current, "_optimizer_step_pre_hooks"
        ):
            return current
        inner = getattr(current, "optimizer", None)
        if inner is None or inner is current:
            break
        current = inner
    if current is optimizer:
        raise DiagnosticArgumentError(
            f"ChecksSession needs a torch.optim.Optimizer, got {type(optimizer).__name__}; "
            "the step sites S-B/S-C are the optimizer's step hooks."
        )
    raise DiagnosticArgumentError(
        f"ChecksSession needs a torch.optim.Optimizer, got {type(optimizer).__name__} (its "
        f".optimizer chain ends at {type(current).__name__}, not a torch.optim.Optimizer); "
        "pass the real optimizer the wrapper steps."
    )


def wrapper_scaler(optimizer: Any, real: torch.optim.Optimizer) -> tuple[bool, Any]:
    """(whether a wrapper declares a scaler, that scaler): accelerate keeps its GradScaler, or
    None without mixed precision, as ``AcceleratedOptimizer.scaler``."""
    if optimizer is real or not hasattr(optimizer, "scaler"):
        return False, None
    return True, optimizer.scaler


BASE_ATTRIBUTES = ("base_optimizer", "_base_optimizer")
"""Where a wrapper keeps the optimizer that writes the update (SAM; timm's Lookahead)."""
WRAPPER_WRITE_METHODS = ("first_step", "second_step", "step")
"""Methods of a ``base_optimizer`` wrapper that may write the weights themselves (SAM's)."""


def watch_wrapper_writes(
    optimizer: Any, real: torch.optim.Optimizer, on_return: Callable[[], None], stack: Any
) -> None:
    """For a wrapper reached through ``.base_optimizer``: call ``on_return`` after each of its
    :data:`WRAPPER_WRITE_METHODS` returns (an instance attribute wrapping the bound method,
    removed by ``stack``: the user's object is as it was after detach). Nothing for an
    optimizer that is its own writer or an ``.optimizer`` wrapper (accelerate's may skip its
    inner step; its writes are the inner step's)."""
    if optimizer is real or _base_of(optimizer) is None:
        return
    for name in WRAPPER_WRITE_METHODS:
        method = getattr(optimizer, name, None)
        if not callable(method) or name in vars(optimizer):
            continue
        stack.callback(vars(optimizer).pop, name, None)  # the removal first (_interrupts)
        setattr(optimizer, name, _then(method, on_return))


def _base_of(optimizer: Any) -> torch.optim.Optimizer | None:
    """The writing optimizer a wrapper keeps as ``base_optimizer`` (SAM) or
    ``_base_optimizer`` (timm's Lookahead), if any."""
    for name in BASE_ATTRIBUTES:
        base = getattr(optimizer, name, None)
        if isinstance(base, torch.optim.Optimizer):
            return base
    return None


def _then(method: Callable[..., Any], on_return: Callable[[], None]) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        finally:
            on_return()

    return call


class AttachedSessions:
    """Which optimizer has an attached session (weak keys: a dropped optimizer frees its slot)."""

    def __init__(self) -> None:
        self._owners: weakref.WeakKeyDictionary[torch.optim.Optimizer, str] = (
            weakref.WeakKeyDictionary()
        )

    def claim(
        self, optimizer: torch.optim.Optimizer, owner: str, stack: contextlib.ExitStack
    ) -> None:
        """Mark ``optimizer`` as watched by ``owner`` until ``stack`` closes (the release is
        registered first, so an interrupt between the two leaves no claim behind).

        Raises:
            DiagnosticArgumentError: another attached session watches it.
        """
        other = self._owners.get(optimizer)
        if other is not None:
            raise DiagnosticArgumentError(
                f"this {type(optimizer).__name__} is already watched by another attached "
                f"ChecksSession ({other}); a second session cannot see the evidence the first "
                "one stops on. Register the checks on that session, or detach it first."
            )
        stack.callback(self._release, optimizer, owner)
        self._owners[optimizer] = owner

    def _release(self, optimizer: torch.optim.Optimizer, owner: str) -> None:
        if self._owners.get(optimizer) is owner:
            del self._owners[optimizer]


ATTACHED = AttachedSessions()
"""The process's registry (sessions on different optimizers never interact)."""


def closure_of(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Callable[[], Any] | None:
    """The closure a ``step(...)`` call passes (positional or ``closure=``), or None.

    A step pre-hook gets the call's ``args`` with the optimizer itself first (torch's
    ``Optimizer.profile_hook_step`` passes ``(self, *args)``).
    """
    closure = kwargs.get("closure", args[1] if len(args) > 1 else None)
    return closure if callable(closure) else None


def with_closure(
    args: tuple[Any, ...], kwargs: dict[str, Any], closure: Callable[[], Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The same ``step`` arguments (optimizer first) with the closure replaced."""
    if "closure" in kwargs:
        return args, {**kwargs, "closure": closure}
    return (args[0], closure, *args[2:]), kwargs


class EvaluatedClosure:
    """The closure the optimizer gets after the session ran (and judged) its first evaluation.

    The first call returns that evaluation's loss without running the closure again; every
    later call (LBFGS re-evaluates inside its line search) runs it, then calls ``judge`` before
    handing the loss back, so a non-finite gradient raises before the optimizer uses it.
    """

    def __init__(self, closure: Callable[[], Any], first_loss: Any, judge: Callable[[], None]):
        self._closure = closure
        self._first_loss = first_loss
        self._is_first = True
        self._judge = judge

    def __call__(self) -> Any:
        if self._is_first:
            self._is_first = False
            return self._first_loss
        loss = self._closure()
        self._judge()
        return loss
