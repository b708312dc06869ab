"""Undo actions that an interrupt cannot leave half done: each is registered before its change.

A Ctrl-C raises ``KeyboardInterrupt`` at the next point where CPython runs signal handlers (a
Python function's entry, a loop's back edge, the return of a C call), so it can land between
any two steps of an install (after ``register_module_forward_hook`` stored the hook, before the
handle reached an ``ExitStack``) or of a removal (between the two dicts a ``RemovableHandle``
deletes from). ``contextlib`` context managers do not survive that: an interrupt inside
``__enter__`` skips ``__exit__``, and one at the entry of ``__exit__`` skips its body.

So every undo is *state-based and idempotent* (it looks at the registry and removes what is
there, doing nothing when nothing is), and it is registered in an :class:`Undo` **before** the
change it undoes runs: whatever instant an interrupt arrives at, the undo is already known and
finds the change done, half done or not done. ``Undo.run`` retries an undo that was itself
interrupted; the caller's ``finally`` retries ``run`` until it completes and then raises the
first interrupt (:func:`undoing`, or that loop inlined in the frame that owns the ``try``: a
helper called from a ``finally`` can be interrupted at its entry, before its own ``try``).
Measured: ``tests/faults/test_interrupts.py`` (thousands of interrupts at random instants) and
the line sweeps of ``tests/faults/test_interrupt_sweep_*.py`` (one interrupt at every line the
kit runs: ``tl.trace`` 1,056 lines, ``find_nan`` 2,182, the recipes, ``with session:``); no
hook, mode or collector state left, each reaching the caller as ``KeyboardInterrupt``. A lock an
undo takes must be taken in a ``with`` block, never by ``acquire()`` then ``try``: CPython runs
no signal handler between ``acquire`` and the block's body, nor between its last call and
``__exit__``, while a lock an interrupt left held would make the retried undo wait forever.

Layer-free (it imports only ``_interrupts``): capture, debug, checks and recipes share it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from ._interrupts import SigintHold, shielded

T = TypeVar("T")


class Undo:
    """Undo actions, run last-registered first; each one state-based and idempotent."""

    __slots__ = ("_actions", "error")

    def __init__(self) -> None:
        self._actions: list[Callable[[], None]] = []
        self.error: BaseException | None = None
        """The first exception (an interrupt) that arrived while undoing; the caller raises it
        once everything is undone."""

    def add(self, action: Callable[[], None]) -> None:
        """Register ``action``; call this *before* the install that ``action`` undoes."""
        self._actions.append(action)

    def run(self) -> bool:
        """Run the pending actions; False when one was interrupted (call again to finish).

        An action is dropped only after it returned, so an interrupted one runs again (it is
        idempotent). The interrupt is kept in ``error``.
        """
        actions = self._actions
        try:
            while actions:
                actions[-1]()
                actions.pop()
        except BaseException as exc:
            if self.error is None:
                self.error = exc
            return False
        return True


def undoing(body: Callable[[Undo], T]) -> T:
    """``body(undo)`` with a fresh :class:`Undo`, then every undo it registered, whatever instant
    an interrupt arrives at; the first interrupt seen while undoing is raised once all is undone.

    For a diagnostic that changes process or model state around a run (``investigate``'s
    replay, spike forensics' re-runs): ``body`` registers each restore before the change it undoes. An interrupt at this
    function's entry comes before ``body`` changed anything; one inside ``body`` or inside an
    undo reaches the loop below, which retries until every undo has returned.
    """
    undo = Undo()
    try:
        return body(undo)
    finally:
        while True:  # no signal check between here and the first call inside the try
            try:
                if undo.run():
                    break
            except BaseException as exc:  # one that arrived at run's first line
                undo.error = undo.error or exc
        if undo.error is not None:
            raise undo.error


class UndoScope(Generic[T]):
    """A ``with`` block whose changes are undone at its end, whatever instant a Ctrl-C lands at.

    ``setup(undo)`` registers each restore in ``undo`` before the change it undoes and returns
    what ``as`` binds; the block's end runs them. For the context managers the kit's
    diagnostics enter around the caller's model (``recipes._model_state.preserved``,
    ``debug._isolation.preserved_rng_state``), where a ``contextlib.contextmanager`` is not
    enough: interrupted inside ``contextlib``'s ``__exit__`` before it resumes the generator,
    its ``finally`` runs only when the generator is freed, and a notebook keeps the interrupt's
    traceback (``sys.last_traceback``), which holds it: the model stayed in eval mode
    (``tests/faults/_sweep.py`` keeps the traceback while it reads the state, as a notebook
    does). Here ``__enter__`` and ``__exit__`` are ``_interrupts.shielded`` inside a SIGINT
    scope opened on entry: an interrupt that arrives in them waits until the restores have
    run, then reaches the caller as ``KeyboardInterrupt``.
    """

    __slots__ = ("_hold", "_setup", "_undo")

    def __init__(self, setup: Callable[[Undo], T]) -> None:
        self._setup = setup
        self._undo = Undo()
        self._hold = SigintHold()

    @shielded(on_interrupt=lambda self: self._close())
    def __enter__(self) -> T:
        self._hold.open()
        try:
            return self._setup(self._undo)
        except BaseException:
            self._close()
            raise

    @shielded()
    def __exit__(self, *exc_info: object) -> None:
        self._close()

    def _close(self) -> None:
        """Run every restore (an interrupt is held meanwhile), then close the SIGINT scope."""
        try:
            while not self._undo.run():
                pass  # an action interrupted outside a held scope: run it again
        finally:
            self._hold.close()
        if self._undo.error is not None:
            raise self._undo.error
