"""The follow-up behind a click on an op row of the health tables: that op's lineage.

``grad_health``, ``dead_neurons`` and ``dtype_range`` put ``{"row_action": "lineage",
"row_arg": "op"}`` in their table attrs, so the panels (the grad_health panel and the generic
table) send ``run_action("lineage", op=label)`` and show the lineage panel under the table.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ._graph import op_graph
from ._walk import lineage_of_graph

if TYPE_CHECKING:
    from ...capture import Trace
    from ...report import LineageReport

ROW_ACTION_ATTRS = {"row_action": "lineage", "row_arg": "op"}
"""Table attrs naming the row action and the column whose value it takes (js/shared/table.js)."""


def row_actions(trace: Trace) -> dict[str, Callable[..., LineageReport]]:
    """``{"lineage": f}`` where ``f(op=label)`` is
    ``tl.debug.lineage(trace, label, direction="both", max_depth=1)``: one ring of parents and
    children, which the lineage panel expands on demand.

    The action holds the trace's ``OpGraph`` (structure and finiteness, no tensor), so a row
    click still works after the notebook rebinds ``trace``; only value statistics need the
    trace itself.
    """
    return {"lineage": lineage_follow_up(trace, direction="both", max_depth=1)}


def lineage_follow_up(
    trace: Trace, *, direction: str, max_depth: int | None
) -> Callable[..., LineageReport]:
    """A follow-up ``f(op, direction=..., max_depth=...)`` returning the lineage of ``op`` in
    ``trace``; it holds the trace's ``OpGraph``, never the trace."""
    graph = op_graph(trace)
    default_direction, default_depth = direction, max_depth

    def lineage_of(
        op: str, direction: str = default_direction, max_depth: int | None = default_depth
    ) -> LineageReport:
        return lineage_of_graph(
            graph, op, direction=direction, max_depth=max_depth, highlight=None, highlight_role=None
        )

    return lineage_of
