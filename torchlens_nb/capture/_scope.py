"""The scope of a capture: its thread, the captures around it, and the process-wide state.

Three things are process-wide in PyTorch and a capture changes them: the ``torch.compile``
stance (``force_eager``, so compiled regions run as recorded eager code), the ``torch.vmap``
entry point (so a vmap call is recorded as one op instead of being lost) and
``nn.Module._call_impl`` (wrapped, so module calls reach the capture's tracker, see
``_modules``). They are changed when the first capture of the process starts and restored when
the last one ends, under a lock, however captures in several threads interleave: two
overlapping captures each restoring "their" stance left the process at ``force_eager``
(tests/capture/test_threads.py).

Torch-function modes are per-thread, so a forward in another thread is never recorded, and the
module-call wrapper hands a call to the capture of the calling thread only (a thread without
one pays one thread-local lookup per module call). Each thread keeps a stack of its active
captures: a capture started inside another (a ``tl.trace`` in a forward hook) suspends the outer
recorder until it ends, so the outer one does not record the inner capture's ops and the inner
one never sees the outer's; module and vmap calls go to the innermost capture.
"""

from __future__ import annotations

import functools
import sys
import threading
import time
from typing import Any

import torch
from torch import nn

from .._undo import Undo
from ._installs import pop_mode, push_mode
from ._modules import ModuleTracker
from ._recorder import Recorder
from ._tensors import arg_tensors, tensors_in

_lock = threading.Lock()
_local = threading.local()
_eval_frame_callback = torch._C._dynamo.eval_frame.get_eval_frame_callback
"""What tells a ``torch.compile`` region (a C function: reading it imports no dynamo)."""


class _ProcessState:
    """The globals the captures share while at least one is running (guarded by ``_lock``)."""

    def __init__(self) -> None:
        self.holders: set[int] = set()
        """``id`` of the recorder of every running capture."""
        self.vmap_original: Any = None
        """The ``torch.vmap`` entry point found before (None: not routed)."""
        self.stance: Any = None
        """The ``torch.compile`` stance found before the first capture (None: not changed)."""
        self.call_impl: Any = None
        """``nn.Module._call_impl`` as found before the first capture (None: not wrapped)."""


_state = _ProcessState()


def _thread_stack() -> list[ModuleTracker]:
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    return stack


def active_recorder() -> Recorder | None:
    """The recorder of the capture running in this thread (the innermost one), or None."""
    stack = getattr(_local, "stack", None)
    return stack[-1].rec if stack else None


def _tracked_call_impl(module: nn.Module, *args: Any, **kwargs: Any) -> Any:
    """``nn.Module._call_impl`` while captures run: the call, between the tracker's ``enter``
    and ``exit`` when this thread has a capture."""
    call_impl = _state.call_impl
    stack = getattr(_local, "stack", None)
    if not stack or call_impl is None:
        return (call_impl or _ORIGINAL_CALL_IMPL)(module, *args, **kwargs)
    tracker = stack[-1]
    tracker.enter(module, args)
    output = None
    try:
        output = call_impl(module, *args, **kwargs)
    finally:
        tracker.exit(module, output)
    return output


_MODULE: Any = nn.Module
"""``nn.Module``, typed loosely: its ``_call_impl`` is swapped for a plain function."""
_ORIGINAL_CALL_IMPL = nn.Module._call_impl
"""What a call that reaches the wrapper after the last capture ended runs (a module whose
``_call_impl`` was bound while a capture ran)."""


def enter_scope(recorder: Recorder, tracker: ModuleTracker, undo: Undo) -> None:
    """Make ``recorder`` this thread's active capture and its mode the innermost one.

    The tracker's marker hooks are registered for this capture only (their first check is the
    thread); an enclosing capture of this thread is suspended and paused until this one ends. Each step's undo goes to ``undo``
    before the step runs (``_undo``): ``undo.run()`` ends the scope, whatever instant an
    interrupt stopped the steps at.
    """
    undo.add(functools.partial(_release, recorder))
    _acquire(recorder)
    stack = _thread_stack()
    outer = stack[-1].rec if stack else None
    undo.add(functools.partial(_leave_thread, stack, tracker, outer))
    if outer is not None:  # no signal check between these stores and the append's return
        outer.suspended += 1
        outer.paused += 1
    stack.append(tracker)
    undo.add(tracker.remove_hooks)
    tracker.install_hooks()
    undo.add(functools.partial(pop_mode, recorder))
    push_mode(recorder)


def _leave_thread(
    stack: list[ModuleTracker], tracker: ModuleTracker, outer: Recorder | None
) -> None:
    if tracker in stack:
        if outer is not None:
            outer.suspended -= 1
            outer.paused -= 1
        stack.remove(tracker)


def running_captures() -> int:
    """How many captures are running in the process (all threads)."""
    return len(_state.holders)


def _acquire(recorder: Recorder) -> None:
    with _lock:
        if not _state.holders:
            _route_vmap()
            _wrap_call_impl()
        _state.holders.add(id(recorder))
        eval_frame = sys.modules.get("torch._dynamo.eval_frame")
        if _state.stance is None and eval_frame is not None:
            # only when dynamo is loaded: importing it costs seconds, and without it nothing
            # is compiled. The stance found is kept first, so _release restores it however far
            # _set_stance got; raises inside a compiled region (then _release undoes the rest)
            _state.stance = eval_frame._stance
            _set_stance(eval_frame, _force_eager(eval_frame))


def _force_eager(eval_frame: Any) -> Any:
    """The ``force_eager`` stance, made once (``torch.compiler.set_stance("force_eager")``
    builds it and a context-manager object on every call)."""
    global _FORCE_EAGER
    if type(_FORCE_EAGER) is not eval_frame.DynamoStance:
        _FORCE_EAGER = eval_frame.DynamoStance("force_eager")
    return _FORCE_EAGER


_FORCE_EAGER: Any = None
"""``torch._dynamo.eval_frame.DynamoStance("force_eager")``, once dynamo is loaded."""


def _set_stance(eval_frame: Any, stance: Any) -> None:
    """``torch._dynamo.eval_frame._set_stance(stance)`` without its function-local import of
    ``get_eval_frame_callback``. With ``_force_eager`` it cut the 3-op model's capture to 0.91x
    of its time in a process where dynamo is loaded (transformers loads it): about 20 us of
    ``benchmarks/bench_capture.py``'s fixed cost (CPU time, A/B in one process, 31 rounds).

    Raises:
        RuntimeError: inside a ``torch.compile`` region, as ``_set_stance`` does.
    """
    callback = _eval_frame_callback()
    if callback is not False and callback is not None:
        raise RuntimeError("attempted to set_stance in a torch.compile region")
    eval_frame._stance = stance


def _release(recorder: Recorder) -> None:
    with _lock:
        _state.holders.discard(id(recorder))
        if _state.holders:
            return
        _unwrap_call_impl()
        original = _state.vmap_original
        if original is not None:  # restored before it is forgotten: a retried release redoes it
            sys.modules["torch._functorch.apis"].vmap_impl = original  # type: ignore[attr-defined]
        _state.vmap_original = None
        if _state.stance is not None:  # setting the stance found again is safe to repeat
            _set_stance(sys.modules["torch._dynamo.eval_frame"], _state.stance)
            _state.stance = None


def _wrap_call_impl() -> None:
    # the original is kept first: _unwrap_call_impl restores it whatever instant this stopped at
    # (a plain function read off the class: nn.Module is the root of its MRO)
    current = _MODULE._call_impl
    if current is not _tracked_call_impl:
        _state.call_impl = current
        _MODULE._call_impl = _tracked_call_impl


def _unwrap_call_impl() -> None:
    if _MODULE._call_impl is _tracked_call_impl and _state.call_impl is not None:
        _MODULE._call_impl = _state.call_impl
    _state.call_impl = None


def _route_vmap() -> None:
    """Route ``torch.vmap`` calls through ``_record_vmap`` (``torch.vmap``, ``torch.func.vmap``
    and earlier ``from torch import vmap`` aliases all call ``torch._functorch.apis.vmap_impl``
    at call time); the original entry point is kept in ``_state`` before the route is set, so
    ``_release`` restores it whatever instant an interrupt stopped this at (None when this
    torch has none: then vmap calls are not intercepted)."""
    global _vmap_route
    apis = sys.modules.get("torch._functorch.apis")
    original = getattr(apis, "vmap_impl", None)
    if original is not None:
        if _vmap_route.args[0] is not original:  # made once per entry point, not per capture
            _vmap_route = functools.partial(_record_vmap, original)
        _state.vmap_original = original
        apis.vmap_impl = _vmap_route  # type: ignore[union-attr]


def _record_vmap(original: Any, func: Any, *args: Any, **kwargs: Any) -> Any:
    recorder = active_recorder()
    if recorder is None or recorder.suspended:
        return original(func, *args, **kwargs)
    # vmap_impl(func, in_dims, out_dims, randomness, chunk_size, *inputs, **kwargs)
    inputs = arg_tensors(args[4:], kwargs)
    frame = sys._getframe(1)
    recorder.suspended += 1
    begin = time.perf_counter_ns()
    try:
        out = original(func, *args, **kwargs)
    except BaseException:
        recorder.record_unseen("vmap", None, "vmap", inputs, [], 0, frame)
        raise
    finally:
        recorder.suspended -= 1
    duration = time.perf_counter_ns() - begin
    recorder.record_unseen("vmap", None, "vmap", inputs, tensors_in(out), duration, frame)
    return out


_vmap_route = functools.partial(_record_vmap, None)
"""The routed entry point last installed (``_route_vmap``)."""
