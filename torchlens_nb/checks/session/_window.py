"""Sustained M-of-N windows and the once-per-episode emission rule.

A check warns only on a SUSTAINED window: ``min_hits`` hits among the last ``window`` evaluations.
It warns once per (check, site) and is re-armed only after a clean window: ``window``
consecutive evaluations without a hit. Single hits are legitimate in training (an MoE expert or
an untaken branch receives no gradient on some steps), so one bad step never warns.
"""

from __future__ import annotations

from collections import deque

from ..._validate import is_int
from ...errors import DiagnosticArgumentError


def validate_window(window: int, min_hits: int) -> None:
    """Refuse windows that cannot be satisfied, before anything is registered."""
    counts = is_int(window) and is_int(min_hits)
    if not counts or window < 1 or not 1 <= min_hits <= window:
        raise DiagnosticArgumentError(
            f"need window >= 1 and 1 <= min_hits <= window, got window={window!r}, "
            f"min_hits={min_hits!r}; e.g. window=8, min_hits=6."
        )


class SustainedWindow:
    """The last ``window`` hit/miss facts of one subject (a parameter, a group, the model)."""

    __slots__ = ("_facts", "_hits", "min_hits")

    def __init__(self, window: int, min_hits: int) -> None:
        self._facts: deque[bool] = deque(maxlen=window)
        self._hits = 0
        self.min_hits = min_hits

    def push(self, hit: bool) -> bool:
        """Record one evaluation; return whether the window is now sustained."""
        if len(self._facts) == self._facts.maxlen and self._facts[0]:
            self._hits -= 1
        self._facts.append(hit)
        self._hits += hit
        return self._hits >= self.min_hits

    @property
    def hits(self) -> int:
        """Hits inside the current window."""
        return self._hits

    @property
    def length(self) -> int:
        """Evaluations inside the current window (at most ``window``)."""
        return len(self._facts)


class Emission:
    """Once-per-episode emission of one (check, site): armed -> emitted -> re-armed."""

    __slots__ = ("_clean_streak", "_window", "is_armed")

    def __init__(self, window: int) -> None:
        self._window = window
        self._clean_streak = 0
        self.is_armed = True

    def step(self, is_sustained: bool, is_clean: bool) -> bool:
        """Advance one evaluation; return True when the caller should emit now."""
        self._clean_streak = self._clean_streak + 1 if is_clean else 0
        if not self.is_armed and self._clean_streak >= self._window:
            self.is_armed = True
        if is_sustained and self.is_armed:
            self.is_armed = False
            return True
        return False
