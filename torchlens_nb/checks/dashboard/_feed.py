"""Throttled live increments from a session to its dashboard.

The session offers an update after each closed attempt and each backward; the feed sends at most
one message per ``MIN_INTERVAL_S`` (10 per second), each carrying everything since the previous
one (counters and check states as they are now, chart rows added since). An offer inside the
interval only marks the feed dirty; the next offer after the interval, ``report()``, ``detach()``
and scope exit deliver it, so the last state always arrives. The messages are built from host
numbers the checks already read: no device work, no sync.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

MIN_INTERVAL_S = 0.1
"""At most 10 messages per second: a notebook redraws at display rate, and each message is a
comm round through the kernel's IOPub channel."""


class LiveView(Protocol):
    """What a dashboard must accept (the widget, or the text fallback)."""

    def push(self, message: dict[str, Any]) -> None:
        """One increment while the loop runs."""

    def finish(self, report: Any) -> None:
        """The final ``CheckReport`` when the session's scope exits."""


class DashboardFeed:
    """Throttle plus sequence numbers between a session and one live view."""

    def __init__(
        self,
        view: LiveView,
        state: Callable[[], dict[str, Any]],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.view = view
        self._state = state
        self._clock = clock
        self._last_sent = -float("inf")
        self._is_dirty = False
        self.sent = 0

    def offer(self) -> None:
        """Send now if the interval has passed, else remember that there is news."""
        if self._clock() - self._last_sent >= MIN_INTERVAL_S:
            self.flush()
        else:
            self._is_dirty = True

    def flush(self) -> None:
        """Send the current state unconditionally."""
        self.sent += 1
        self.view.push({"type": "increment", "seq": self.sent, **self._state()})
        self._last_sent = self._clock()
        self._is_dirty = False

    def flush_if_dirty(self) -> None:
        if self._is_dirty:
            self.flush()

    def finish(self, report: Any) -> None:
        """Deliver the pending increment, then the final report."""
        self.flush_if_dirty()
        self.view.finish(report)


class TextView:
    """The dashboard outside a notebook: prints the final report's card, nothing before."""

    def __init__(self, write: Callable[[str], Any] = print) -> None:
        self._write = write

    def push(self, message: dict[str, Any]) -> None:
        """Increments are not printed: a terminal gets one summary, at the end."""

    def finish(self, report: Any) -> None:
        self._write(str(report))
