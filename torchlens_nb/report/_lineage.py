"""``LineageReport``: the ancestors and/or descendants of one op, ring by ring.

A node carries what a person needs to judge it without the trace: op, module, source line,
shape, dtype, finiteness and (where the value was saved) its statistics. The payload ships at most
:data:`MAX_PAYLOAD_NODES` nodes, nearest rings first; the panel asks for the next ring of a node
through the report's ``expand`` action, so a 5,000-op trace never ships whole.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ..errors import OpNotFoundError
from ._base import Report, Where, payload_head
from ._nonfinite import ValueStats
from ._status import FINITENESS_TONES, tones

Direction = Literal["ancestors", "descendants", "both"]
Relation = Literal["root", "ancestor", "descendant"]
Finiteness = Literal["finite", "nonfinite", "unknown"]
LineageStatus = Literal["found", "partial", "clean"]
CheckedBy = Literal["saved", "live", "dtype"]
"""How finiteness is known: a saved value, a live check during the forward, an integer dtype."""

MAX_PAYLOAD_NODES = 400
"""Nodes shipped to a panel per report: 400 nodes is about 200 KB of JSON, the most a notebook
cell should carry; the rest stays one ``expand`` away."""


@dataclass(frozen=True)
class LineageNode:
    """One op in a lineage walk."""

    label: str
    """Trace label of the op (e.g. ``linear_2``)."""
    index: int
    """Position of the op in execution order."""
    func: str
    """The torch function the op called."""
    module: str
    """Innermost module address (``""`` is the root module)."""
    relation: Relation
    """``root``, ``ancestor`` or ``descendant`` of the walk's root."""
    depth: int
    """Edges from the root (0 for the root itself)."""
    file: str | None
    """Path of the file holding the op's own source line."""
    line: int | None
    """Line number of that source line."""
    code: str | None
    """Text of the op's own source line."""
    shape: tuple[int, ...] | None
    """Shape of the op's output (None when not a tensor)."""
    dtype: str | None
    """Dtype of the op's output (None when not a tensor)."""
    finiteness: Finiteness
    """``finite``, ``nonfinite`` or ``unknown`` (the value was neither saved nor checked live)."""
    checked_by: CheckedBy | None
    """None when finiteness is ``unknown`` (value not saved, not checked live)."""
    parents: tuple[str, ...]
    """Every parent label in the trace (not only those in this report)."""
    children: tuple[str, ...]
    """Every child label in the trace (not only those in this report)."""
    is_frontier: bool
    """It has neighbours in the walk's direction that this report does not include."""
    stats: ValueStats | None = None
    """Value statistics of the output, when its value was checked."""

    def where(self) -> Where:
        return Where(
            op=self.label, module=self.module, file=self.file, line=self.line, code=self.code
        )


@dataclass(frozen=True, kw_only=True, repr=False)  # keep Report's short repr
class LineageReport(Report):
    """``tl.debug.lineage``: nodes in walk order (root first, then ring by ring)."""

    report_type = "lineage"
    row_tones = FINITENESS_TONES
    payload_properties = ("num_nodes", "num_shipped")
    status_tones = tones({"found": "critical", "partial": "warning", "clean": "ok"})
    status: LineageStatus
    """``found``: a non-finite value is among the nodes; ``partial``: some were not checked."""
    root: str
    """Label of the op the walk started from."""
    direction: Direction
    """``ancestors``, ``descendants`` or ``both``."""
    max_depth: int | None
    """The depth limit of the walk in edges from the root (None: unlimited)."""
    nodes: tuple[LineageNode, ...] = field(metadata=payload_head(MAX_PAYLOAD_NODES))
    """The walked ops, root first, then ring by ring."""
    message: str
    """One sentence: how many ancestors/descendants within which depth."""
    highlight: str | None = None
    """Label the panel marks (the NaN origin, when the lineage was opened from a NaN report)."""
    highlight_role: str | None = None
    """What the marked node is, in words: ``origin``, ``first non-finite seen``, ..."""

    def node(self, label: str) -> LineageNode:
        """The node labelled ``label``."""
        for item in self.nodes:
            if item.label == label:
                return item
        raise OpNotFoundError(
            f"{label!r} is not in this lineage; its labels start with "
            f"{[n.label for n in self.nodes[:8]]}. Expand a frontier node "
            "(report.run_action('expand', label=...)) to reach further."
        )

    @property
    def labels(self) -> tuple[str, ...]:
        return tuple(n.label for n in self.nodes)

    @property
    def num_nodes(self) -> int:
        """Nodes in the report (the payload ships at most :data:`MAX_PAYLOAD_NODES`)."""
        return len(self.nodes)

    @property
    def num_shipped(self) -> int:
        """Nodes the payload carries."""
        return min(len(self.nodes), MAX_PAYLOAD_NODES)


__all__ = [
    "MAX_PAYLOAD_NODES",
    "CheckedBy",
    "Direction",
    "Finiteness",
    "LineageNode",
    "LineageReport",
    "Relation",
]
