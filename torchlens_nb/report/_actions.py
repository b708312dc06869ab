"""How a report holds its follow-ups, and how it says that one cannot run.

A report's ``actions`` are named callables returning another report (the next lineage ring, a
row's lineage, the check an audit ran). They must not depend on the user keeping a variable
alive: what a follow-up needs is held strongly in the action as plain data (the lineage
follow-ups keep an ``OpGraph`` of the trace: labels, modules, lines, shapes, finiteness, no
tensors), and only live values (saved tensors, a model) are held by weak reference.

A follow-up that truly needs a live object declares it with :func:`live_action`. While the
object is gone the report's payload says so before anything is clicked: the exit carries
``disabled_reason`` and the envelope's ``unavailable_actions`` maps the action to that reason,
so the panel disables the button (or the row click) with the reason shown. The panel widget
re-sends the payload when such an object is released (``on_release``), so a button displayed
while the object lived turns disabled when it goes.
"""

from __future__ import annotations

import functools
import inspect
import weakref
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ..errors import UnavailableError

if TYPE_CHECKING:
    from ._base import Report


class LiveAction:
    """A follow-up that needs ``needs`` alive; build it with :func:`live_action`."""

    def __init__(self, run: Callable[..., Report], needs: object, gone: str) -> None:
        self._run = run
        self._held = weakref.ref(needs)
        self._gone = gone
        self.__signature__ = inspect.signature(run)  # run_action binds the caller's arguments
        functools.update_wrapper(self, run)

    def __call__(self, *args: Any, **kwargs: Any) -> Report:
        if self._held() is None:
            raise UnavailableError(self._gone, code="released")
        return self._run(*args, **kwargs)

    def unavailable_reason(self) -> str | None:
        """Why this follow-up cannot run now (the object it needs was released), or None."""
        return self._gone if self._held() is None else None

    def on_release(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (once) when the object this follow-up needs is released."""
        if self._held() is not None:
            weakref.finalize(self._held(), callback)


def live_action(run: Callable[..., Report], *, needs: object, gone: str) -> LiveAction:
    """A follow-up ``run`` that needs the object ``needs``, held by weak reference.

    Args:
        run: the follow-up; it reads ``needs`` through its own weak reference.
        needs: the live object (a model, a trace whose values the follow-up reads).
        gone: the sentence shown (disabled button, error) once ``needs`` was released: what
            is missing and what to do, e.g. ``"the model was released; re-run the cell."``.

    Example:
        >>> from torch import nn
        >>> import torchlens_nb as tl
        >>> model = nn.Linear(2, 2)
        >>> ref = weakref.ref(model)
        >>> action = live_action(lambda: tl.report.doctor(ref()), needs=model,
        ...                      gone="the model was released; keep a reference to it.")
        >>> action.unavailable_reason() is None
        True
    """
    return LiveAction(run, needs, gone)


def unavailable_reason(action: Callable[..., Any]) -> str | None:
    """Why ``action`` cannot run now, or None (a plain callable can always be tried)."""
    probe = getattr(action, "unavailable_reason", None)
    return probe() if callable(probe) else None


def unavailable_actions(actions: Mapping[str, Callable[..., Any]]) -> dict[str, str]:
    """``name -> reason`` for every follow-up of ``actions`` that cannot run now."""
    reasons = {name: unavailable_reason(action) for name, action in actions.items()}
    return {name: reason for name, reason in sorted(reasons.items()) if reason is not None}


def on_release(actions: Mapping[str, Callable[..., Any]], callback: Callable[[], None]) -> None:
    """Call ``callback`` whenever an object one of ``actions`` needs is released."""
    for action in actions.values():
        hook = getattr(action, "on_release", None)
        if callable(hook):
            hook(callback)
