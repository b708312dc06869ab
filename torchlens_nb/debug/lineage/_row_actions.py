"""The follow-up behind a click on an op row of the health tables: that op's lineage.

``grad_health``, ``dead_neurons`` and ``dtype_range`` put ``{"row_action": "lineage",
"row_arg": "op"}`` in their table attrs, so the panels (the grad_health panel and the generic
table) send ``run_action("lineage", op=label)`` and show the lineage panel under the table.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING

from ...errors import UnavailableError
from ._walk import lineage

if TYPE_CHECKING:
    from ...capture import Trace
    from ...report import Report

ROW_ACTION_ATTRS = {"row_action": "lineage", "row_arg": "op"}
"""Table attrs naming the row action and the column whose value it takes (js/shared/table.js)."""


def row_actions(trace: Trace) -> dict[str, Callable[..., Report]]:
    """``{"lineage": f}`` where ``f(op=label)`` is
    ``tl.debug.lineage(trace, label, direction="both", max_depth=1)``: one ring of parents and
    children, which the lineage panel expands on demand.

    The trace is held by weak reference, so a report never keeps a model's activations alive;
    once the trace is released the action raises ``UnavailableError`` saying so.
    """
    held = weakref.ref(trace)

    def lineage_of(op: str) -> Report:
        target = held()
        if target is None:
            raise UnavailableError(
                "the trace behind this report was released; keep a reference to it "
                "(trace = tl.trace(...)) while you explore.",
                code="trace_released",
            )
        return lineage(target, op, direction="both", max_depth=1)

    return {"lineage": lineage_of}
