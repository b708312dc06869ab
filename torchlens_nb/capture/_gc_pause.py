"""Python's cyclic garbage collector, paused while a capture or a trace analysis allocates.

A trace of an op-dense model holds hundreds of thousands of tracked objects (ops, their tuples
and dicts), and every generation-2 collection that the allocations of a capture or an analysis
trigger walks all of them. On the 21,171-op trace of ``benchmarks/bench_audit.py``, measured in
one process, best of 5: the save=True capture 1139 -> 739 ms, ``dtype_range`` 774 -> 446 ms and
``trace.audit()`` 1171 -> 654 ms with the collector paused. Reference counting still frees
everything that is not in a reference cycle while it is paused; cycles made meanwhile are
collected by the next collection after it.

Process-wide and shared by every thread: the first entrant disables the collector (only if it
was enabled), the last one to leave enables it again, so overlapping captures in several
threads never leave it off, and a collector the user disabled stays disabled
(``tests/capture/test_gc_pause.py``).
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

_lock = threading.Lock()
_depth = 0
_was_enabled = False


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """Pause the cyclic collector for the block (also usable as a decorator: ``@paused_gc()``).

    Example:
        >>> import gc
        >>> with paused_gc():
        ...     gc.isenabled()
        False
        >>> gc.isenabled()
        True
    """
    global _depth, _was_enabled
    with _lock:
        if _depth == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _was_enabled:
                gc.enable()
