"""Ctrl-C at every line: count the line events a call runs in our files, then interrupt at each.

A random timer lands where a call spends its time; the instants that leak are a few lines out
of thousands (the first sweep of ``tl.trace`` left ``torch.vmap`` routed at 2 of its 1,056
lines, which 2,000 random interrupts had missed).

:func:`count_lines` runs the call once under ``sys.settrace`` and counts the ``line`` events
in the package's own files and the helpers it calls (:data:`HELPERS`). For each
index, :func:`interrupt_at` runs the call again and, at that event, raises ``SIGINT`` with
``signal.raise_signal``: Python runs the main thread's ``SIGINT`` handler right there, with the
traced frame below it, as on a real Ctrl-C, so the kit's own handler decides whether to hold
the interrupt (``torchlens_nb/_interrupts.py``). A handler that raises ends the trace (CPython
drops a trace function that raises) and the ``KeyboardInterrupt`` surfaces at that line.
Two kinds of line start are instants at which CPython never runs a signal handler, and the
interrupt moves to the next line event (:func:`_is_deferred`): a ``try:`` and the exit of a
``with`` block. Raising there would skip a ``finally`` or an ``__exit__``, which no Ctrl-C can
do (with them swept too, a ``with lock:`` left its lock held at its exit and the undo waited on
it forever; ``capture/_gc_pause.py`` now holds no lock at all).

The state is read while the interrupt's traceback is still held, as a notebook holds it
(:attr:`Run.interrupt`). Every run is guarded by :class:`Watchdog`: a run that does not return within its timeout
(a deadlock on a lock the interrupted attempt still holds) is broken by a signal and reported
with the line it was interrupted at and the line it hung in.
"""

from __future__ import annotations

import contextlib
import dis
import os
import pathlib
import signal
import sys
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from types import CodeType, FrameType
from typing import Any

import torch

import torchlens_nb

PACKAGE_DIR = str(pathlib.Path(torchlens_nb.__file__).resolve().parent) + os.sep
TORCH_DIR = str(pathlib.Path(torch.__file__).resolve().parent) + os.sep
HELPERS = (
    f"{TORCH_DIR}autograd{os.sep}grad_mode.py",
    f"{TORCH_DIR}utils{os.sep}hooks.py",
    contextlib.__file__,
)
"""The Python helpers the kit calls to switch grad mode, remove hooks and run its ``with``
blocks (torch's, and ``contextlib``'s ``__exit__`` of a generator context manager): an
interrupt inside them is an interrupt inside the kit's install or undo. Only their calls from
the kit count: torch's own windows (``torch.optim.optimizer._use_grad`` restores grad mode through
``set_grad_enabled`` in its ``finally``) are torch's, as a Ctrl-C there leaves the same state
without the kit."""

FULL_SWEEP = os.environ.get("TORCHLENS_NB_FULL_SWEEP") == "1"
"""``TORCHLENS_NB_FULL_SWEEP=1``: interrupt at every line event of every entry point (no
stride); by default a call with more events than its budget is swept with a stride."""

HANG_TIMEOUT_S = 120.0
"""A run still going after this long is a hang (a run takes well under a second; the margin is
for a machine whose cores are shared by other jobs)."""

_watched: dict[CodeType, bool] = {}
_deferred: dict[CodeType, frozenset[int]] = {}


def _is_watched(code: CodeType) -> bool:
    known = _watched.get(code)
    if known is None:
        path = code.co_filename
        known = _watched[code] = path.startswith(PACKAGE_DIR) or path in HELPERS
    return known


def _is_deferred(frame: FrameType) -> bool:
    """Whether a Ctrl-C cannot be handled where this line starts, so the interrupt moves to the
    next line event (the next instant at which CPython checks for signals comes after it):

    * a ``NOP`` (a ``try:``): CPython 3.11 leaves the ``NOP`` of a nested ``try:`` out of the
      enclosing handler's range, so an exception raised there by a tracer skips an enclosing
      ``finally`` that a real Ctrl-C always reaches;
    * the exit of a ``with`` block (``LOAD_CONST None`` x3, then the call of ``__exit__``;
      after a ``SWAP`` that keeps the value of a ``return`` inside the block): no
      signal is checked between the block's last call and ``__exit__``'s return, and a tracer
      raising there would skip ``__exit__``, which the ``with`` statement guarantees.
    """
    code = frame.f_code
    offsets = _deferred.get(code)
    if offsets is None:
        offsets = _deferred[code] = _signal_free_starts(code)
    return frame.f_lasti in offsets


def _signal_free_starts(code: CodeType) -> frozenset[int]:
    instructions = [i for i in dis.get_instructions(code) if i.opname not in ("PRECALL", "CACHE")]
    found = set()
    for n, instruction in enumerate(instructions):
        if instruction.opname == "NOP":
            found.add(instruction.offset)
        start = n + 1 if instruction.opname == "SWAP" else n  # a `return` inside the block
        window = instructions[start : start + 4]
        if (
            len(window) == 4
            and all(i.opname == "LOAD_CONST" and i.argval is None for i in window[:3])
            and window[3].opname == "CALL"
            and window[3].arg == 2
        ):
            found.add(instruction.offset)
    return frozenset(found)


class SweepHang(BaseException):
    """Raised in the main thread by :class:`Watchdog` when a run overstays its timeout."""


class Watchdog:
    """One thread that turns a run that never returns into :class:`SweepHang`.

    ``arm(label)`` before a run and ``disarm()`` after it; past ``timeout_s`` the thread records
    the main thread's stack and signals it (``SIGUSR1``), whose handler raises ``SweepHang``: a
    blocking ``Lock.acquire`` returns to run it (PEP 475 retries only when the handler
    returns). A loop that swallows that exception and waits again (an undo retried until it
    completes) gets :data:`GRACE_S` more, then the process exits with the hang's report on
    stderr: a failure that names the line, never a silent CI timeout.
    """

    GRACE_S = 10.0

    def __init__(self, timeout_s: float = HANG_TIMEOUT_S) -> None:
        self.timeout_s = timeout_s
        self.stack: list[str] = []
        self.label = ""
        self._armed = threading.Event()
        self._done = threading.Event()
        self._stop = False
        self._thread = threading.Thread(target=self._watch, daemon=True, name="sweep-watchdog")

    def __enter__(self) -> Watchdog:
        self._previous = signal.signal(signal.SIGUSR1, self._raise_hang)
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop = True
        self._armed.set()
        self._done.set()
        self._thread.join()
        signal.signal(signal.SIGUSR1, self._previous)

    def _raise_hang(self, signum: int, frame: FrameType | None) -> None:
        raise SweepHang

    def _watch(self) -> None:
        main = threading.main_thread().ident
        assert main is not None
        while True:
            self._armed.wait()
            if self._stop:
                return
            if self._done.wait(self.timeout_s) or self._stop:
                continue
            frame = sys._current_frames().get(main)
            self.stack = traceback.format_stack(frame)[-6:] if frame else []
            signal.pthread_kill(main, signal.SIGUSR1)
            if not self._done.wait(self.GRACE_S):
                sys.__stderr__.write(
                    f"interrupt sweep: the run interrupted at {self.label} hung and swallowed "
                    f"the watchdog's exception; it waits in:\n{''.join(self.stack)}"
                )
                sys.__stderr__.flush()
                os._exit(3)

    def arm(self, label: str) -> None:
        self.stack, self.label = [], label
        self._done.clear()
        self._armed.set()

    def disarm(self) -> None:
        self._armed.clear()
        self._done.set()


def _short(frame: FrameType) -> str:
    path = frame.f_code.co_filename
    if path.startswith(PACKAGE_DIR):
        path = "torchlens_nb/" + path[len(PACKAGE_DIR) :]
    elif path.startswith(TORCH_DIR):
        path = "torch/" + path[len(TORCH_DIR) :]
    return f"{path}:{frame.f_lineno} ({frame.f_code.co_name})"


def _place(frame: FrameType) -> str:
    """``file:line (function)`` of the interrupted line, then its watched callers (up to 3)."""
    chain = [_short(frame)]
    caller = frame.f_back
    while caller is not None and len(chain) < 4 and _is_watched(caller.f_code):
        chain.append(_short(caller))
        caller = caller.f_back
    return " <- ".join(chain)


class _Tracer:
    """Counts line events in watched code; at event ``target`` raises ``SIGINT`` once."""

    def __init__(self, target: int | None, watchdog: Watchdog | None = None) -> None:
        self.watchdog = watchdog
        self.count = 0
        self.target = target
        self.where: str | None = None

    def on_call(self, frame: FrameType, event: str, arg: Any) -> Any:
        if self.where is not None or not _is_watched(frame.f_code):
            return None
        caller = frame
        while caller is not None and caller.f_code.co_filename in HELPERS:
            caller = caller.f_back  # a torch helper counts only when the kit called it
        if caller is None or not caller.f_code.co_filename.startswith(PACKAGE_DIR):
            return None
        return self.on_line

    def on_line(self, frame: FrameType, event: str, arg: Any) -> Any:
        if self.where is not None:
            return None
        if event != "line":
            return self.on_line
        if self.target is not None and self.count >= self.target and not _is_deferred(frame):
            self.where = _place(frame)
            if self.watchdog is not None:
                self.watchdog.label = f"line event #{self.count}, {self.where}"
            sys.settrace(None)
            signal.raise_signal(signal.SIGINT)  # the installed handler runs here, on this frame
            return None
        self.count += 1
        return self.on_line


def count_lines(call: Callable[[], object]) -> int:
    """The line events ``call()`` runs in watched code (the package, :data:`HELPERS`)."""
    tracer = _Tracer(None)
    sys.settrace(tracer.on_call)
    try:
        call()
    finally:
        sys.settrace(None)
    return tracer.count


@dataclass
class Run:
    """One interrupted run."""

    index: int
    """The line event the interrupt was raised at."""
    where: str | None
    """``file:line (function)`` of that event; None when the call ran out of events first."""
    outcome: str
    """``interrupted`` (KeyboardInterrupt reached the caller), ``finished`` (the call returned:
    it ended before the index, or held the interrupt and delivered none), ``hang`` or
    ``raised <type>: <message>``."""
    hang_stack: list[str] = field(default_factory=list)
    interrupt: KeyboardInterrupt | None = None
    """The interrupt that reached the caller, held with its traceback while :func:`sweep`
    reads the state, as a notebook holds it (``sys.last_traceback``): a ``contextlib``
    generator's ``finally`` that only its garbage collection would run is not run by then (the
    first sweep that held it found recipes' ``preserved()`` leaving the model in eval mode)."""


def interrupt_at(
    call: Callable[[], object],
    index: int,
    watchdog: Watchdog,
    reports_interrupt: Callable[[Any], bool] = lambda result: False,
) -> Run:
    """Run ``call()`` with ``SIGINT`` raised at line event ``index`` of watched code.

    ``reports_interrupt(result)``: whether a returned result is the call's documented answer
    to Ctrl-C (``tl.recipes.triage`` returns its partial report, status ``interrupted``)."""
    tracer = _Tracer(index, watchdog)
    interrupt: KeyboardInterrupt | None = None
    outcome = "finished"
    result: Any = None
    watchdog.arm(f"line event #{index}")
    try:
        try:
            sys.settrace(tracer.on_call)
            result = call()
        finally:
            sys.settrace(None)
            watchdog.disarm()
    except KeyboardInterrupt as exc:
        outcome, interrupt = "interrupted", exc
    except SweepHang:
        outcome = "hang"
    except BaseException as exc:  # what the caller would see instead of the interrupt
        outcome = f"raised {type(exc).__name__}: {str(exc)[:160]}"
    if outcome == "finished" and tracer.where is not None:
        outcome = "interrupted" if reports_interrupt(result) else "finished, interrupt swallowed"
    return Run(index, tracer.where, outcome, watchdog.stack, interrupt)


@dataclass
class Sweep:
    """What :func:`sweep` saw."""

    events: int
    """Line events of one uninterrupted call."""
    stride: int
    runs: int = 0
    interrupted: int = 0
    finished: int = 0
    problems: list[str] = field(default_factory=list)
    """One line per run that hung, raised something else, swallowed the interrupt or left
    state behind: the line it was interrupted at, then what went wrong."""


def stride_for(events: int, budget: int) -> int:
    """1 under ``TORCHLENS_NB_FULL_SWEEP=1`` or when ``events <= budget``, else the smallest
    stride that keeps the runs within ``budget``."""
    if FULL_SWEEP or events <= budget:
        return 1
    return -(-events // budget)


def sweep(
    call: Callable[[], object],
    state: Callable[[], dict[str, Any]],
    *,
    budget: int,
    delivered: tuple[str, ...] = (),
    reports_interrupt: Callable[[Any], bool] = lambda result: False,
    repair: Callable[[], None] = lambda: None,
) -> Sweep:
    """Interrupt ``call`` at every line event (every ``stride``-th past ``budget`` events) and
    compare ``state()`` after each run with what it was before the sweep.

    ``delivered``: outcomes that count as the interrupt reaching the caller (a framework that
    turns ``KeyboardInterrupt`` into its own exit); ``reports_interrupt``: see
    :func:`interrupt_at`. A run that left state behind is reported; ``repair()`` then puts back what it can (so one
    leaking line does not hide the next), and the sweep stops if state still differs.
    """
    call()  # warm-up: first-call caches would shift the events of the first run
    before = state()
    events = count_lines(call)
    result = Sweep(events=events, stride=stride_for(events, budget))
    with Watchdog() as watchdog:
        for index in range(0, events + 1, result.stride):
            run = interrupt_at(call, index, watchdog, reports_interrupt)
            result.runs += 1
            if run.outcome == "interrupted" or run.outcome in delivered:
                result.interrupted += 1
            elif run.outcome == "finished":
                result.finished += 1
            else:
                hung_in = (
                    f" hung in: {''.join(run.hang_stack[-2:]).strip()}" if run.hang_stack else ""
                )
                result.problems.append(f"#{index} at {run.where}: {run.outcome}{hung_in}")
                if run.outcome == "hang":
                    return result  # the process holds what the hung run held
            after = state()
            if after != before:
                changed = sorted(
                    f"{k}: {before[k]!r:.60} -> {after.get(k)!r:.60}"
                    for k in before
                    if before[k] != after.get(k)
                )
                result.problems.append(f"#{index} at {run.where} ({run.outcome}) left {changed}")
                repair()
                if state() != before:
                    return result
    return result
