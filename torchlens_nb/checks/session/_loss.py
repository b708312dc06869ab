"""The loss of each attempt: the root each backward starts from, kept on its device.

The parameter hooks of S-A see gradients, never the tensor a backward started from. While at
least one session is attached, :data:`LOSS_ROOTS` interposes ``torch.autograd.backward`` (which
``Tensor.backward`` calls by attribute lookup, so ``loss.backward()``, ``accelerator.backward``,
Lightning's ``manual_backward`` and ``scaler.scale(loss).backward()`` all pass through it): a
one-element root is detached and held as the backward's root until that call returns; the
session's S-D callback, which the autograd engine runs before ``backward`` returns, takes it.
A session whose parameters the backward reached is the one whose S-D fires, so two sessions
(a GAN's) each get their own loss. The root stays on its device; the engine reads it with the
step site's one host read (``_engine.Engine._judge_step_site``): no sync is added per step.

Not seen: ``torch.autograd.grad`` (no ``.grad`` is written, so the session sees no backward
either), a root with more than one element (``backward(gradient=...)``), and a function that
imported ``backward`` by name before the session attached. ``session.record_loss(loss)`` gives
such a loop's loss explicitly. Under a GradScaler the root is the scaled loss; the engine divides
by the scale the backward ran at.

The interposer is installed by the first attached session and removed when the last one
detaches (the removal is registered on the session's exit stack first, so an interrupt cannot
leave it behind); it is a plain function call around the original, about 1 us per backward.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from typing import Any

import torch


class LossRoots:
    """The process's backward interposer: the one-element root of the backward running now."""

    def __init__(self) -> None:
        self._users = 0
        self._original: Callable[..., Any] | None = None
        self._wrapper: Callable[..., Any] | None = None
        self._roots: list[torch.Tensor | None] = []

    @property
    def current(self) -> torch.Tensor | None:
        """The detached root of the innermost running ``torch.autograd.backward``, or None."""
        return self._roots[-1] if self._roots else None

    def use(self, stack: contextlib.ExitStack) -> None:
        """Interpose while ``stack`` is open (shared by every attached session)."""
        stack.callback(self._release)
        self._users += 1
        if self._users == 1 and self._original is None:
            original = torch.autograd.backward
            self._original = original
            self._wrapper = functools.wraps(original)(
                functools.partial(_interposed, self, original)
            )
            torch.autograd.backward = self._wrapper

    def _release(self) -> None:
        self._users = max(0, self._users - 1)
        if self._users == 0 and self._original is not None:
            if torch.autograd.backward is self._wrapper:  # another patch on top stays intact
                torch.autograd.backward = self._original
            self._original = self._wrapper = None
            self._roots.clear()

    def push(self, tensors: Any) -> None:
        root = tensors if isinstance(tensors, torch.Tensor) else None
        if isinstance(tensors, (tuple, list)) and len(tensors) == 1:
            root = tensors[0] if isinstance(tensors[0], torch.Tensor) else None
        self._roots.append(as_loss(root) if root is not None and root.numel() == 1 else None)

    def pop(self) -> None:
        if self._roots:
            self._roots.pop()


def as_loss(tensor: torch.Tensor) -> torch.Tensor:
    """A detached 1-element float32 copy on the tensor's own device (a device op, no sync)."""
    return tensor.detach().reshape(1).to(torch.float32, copy=True)


def _interposed(
    roots: LossRoots, original: Callable[..., Any], tensors: Any, *args: Any, **kw: Any
) -> Any:
    roots.push(tensors)
    try:
        return original(tensors, *args, **kw)
    finally:
        roots.pop()


LOSS_ROOTS = LossRoots()
"""The process's interposer (installed while a session is attached)."""
