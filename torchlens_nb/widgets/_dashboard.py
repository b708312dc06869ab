"""The live checks dashboard: the ``checks`` panel plus increments while the loop runs.

``ChecksSession.dashboard()`` (and ``display(session)``) builds one through
``tl.report.live_dashboard``. The widget starts from a snapshot ``CheckReport`` (its
``payload``), receives throttled increments in its ``live`` trait while the training loop runs
in the same cell (one trait update per message, at most 10 per second, built by
``checks._feed``), and ends with the final report's payload and arrays. The increments carry the
counters and check states as they are now and only the chart rows added since the previous
message, so a message stays small however long the run.
"""

from __future__ import annotations

import base64
import functools
import uuid
from typing import TYPE_CHECKING, Any

import traitlets

from .._jsonsafe import to_jsonable
from ..report import CheckReport
from ..report._status import resolve_tone, status_phrase
from ._payload import encode_array
from ._registry import THEME_CSS, bundle_path
from ._widget import ReportWidget

if TYPE_CHECKING:
    from ..report import Report


class LiveChecksWidget(ReportWidget):
    """A report widget with a ``live`` trait; build it with :func:`dashboard_for`."""

    live_id = traitlets.Unicode().tag(sync=True)
    """A unique id: the panel keeps the increments of one dashboard under it, so a view opened
    after some increments still draws them."""
    live = traitlets.Dict().tag(sync=True)
    """The latest increment: ``{"type": "increment", "seq", "counters", "checks", "findings",
    "scale", "points"}`` (plus ``ranks``, one row of counters per rank, under DDP, and
    ``timeline`` when it changed: :func:`live_message`), or
    ``{"type": "final", "seq"}`` once the final report is shown."""

    def push(self, message: dict[str, Any]) -> None:
        """Send one increment to every view (one comm message; see :func:`live_message`)."""
        self.live = live_message(message)

    def finish(self, report: Report) -> None:
        """Show the final report: its payload and arrays replace the snapshot (cached table
        pages of the snapshot are dropped with it)."""
        self.update(report)
        self.live = {"type": "final", "seq": int(self.live.get("seq", 0)) + 1}


def live_message(message: dict[str, Any]) -> dict[str, Any]:
    """An increment as it travels: NaN/Inf tagged as in payloads, and its ``status`` given its
    ``tone`` and ``status_label``, decided as a ``CheckReport``'s are (``raised`` is critical),
    so the live badge maps no word in JS. A ``timeline`` keeps its summary and carries each array
    as little-endian float32 in base64 (``{"dtype", "shape", "base64"}``): 4 bytes a value plus a
    third, bounded by the recorder's 256 columns (``benchmarks/bench_panel_size.py``)."""
    timeline = message.get("timeline")
    if timeline is not None:
        message = {**message, "timeline": {**timeline, "arrays": _compact(timeline["arrays"])}}
    status = message.get("status")
    if isinstance(status, str) and status in CheckReport.status_tones:
        severities = [f.get("severity") for f in message.get("findings", ())]
        message = {
            **message,
            "tone": resolve_tone(CheckReport.status_tones[status], severities),
            "status_label": status_phrase(status),
        }
    return to_jsonable(message)


def _compact(arrays: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for name, spec in arrays.items():
        encoded = encode_array(spec["data"], spec["dtype"], tuple(spec["shape"]))
        out[name] = {
            "dtype": encoded["dtype"],
            "shape": encoded["shape"],
            "base64": base64.b64encode(encoded["data"]).decode("ascii"),
        }
    return out


@functools.cache
def dashboard_class() -> type[LiveChecksWidget]:
    """The widget class of the ``checks`` panel bundle, built once per process.

    Raises:
        PanelError: the ``checks`` bundle was not built (``make bundle``).
    """
    return type(
        "ChecksDashboard",
        (LiveChecksWidget,),
        {
            "_esm": bundle_path("checks"),
            "_css": THEME_CSS,
            "__module__": __name__,
            "__doc__": "The live checks dashboard (js/panels/checks.js).",
        },
    )


def is_kernel_running() -> bool:
    """Whether this process is a Jupyter kernel (a frontend may render widgets)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


def dashboard_for(report: Report) -> LiveChecksWidget | None:
    """The live dashboard for a session's snapshot ``report``; None outside a Jupyter kernel.

    Raises:
        PanelError: the ``checks`` bundle was not built.
    """
    if not is_kernel_running():
        return None
    return dashboard_class()(report, live_id=uuid.uuid4().hex)
