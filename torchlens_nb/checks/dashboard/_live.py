"""Where a session finds its notebook dashboard: the report layer's display seam.

``tl.report.live_dashboard`` (the one display edge from report to widgets) returns the live
widget inside a Jupyter kernel and None elsewhere (the session then uses the text view, which
prints the final report).
"""

from __future__ import annotations

from ...report import CheckReport, live_dashboard
from ._feed import LiveView, TextView


def open_live_view(snapshot: CheckReport) -> LiveView:
    """A widget showing ``snapshot`` in a notebook, else a :class:`TextView`."""
    view = live_dashboard(snapshot)
    return view if view is not None else TextView()
