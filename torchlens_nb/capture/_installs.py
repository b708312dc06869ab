"""Installs that an interrupt cannot leave half done: torch's mode stack and grad mode switched
by C calls, whose undo (``torchlens_nb/_undo.py``) is registered before the switch.

``TorchFunctionMode.__enter__`` and ``torch.no_grad().__enter__`` are Python frames: an
interrupt after they switched, before the ``with`` took hold, skips ``__exit__`` and leaves the
mode pushed or grad mode off. The helpers here make each switch a C call next to its undo.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import torch

T = TypeVar("T")

_stack_len = torch._C._len_torch_function_stack
_stack_at = torch._C._get_function_stack_at
_stack_pop = torch._C._pop_torch_function_stack
push_mode = torch._C._push_on_torch_function_stack
"""What ``TorchFunctionMode.__enter__`` does, without its Python frame (a signal check)."""
_set_grad_enabled = torch._C._set_grad_enabled


def pop_mode(mode: object) -> None:
    """Take ``mode`` off this thread's torch-function mode stack if it is on top of it."""
    depth = _stack_len()
    if depth and _stack_at(depth - 1) is mode:
        _stack_pop()


def without_grad(function: Callable[..., T], *args: Any) -> T:
    """``function(*args)`` with grad mode off, and grad mode as it was afterwards, raises and
    interrupts included.

    Not ``with torch.no_grad():``, whose ``__enter__`` is a Python frame: an interrupt after it
    switched grad mode off, before the ``with`` took hold, skips ``__exit__`` and leaves grad
    mode off for the rest of the session. Here the switch and its restore are C calls inside one
    ``try``/``finally`` (no signal check between the ``finally`` and the restore).
    """
    enabled = torch.is_grad_enabled()
    try:
        _set_grad_enabled(False)
        return function(*args)
    finally:
        _set_grad_enabled(enabled)
