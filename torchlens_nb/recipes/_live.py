"""Live display of a recipe that runs for a while (``overfit_one_batch``).

The first report is displayed in the running cell as a live panel (``report.live_panel``); every
later report is one ``widget.update(report)``: a single traitlet message, and the panel redraws
in place. Where no panel can be built, each push replaces the cell output through the display
handle instead (text card). Each pushed report is marked as shown (``mark_shown_live``): the
final one, which the recipe returns, displays as nothing in the same cell (``t = triage(...);
t`` shows one panel) and as usual from the next cell on. Pushes are throttled by the caller;
this module only knows where they go.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from .._validate import check_bool
from ..report import Report, live_panel
from ..report._display import mark_shown_live


def in_kernel() -> bool:
    """True inside a Jupyter kernel (an IPython shell with a kernel attached)."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return shell is not None and getattr(shell, "kernel", None) is not None


class PanelSink:
    """Displays the first report, then pushes each later one into the same panel."""

    def __init__(self) -> None:
        self._handle: Any = None
        self._widget: Any = None

    def __call__(self, report: Report) -> None:
        mark_shown_live(report)
        if self._widget is not None:
            self._widget.update(report)
            return
        from IPython.display import display

        if self._handle is None:
            self._widget = live_panel(report)
            self._handle = display(
                self._widget if self._widget is not None else report, display_id=True
            )
        else:
            self._handle.update(report)


def live_sink(live: bool | None) -> Callable[[Report], None] | None:
    """Where live reports go: a :class:`PanelSink` when ``live`` (None: inside a kernel)."""
    if live is None:
        live = in_kernel()
    return PanelSink() if check_bool("live", live, expect="True, False or None") else None
