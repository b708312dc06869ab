"""The single place where a report's rich display plugs in.

``mimebundle(report)`` returns the live panel (the anywidget view of ``widgets.widget_for``)
plus ``text/plain`` (the card) and ``text/html`` (a static card for nbconvert and GitHub);
``ipython_display(report)`` (``display(report)`` in a kernel) shows the card as an output of its
own beside the panel, so an executed notebook converted to HTML shows it with no network.
This module is the one upward edge of the layering (report -> widgets), imported inside the
display call. Display never raises: a panel that fails to build warns once per report type
(``TorchlensNbWarning``) and the bundle carries the card alone.

A report a live panel already shows in the running cell (``mark_shown_live``: the final state
of ``tl.recipes.triage`` or ``overfit_one_batch``) displays as nothing until that cell ends, so
``t = tl.recipes.triage(...); t`` shows one panel, not the live one and a copy below it; from
the next cell on, the same report displays as usual.
"""

from __future__ import annotations

import html
import os
import warnings
import weakref
from typing import TYPE_CHECKING, Any

from ..errors import ReportOptionError, TorchlensNbWarning

if TYPE_CHECKING:
    from ._base import Report

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"

_warned_report_types: set[str] = set()

_shown_live: dict[int, weakref.ref[Any]] = {}
"""id -> weak reference of each report a live panel shows in the running cell (the weak
reference tells a live report from a later object that reuses a collected one's id)."""


def mark_shown_live(report: Report) -> None:
    """Record that a live panel shows ``report`` in the running cell: displaying that same
    object again before the cell ends shows nothing (the panel above is its display). The
    record is dropped when the cell ends (IPython's ``post_run_cell`` event); outside a kernel
    nothing is recorded."""
    from IPython import get_ipython

    shell = get_ipython()
    if getattr(shell, "kernel", None) is None:
        return
    if _forget_shown_live not in shell.events.callbacks["post_run_cell"]:
        shell.events.register("post_run_cell", _forget_shown_live)
    _shown_live[id(report)] = weakref.ref(report)


def _forget_shown_live(result: Any = None) -> None:
    """``post_run_cell``: the cell ended, its live panels are ordinary outputs now."""
    from IPython import get_ipython

    _shown_live.clear()
    shell = get_ipython()
    if shell is not None and _forget_shown_live in shell.events.callbacks["post_run_cell"]:
        shell.events.unregister("post_run_cell", _forget_shown_live)


def _is_shown_live(report: Report) -> bool:
    ref = _shown_live.get(id(report))
    return ref is not None and ref() is report


def static_html(report: Report, *, beside_panel: bool = False) -> str:
    """A static HTML card: the same text as ``card()``, escaped, in a ``<pre>`` block.

    ``beside_panel`` marks the card shown as its own output next to a live panel: the panel's
    stylesheet hides it wherever the panel runs (js/shared/theme.css).
    """
    extra = " tln-card-beside-panel" if beside_panel else ""
    return (
        f'<div class="tln-static-card{extra}" data-report-type="{html.escape(report.report_type)}">'
        # inline style: the page showing this card may carry no stylesheet of ours
        f'<pre style="white-space: pre-wrap; overflow-wrap: break-word; word-break: normal">'
        f"{html.escape(report.card())}</pre></div>"
    )


def ipython_display(report: Report) -> None:
    """``display(report)`` in IPython: in a kernel the panel widget displays itself with its card
    beside it (``ReportWidget._ipython_display_``); in a terminal, or when no panel can be built
    (warned once, as in :func:`mimebundle`), the card alone; nothing while a live panel shows
    this report in the running cell (:func:`mark_shown_live`). Never raises."""
    from IPython import get_ipython
    from IPython.display import display

    if _is_shown_live(report):
        return
    widget = _panel(report) if getattr(get_ipython(), "kernel", None) is not None else None
    if widget is None:
        display({"text/plain": report.card(), "text/html": static_html(report)}, raw=True)
    else:
        display(widget)


def _panel(report: Report) -> Any:
    """The panel widget of ``report``, or None (warned once per report type) when it cannot
    be built."""
    try:
        from .. import widgets

        return widgets.widget_for(report)
    except Exception as exc:  # display never raises; the card is always there
        _warn_once(
            report.report_type,
            f"the {report.report_type!r} panel could not be built ({type(exc).__name__}: "
            f"{exc}); showing the text card. This warning is shown once per report type.",
        )
        return None


def mimebundle(report: Report) -> dict[str, Any]:
    """The display bundle of ``report``: widget view (when it builds), card text, static HTML."""
    bundle = {"text/plain": report.card(), "text/html": static_html(report)}
    widget = _panel(report)
    if widget is not None:
        view = widget._repr_mimebundle_()
        data = view[0] if isinstance(view, tuple) else view
        bundle[WIDGET_MIME] = data[WIDGET_MIME]
    return bundle


def live_panel(report: Report) -> Any:
    """A live panel widget of ``report`` whose ``update(new_report)`` redraws it in place.

    For diagnostics that run for a while in a cell (``tl.recipes.overfit_one_batch``): display
    the widget once, then push each new report (throttled by the caller to 10-20 Hz). Returns
    None when no panel can be built (warned once); callers then fall back to redisplaying text.

    Raises:
        ReportOptionError: ``report`` is not a :class:`~torchlens_nb.report.Report` (an
            explicit call, unlike display, refuses what it cannot show).
    """
    # duck-typed: _base imports this module, so Report cannot be imported here
    if not isinstance(getattr(report, "report_type", None), str) or not callable(
        getattr(report, "to_dict", None)
    ):
        raise ReportOptionError(
            f"live_panel needs a tl.report.Report, got {type(report).__name__}; pass the report "
            "a diagnostic returned (e.g. tl.report.live_panel(tl.recipes.init_loss(...)))."
        )
    try:
        from .. import widgets

        return widgets.widget_for(report)
    except Exception as exc:  # display never raises; the caller degrades to text
        _warn_once(
            "live:" + report.report_type,
            f"the live {report.report_type!r} panel could not be built "
            f"({type(exc).__name__}: {exc}); showing text updates instead.",
        )
        return None


def live_dashboard(report: Report) -> Any:
    """The live dashboard widget of a ``ChecksSession`` snapshot ``report``, or None.

    None outside a Jupyter kernel (the session then prints its final report instead). Like
    :func:`mimebundle` it never raises: a dashboard that fails to build warns once and gives
    None.
    """
    try:
        from .. import widgets

        return widgets.dashboard_for(report)
    except Exception as exc:  # display never raises; the session degrades to text
        _warn_once(
            "live:" + report.report_type,
            f"the live {report.report_type!r} dashboard could not be built "
            f"({type(exc).__name__}: {exc}); the session prints its final report instead.",
        )
        return None


def _warn_once(key: str, message: str) -> None:
    """Warn with ``message`` the first time ``key`` fails in this process (display paths)."""
    if key not in _warned_report_types:
        _warned_report_types.add(key)
        warnings.warn(message, TorchlensNbWarning, stacklevel=3)


def to_html(report: Report, path: str | os.PathLike[str] | None = None) -> str:
    """Self-contained HTML rendering ``report``'s panel offline; written to ``path`` if given.

    Raises:
        PanelError: the panel bundle was not built (``make bundle``).
    """
    from .. import widgets

    text = widgets.standalone_html(report, static_html(report))
    if path is not None:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
    return text
