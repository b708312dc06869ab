"""The anywidget classes: one per panel kind, each synced from a report's payload.

``widget_for(report)`` builds the widget of the report's panel (see ``_registry``). Its
``payload`` trait is :func:`panel_payload` of the report and its ``arrays`` trait the report's
arrays as bytes. The browser may send two requests as custom messages; each carries
``request_id`` and ``report`` (0 is the displayed report, follow-ups get ids from Python):

* ``{"type": "action", "name", "args"}`` runs ``report.run_action(name, **args)`` and replies
  ``{"type": "reply", "payload", "panel", "child", "arrays"}`` (+ ``"esm"`` when the follow-up
  uses another panel), the arrays' bytes as message buffers;
* ``{"type": "page", "table", "sort", "descending", "filter", "offset", "limit"}`` replies
  ``{"type": "reply", "page": {...}}`` from pandas (:class:`TablePager`).

Any failure replies ``{"type": "error", "message"}``, which the panel shows; nothing raises
into the comm. When an object a follow-up needs is released (``report/_actions.py``), the widget
re-sends the payload, so the panel disables that button with its reason before it is clicked.
"""

from __future__ import annotations

import functools
import weakref
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

import anywidget
import traitlets

from .._validate import is_int
from ..errors import PanelError
from ..report._actions import on_release
from ._paging import TablePager
from ._payload import panel_arrays, panel_payload
from ._registry import THEME_CSS, bundle_path, panel_name

if TYPE_CHECKING:
    from ..report import Report

MAX_FOLLOWUPS = 64
"""Follow-up reports a widget keeps answerable; the oldest is dropped beyond this (reports are
plain data, so this bounds memory, not correctness: a dropped one answers with an error)."""


class ReportWidget(anywidget.AnyWidget):
    """Base of the panel widgets: the report's payload and arrays, plus the request handler.

    Build one with :func:`widget_for`; subclasses (one per panel) only set ``_esm``.
    """

    payload = traitlets.Dict().tag(sync=True)
    """``panel_payload(report)``: the envelope of ``report.to_dict()`` with bounded tables."""
    arrays = traitlets.Dict().tag(sync=True)
    """name -> ``{"dtype", "shape", "data": bytes}``; the bytes travel as binary buffers."""
    panel = traitlets.Unicode().tag(sync=True)
    """The panel name (``js/panels/<panel>.js``)."""

    def __init__(self, report: Report, **kwargs: Any) -> None:
        super().__init__(
            payload=panel_payload(report),
            arrays=panel_arrays(report),
            panel=panel_name(report),
            **kwargs,
        )
        self._reports: OrderedDict[int, Report] = OrderedDict({0: report})
        self._next_report_id = 1
        self._pagers: dict[tuple[int, str], TablePager] = {}
        self._card: Any = None
        self.on_msg(self._on_custom_message)
        self._watch_releases(report)

    @property
    def report(self) -> Report:
        """The displayed report."""
        return self._reports[0]

    def update(self, report: Report) -> None:
        """Show ``report`` instead (every view redraws; for live dashboards throttle to 10-20
        Hz). Follow-ups of the previous report stop answering; the panel kind stays the same.
        """
        with self.hold_sync():  # payload and arrays reach the browser in one message
            self.arrays = panel_arrays(report)
            self.payload = panel_payload(report)
        self._reports = OrderedDict({0: report})
        self._pagers.clear()
        self._watch_releases(report)
        if self._card is not None:  # the card beside the panel follows it (nbconvert keeps it)
            self._card.update(_card_bundle(report), raw=True)

    def _ipython_display_(self) -> None:
        """``display(widget)``: the report's card as an output of its own, then the panel.

        ``nbconvert --execute`` to HTML renders a stored widget view only through the widget
        manager it loads from a CDN, so offline the panel is blank; the card output is plain
        HTML every converter shows, and the panel's stylesheet hides it wherever the panel
        runs. ``update`` keeps that card current (one display update per report).
        """
        from IPython.display import display

        self._card = display(_card_bundle(self.report), raw=True, display_id=True)
        view = self._repr_mimebundle_()
        display(view[0] if isinstance(view, tuple) else view, raw=True)

    def _watch_releases(self, report: Report) -> None:
        """Re-send ``report``'s payload when an object one of its follow-ups needs is
        released (the widget is held weakly: watching never keeps it alive)."""
        widget = weakref.ref(self)

        def refresh() -> None:
            live = widget()
            if live is not None and live.report is report:
                live.payload = panel_payload(report)

        on_release(report.actions, refresh)

    def __repr__(self) -> str:
        report = self.report
        return (
            f"<{type(self).__name__} panel={self.panel!r} "
            f"report_type={report.report_type!r} status={report.status!r}>"
        )

    def handle_message(self, content: Any) -> tuple[dict[str, Any], list[bytes]]:
        """The reply (content, buffers) to one request from the browser; never raises."""
        request_id = content.get("request_id") if isinstance(content, dict) else None
        report_id = content.get("report", 0) if isinstance(content, dict) else 0
        try:
            if not isinstance(content, dict) or not is_int(request_id):
                raise PanelError(
                    f"a panel request is a dict with an int request_id, got {content!r:.200}."
                )
            kind = content.get("type")
            if kind == "action":
                reply, buffers = self._run_action(report_id, content)
            elif kind == "page":
                reply, buffers = {"page": self._page(report_id, content)}, []
            else:
                raise PanelError(
                    f"unknown panel request type {kind!r}; expected 'action' or 'page'."
                )
        except Exception as exc:  # display path: the panel shows the message, nothing raises
            message = str(exc) if isinstance(exc, PanelError) else f"{type(exc).__name__}: {exc}"
            return (
                {
                    "type": "error",
                    "request_id": request_id,
                    "report": report_id,
                    "message": message,
                },
                [],
            )
        return {"type": "reply", "request_id": request_id, "report": report_id, **reply}, buffers

    def _on_custom_message(self, _widget: Any, content: Any, _buffers: Any) -> None:
        reply, buffers = self.handle_message(content)
        self.send(reply, buffers or None)

    def _target(self, report_id: Any) -> Report:
        if report_id not in self._reports:
            raise PanelError(
                f"follow-up {report_id!r} is no longer held by this widget (it keeps "
                f"{MAX_FOLLOWUPS}); re-run the cell to get a fresh panel."
            )
        return self._reports[report_id]

    def _run_action(
        self, report_id: int, content: dict[str, Any]
    ) -> tuple[dict[str, Any], list[bytes]]:
        source = self._target(report_id)
        name = content.get("name")
        args = content.get("args") or {}
        if not isinstance(name, str) or not isinstance(args, dict):
            raise PanelError(
                f"an action request needs a str name and a dict args, got "
                f"{name!r} and {args!r:.100}."
            )
        result = source.run_action(name, **args)
        child = self._remember(result)
        panel = panel_name(result)
        arrays = panel_arrays(result)
        buffers = [spec["data"] for spec in arrays.values()]
        reply: dict[str, Any] = {
            "payload": panel_payload(result),
            "panel": panel,
            "child": child,
            "arrays": {
                name: {**{k: v for k, v in spec.items() if k != "data"}, "buffer": i}
                for i, (name, spec) in enumerate(arrays.items())
            },
        }
        if panel != panel_name(source):  # the asking panel's module cannot draw it
            reply["esm"] = bundle_path(panel).read_text(encoding="utf-8")
        return reply, buffers

    def _remember(self, report: Report) -> int:
        child = self._next_report_id
        self._next_report_id += 1
        self._reports[child] = report
        while len(self._reports) > MAX_FOLLOWUPS + 1:
            oldest = next(k for k in self._reports if k != 0)
            del self._reports[oldest]
            self._pagers = {k: v for k, v in self._pagers.items() if k[0] != oldest}
        return child

    def _page(self, report_id: int, content: dict[str, Any]) -> dict[str, Any]:
        table_name = content.get("table")
        key = (report_id, str(table_name))
        if key not in self._pagers:
            self._pagers[key] = TablePager(self._target(report_id).table(table_name))
        return self._pagers[key].page(
            sort=content.get("sort"),
            descending=bool(content.get("descending", False)),
            filter=str(content.get("filter") or ""),
            offset=content.get("offset", 0),
            limit=content.get("limit", 25),
        )


def _card_bundle(report: Report) -> dict[str, str]:
    return {"text/plain": report.card(), "text/html": report.card_html(beside_panel=True)}


@functools.cache
def widget_class(panel: str) -> type[ReportWidget]:
    """The widget class of ``panel`` (``TablePanel`` for ``"table"``), built once per process.

    Raises:
        PanelError: the panel's bundle was not built.
    """
    esm = bundle_path(panel)
    name = "".join(part.capitalize() for part in panel.split("_")) + "Panel"
    return type(
        name,
        (ReportWidget,),
        {
            "_esm": esm,
            "_css": THEME_CSS,
            "__module__": __name__,
            "__doc__": f"The ``{panel}`` panel (js/panels/{panel}.js).",
        },
    )


def widget_for(report: Report) -> ReportWidget:
    """The live panel of ``report`` (an anywidget; display it or put it in a layout).

    Raises:
        PanelError: the panel's bundle was not built (``make bundle``).
    """
    return widget_class(panel_name(report))(report)
