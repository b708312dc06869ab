"""Ctrl-C held back while our ``__exit__`` runs, then delivered: the ``with`` statement's gap.

In ``with session:`` the interpreter, not our code, calls ``__exit__``, and Python's Ctrl-C
(``SIGINT``'s handler, run at the next point where CPython checks for signals) can land at that
method's first instruction, before any ``try`` of ours exists: the hooks stay installed in a
session the user has left (measured in ``tests/faults/test_interrupts_with.py``: about 1
interrupt in 300 before this module, leaving the session's hooks or the probe's mode behind).
No code inside ``__exit__`` can close that gap, so the signal's handler does:

* While a scope of ours is open (:func:`hold_sigint` ... :func:`release_sigint`, refcounted), the
  main thread's ``SIGINT`` handler is :func:`_handler`, which calls the handler it replaced
  (``signal.default_int_handler``: ``KeyboardInterrupt``) unless the interrupted frame is inside
  a method decorated with :func:`shielded`.
* In a shielded method the interrupt is only recorded, and the method's wrapper raises
  ``KeyboardInterrupt`` when the method has finished (after ``on_interrupt``, the rollback of an
  ``__enter__`` that completed), so the interrupt still reaches the caller, once.

The wrapper's own code is what the handler looks for in the frame chain: its frame is the first
one a call of a shielded method enters, so an interrupt at the very entry of ``__exit__`` is held.
Between the wrapper's last check and its return there is no call (no signal check), so a held
interrupt is never left undelivered. Installed only from the main thread (the only one signals
reach), and only over a Python-level handler: a process that ignores Ctrl-C (``SIG_IGN``) or
kept the default action is left alone. A handler the user installs while a scope is open is
kept: release restores ours only if ours is still the one installed. Limit: ipykernel sets
``SIGINT`` to ``signal.default_int_handler`` around each cell it runs and puts its saved handler
back after, so a session attached in one cell and used in later ones is held only in the cell
that attached it (``with session:`` inside one cell, the usual form, is held throughout).
"""

from __future__ import annotations

import functools
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any, TypeVar

Method = TypeVar("Method", bound=Callable[..., Any])


class _State:
    held = 0
    """Open scopes that installed (or share) :func:`_handler`."""
    previous: Any = None
    """The handler :func:`_handler` replaced."""
    pending = False
    """An interrupt arrived inside a shielded method and waits for its end."""


_state = _State()


def _is_shielded(frame: FrameType | None) -> bool:
    while frame is not None:
        if frame.f_code is _SHIELD_CODE:
            return True
        frame = frame.f_back
    return False


def _handler(signum: int, frame: FrameType | None) -> None:
    if _is_shielded(frame):
        _state.pending = True
        return
    previous = _state.previous
    if callable(previous):
        previous(signum, frame)
    else:  # the previous handler was replaced meanwhile by a non-callable: Python's default
        signal.default_int_handler(signum, frame)


def hold_sigint() -> bool:
    """Open a scope whose shielded methods hold Ctrl-C; False when none could be opened (not
    the main thread, or ``SIGINT`` is not handled in Python). Pair with :func:`release_sigint`
    when it returned True."""
    if threading.current_thread() is not threading.main_thread():
        return False
    current = signal.getsignal(signal.SIGINT)
    if current is _handler:
        _state.held += 1
        return True
    if not callable(current):
        return False
    _state.previous = current
    _state.held = 1
    signal.signal(signal.SIGINT, _handler)
    return True


def release_sigint() -> None:
    """Close one scope opened by :func:`hold_sigint`; the last one puts the replaced handler
    back (when ours is still the one installed)."""
    if _state.held == 0:
        return
    _state.held -= 1
    if _state.held == 0 and threading.current_thread() is threading.main_thread():
        if signal.getsignal(signal.SIGINT) is _handler:
            signal.signal(signal.SIGINT, _state.previous)
        _state.previous = None


class SigintHold:
    """One owner's scope of :func:`hold_sigint`: :meth:`open` once, :meth:`close` any number of
    times (only the first close after an open that held releases it)."""

    __slots__ = ("_is_held",)

    def __init__(self) -> None:
        self._is_held = False

    def open(self) -> None:
        self._is_held = hold_sigint()

    def close(self) -> None:
        if self._is_held:
            self._is_held = False
            release_sigint()


def shielded(on_interrupt: Callable[[Any], None] | None = None) -> Callable[[Method], Method]:
    """Decorate a method whose run a Ctrl-C must not cut: one that arrives during it is raised
    as ``KeyboardInterrupt`` when it returns (or raises), after ``on_interrupt(self)``."""

    def decorate(method: Method) -> Method:
        @functools.wraps(method)
        def guarded(self: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                return method(self, *args, **kwargs)
            finally:
                if _state.pending:  # no call between this test and the return
                    if on_interrupt is not None:
                        on_interrupt(self)
                    _state.pending = False  # a second Ctrl-C meanwhile is this one
                    raise KeyboardInterrupt

        return guarded  # type: ignore[return-value]

    return decorate


_SHIELD_CODE = shielded()(lambda self: None).__code__
"""The code of every shielded wrapper (one inner function: one code object)."""
