"""Live display of a recipe that runs for a while (``overfit_one_batch``).

The first report is displayed in the running cell like any report (its panel widget, with the
text card as fallback). Every later report is one traitlet push: the same widget's ``payload``
is set to ``report.to_dict()`` and the panel redraws in place. Recipes may not import the widget
layer (only ``report/_display.py`` builds widgets), so the widget is found by the ``model_id``
its display bundle names, in ipywidgets' instance registry; where that lookup fails (no widget
could be built, another ipywidgets), each push replaces the cell output through the display
handle instead. Pushes are throttled by the caller; this module only knows where they go.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from ..errors import DiagnosticArgumentError
from ..report import Report

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


def in_kernel() -> bool:
    """True inside a Jupyter kernel (an IPython shell with a kernel attached)."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return shell is not None and getattr(shell, "kernel", None) is not None


def _widget(model_id: str) -> Any:
    """The live widget with ``model_id`` (ipywidgets 8 keeps every open widget by id)."""
    module = sys.modules.get("ipywidgets.widgets.widget")
    registry = getattr(module, "_instances", None)
    return registry.get(model_id) if isinstance(registry, dict) else None


class PanelSink:
    """Displays the first report, then pushes each later one into the same panel."""

    def __init__(self) -> None:
        self._handle: Any = None
        self._widget: Any = None

    def __call__(self, report: Report) -> None:
        if self._widget is not None:
            self._widget.payload = report.to_dict()
            return
        from IPython.display import display

        bundle = report._repr_mimebundle_()
        if self._handle is None:
            self._handle = display(bundle, raw=True, display_id=True)
            view = bundle.get(WIDGET_MIME)
            self._widget = _widget(view["model_id"]) if isinstance(view, dict) else None
        else:
            self._handle.update(bundle, raw=True)


def live_sink(live: bool | None) -> Callable[[Report], None] | None:
    """Where live reports go: a :class:`PanelSink` when ``live`` (None: inside a kernel)."""
    if live is None:
        live = in_kernel()
    if not isinstance(live, bool):
        raise DiagnosticArgumentError(f"live must be True, False or None, got {live!r}.")
    return PanelSink() if live else None
