"""Frozen option records for capture (``tl.options.CaptureOptions``) and its hook plans."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from ._validate import check_bool
from .errors import CaptureOptionsError


class SiteSelector(Protocol):
    """What ``tl.func`` / ``tl.module`` selectors provide to hook plans (see ``capture``)."""

    kind: str

    def matches_op(self, func: str, module_stack: tuple[str, ...]) -> bool: ...

    def matches_module(self, address: str) -> bool: ...


@dataclass(frozen=True)
class Site:
    """What a hook callback is told about the value it observes."""

    label: str
    """Trace label of the op that produced the value (for a module site: its output's op)."""
    func: str
    """Function name of that op, e.g. ``"softmax"``."""
    module: str
    """Module address: the innermost module of the op, or the module itself for module sites."""
    kind: str
    """``"op"`` for a function selector match, ``"module"`` for a module output."""
    selector: Any
    """The selector that matched (so one callback can serve several selectors)."""


HookCallback = Callable[[Site, Any], None]
"""``callback(site, value)``: observe ``value`` (a tensor); must not mutate it."""


@dataclass(frozen=True)
class HookPlan:
    """Callbacks that observe values at selected sites, adding no op to the trace.

    Callbacks run inside the capture with recording suspended, so torch calls they make are not
    recorded (tests/test_capture_hooks.py checks op counts with and without a plan). A callback
    must not modify the tensor it is given.
    """

    entries: tuple[tuple[SiteSelector, HookCallback], ...] = ()

    def __post_init__(self) -> None:
        for entry in self.entries:
            if not (isinstance(entry, tuple) and len(entry) == 2 and callable(entry[1])):
                raise CaptureOptionsError(
                    f"each hook plan entry must be (selector, callback), got {entry!r}."
                )
            if not hasattr(entry[0], "matches_op"):
                raise CaptureOptionsError(
                    f"hook plan selector must come from tl.func(...) or tl.module(...), "
                    f"got {entry[0]!r}."
                )

    def __add__(self, other: HookPlan) -> HookPlan:
        if not isinstance(other, HookPlan):
            return NotImplemented
        return HookPlan(self.entries + other.entries)

    @classmethod
    def combine(cls, plans: Iterable[HookPlan]) -> HookPlan:
        """One plan running every entry of ``plans`` in order."""
        entries: tuple[tuple[SiteSelector, HookCallback], ...] = ()
        for plan in plans:
            entries += plan.entries
        return cls(entries)


@dataclass(frozen=True)
class CaptureOptions:
    """How ``tl.trace`` records a forward pass.

    Example:
        >>> opts = CaptureOptions(save_grads=True)
        >>> opts.backward_ready
        True
    """

    save_grads: bool = False
    """Record the gradient of every op output in ``trace.backward(...)`` (implies backward_ready)."""
    backward_ready: bool = False
    """Keep each op's ``grad_fn`` so ``trace.backward(...)`` can log the grad_fn fire order."""
    hooks: HookPlan | None = None
    """Observers of values at selected sites (probes); add no op to the trace."""
    source_lines: bool = True
    """Record the user's file:line for every op (the first frame outside torch and torchlens_nb)."""
    keep_output: bool = True
    """Keep the model's return value as ``trace.output``."""

    def __post_init__(self) -> None:
        for name in ("save_grads", "backward_ready", "source_lines", "keep_output"):
            check_bool(f"CaptureOptions.{name}", getattr(self, name), error=CaptureOptionsError)
        if self.hooks is not None and not isinstance(self.hooks, HookPlan):
            raise CaptureOptionsError(
                f"CaptureOptions.hooks must be a HookPlan (e.g. probe.hook_plan()), "
                f"got {type(self.hooks).__name__}."
            )
        if self.save_grads and not self.backward_ready:
            object.__setattr__(self, "backward_ready", True)


__all__ = ["CaptureOptions", "HookCallback", "HookPlan", "Site", "SiteSelector"]
