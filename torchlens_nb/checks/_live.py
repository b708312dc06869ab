"""Where a session finds its notebook dashboard: the report layer's display seam.

``report._display.live_view`` is the one place allowed to reach the widgets layer; it returns
the live widget inside a Jupyter kernel and None elsewhere (the session then uses the text view,
which prints the final report).
"""

from __future__ import annotations

from ..report import _display
from ..report._checks import CheckReport
from ._feed import LiveView, TextView


def open_live_view(snapshot: CheckReport) -> LiveView:
    """A widget showing ``snapshot`` in a notebook, else a :class:`TextView`."""
    view = _display.live_view(snapshot)
    return view if view is not None else TextView()
