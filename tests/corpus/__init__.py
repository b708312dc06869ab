"""Healthy training loops written by others, ported small, each with a twin that plants the
matching bug (issue 42). Shared by the session's silent-bug tests, the stability check's
no-false-alarm test and triage's healthy population. API: ``docs`` in ``_loop.py``."""

from __future__ import annotations

from . import generative, rl, text, vision
from ._loop import Attach, HealthyLoop, LoopRun, TriageSetup

LOOPS: tuple[HealthyLoop, ...] = (
    *vision.LOOPS,
    *generative.LOOPS,
    *text.LOOPS,
    *rl.LOOPS,
)


def loop(name: str) -> HealthyLoop:
    """The corpus entry called ``name``."""
    for entry in LOOPS:
        if entry.name == name:
            return entry
    raise KeyError(f"no corpus loop {name!r}; known: {', '.join(e.name for e in LOOPS)}")


__all__ = ["LOOPS", "Attach", "HealthyLoop", "LoopRun", "TriageSetup", "loop"]
