"""Python's cyclic garbage collector, kept off the objects that existed before a capture or a
trace analysis started, while they allocate.

A trace of an op-dense model holds hundreds of thousands of tracked objects (ops, their tuples
and dicts), and a process holds as many more (torch, the notebook's state); every generation-2
collection that the allocations of a capture or an analysis trigger walks all of them.
``gc.freeze()`` on entry moves every object tracked so far to the collector's permanent
generation, which no collection scans; ``gc.unfreeze()`` on exit gives them back to the oldest
generation (both are O(1) list splices). Unlike disabling the collector, new reference cycles
are still collected: a forward that makes 20,000 short-lived self-referencing 10 KB objects
peaks as high under ``tl.trace`` as without it, where a disabled collector held all of them
(8 -> 204 MB, ``tests/capture/test_gc_pause.py``), and the user's own ``gc.disable()`` or
``gc.enable()`` during a capture is left as they made it. The save=True capture of
``benchmarks/bench_audit.py``'s 21,171-op model, side by side in one process (4 rounds, a
machine at load average 10-13): median 0.55x the time of an unpaused capture with the objects
frozen, 0.51x with the collector disabled as before (min 0.50x / 0.30x; docs/benchmarks.md).

Process-wide and shared by every thread: the first holder freezes, the last one to leave
unfreezes, so overlapping captures in several threads never leave objects frozen. When the user
froze objects themselves (``gc.get_freeze_count() > 0`` at the first entry) nothing is frozen or
unfrozen: their frozen set stays theirs.

No lock: a lock taken here could be left held by a Ctrl-C, and the undo that retries
:func:`_leave` in the same thread would then wait on it forever (``tests/faults/
test_interrupt_sweep_capture.py`` interrupts every line). Each step is one GIL-atomic operation
on ``_holders`` (a set: ``add`` and ``discard`` are idempotent, so a retried step is harmless),
and the flag ``_is_frozen_by_us`` is set before the freeze and cleared after the unfreeze, so an
interrupt between any two lines leaves a state the undo finishes. Threads switch only where a
signal could land, and every interleaving of two holders ends unfrozen with no holder: the worst
one (a thread entering while the last holder unfreezes) runs its capture unfrozen, slower but
correct (``tests/capture/test_gc_pause.py``: overlapping captures in threads).
"""

from __future__ import annotations

import functools
import gc
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from .._undo import Undo, undoing

P = ParamSpec("P")
T = TypeVar("T")

_holders: set[object] = set()
_is_frozen_by_us = False


def pause_gc(undo: Undo) -> None:
    """Hold the pause until ``undo`` runs (its undo is registered first, see ``_undo``)."""
    token = object()
    undo.add(functools.partial(_leave, token))
    _enter(token)


class _Pause:
    """What :func:`paused_gc` returns: a ``with`` block or a decorator that holds the pause."""

    def __enter__(self) -> None:
        self._token = object()
        _enter(self._token)

    def __exit__(self, *exc_info: object) -> None:
        _leave(self._token)

    def __call__(self, function: Callable[P, T]) -> Callable[P, T]:
        @functools.wraps(function)
        def paused(*args: P.args, **kwargs: P.kwargs) -> T:
            def body(undo: Undo) -> T:
                pause_gc(undo)
                return function(*args, **kwargs)

            return undoing(body)

        return paused


def paused_gc() -> _Pause:
    """Hold the pause for the block, or for each call of a function decorated ``@paused_gc()``.

    The decorator form survives an interrupt at any instant of the call (the pause's end is
    registered before it starts, and retried: ``_undo.undoing``); a ``with`` block cannot
    guard its own ``__exit__``, so the tools use the decorator.

    Example:
        >>> import gc
        >>> before = gc.get_freeze_count()
        >>> with paused_gc():
        ...     gc.get_freeze_count() > before, gc.isenabled()
        (True, True)
        >>> gc.get_freeze_count() == before
        True
    """
    return _Pause()


def _enter(token: object) -> None:
    global _is_frozen_by_us
    _holders.add(token)
    if len(_holders) == 1 and not _is_frozen_by_us and gc.get_freeze_count() == 0:
        _is_frozen_by_us = True  # first: an interrupt after it unfreezes nothing of theirs
        gc.freeze()


def _leave(token: object) -> None:
    global _is_frozen_by_us
    _holders.discard(token)
    if not _holders and _is_frozen_by_us:
        gc.unfreeze()
        _is_frozen_by_us = False
