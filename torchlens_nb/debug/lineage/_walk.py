"""``tl.debug.lineage``: walk the parents and/or children of one op, ring by ring.

Each node states its finiteness from what is known: a saved value (checked here, batched with
one host sync per device), a live check made during a NaN run, or an integer dtype; otherwise
``unknown``. The report's ``expand`` action returns the next ring around any node, so a panel
grows the view one click at a time and a large trace never ships whole. The walk reads an
``OpGraph`` (``_graph.py``), which the follow-ups hold strongly: they keep working after the
trace variable is rebound or garbage-collected.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast, get_args

from ..._validate import check_int
from ...capture import Trace
from ...errors import DiagnosticArgumentError
from ...report import Exit
from ...report._lineage import Direction, LineageNode, LineageReport, LineageStatus, Relation
from ._graph import GraphOp, OpGraph, facts_graph, op_graph

if TYPE_CHECKING:
    from ..nonfinite._forward_scan import ForwardFacts


def lineage(
    trace: Trace,
    op_or_label: Any,
    *,
    direction: Direction = "ancestors",
    max_depth: int | None = None,
) -> LineageReport:
    """The ancestors, descendants or both of an op, with depth, source, shape, dtype, finiteness.

    Args:
        trace: a ``Trace`` or ``PartialTrace``.
        op_or_label: anything ``trace[...]`` accepts: a label, an index or an ``Op``.
        direction: ``"ancestors"`` (parents, their parents, ...), ``"descendants"`` or ``"both"``.
        max_depth: rings to walk (1 = direct neighbours); None walks to the ends.

    Returns:
        A ``LineageReport`` whose ``nodes`` start with the op itself (depth 0), then ring by ring
        in execution order. Values are read, never kept; the report's ``expand`` action returns
        the next ring around a node, also after ``trace`` was released (it holds the trace's
        ``OpGraph``; value statistics then are absent, and the report says so).

    Raises:
        OpNotFoundError: the op is not in the trace.
        DiagnosticArgumentError: an unknown direction or a negative ``max_depth``.

    Example:
        >>> import torch
        >>> from torch import nn
        >>> import torchlens_nb as tl
        >>> t = tl.trace(nn.Sequential(nn.Linear(2, 2), nn.ReLU()), torch.ones(1, 2))
        >>> report = lineage(t, t.output_layers[0], max_depth=1)
        >>> report.message, report.labels
        ('relu_1 has 1 ancestor within depth 1.', ('relu_1', 'linear_1'))
    """
    if not isinstance(trace, Trace):
        raise DiagnosticArgumentError(
            f"lineage needs a Trace (tl.trace(model, inputs)), got {type(trace).__name__}."
        )
    return lineage_of_facts(
        trace,
        op_or_label,
        direction=direction,
        max_depth=max_depth,
        facts=None,
        highlight=None,
        highlight_role=None,
    )


def lineage_of_facts(
    trace: Trace,
    op_or_label: Any,
    *,
    direction: str,
    max_depth: int | None,
    facts: ForwardFacts | None,
    highlight: str | None,
    highlight_role: str | None,
) -> LineageReport:
    """``lineage`` with finiteness from a live NaN run (``facts``) instead of saved values."""
    return lineage_of_graph(
        _graph_of(trace, facts),
        trace[op_or_label].label,  # the trace resolves an index, a label or an Op
        direction=direction,
        max_depth=max_depth,
        highlight=highlight,
        highlight_role=highlight_role,
    )


def lineage_of_graph(
    graph: OpGraph,
    label: str,
    *,
    direction: str,
    max_depth: int | None,
    highlight: str | None,
    highlight_role: str | None,
) -> LineageReport:
    """The lineage walk itself, on a trace's :class:`OpGraph` (the trace may be gone)."""
    if direction not in get_args(Direction):
        raise DiagnosticArgumentError(
            f"direction must be one of {list(get_args(Direction))}, got {direction!r}."
        )
    if max_depth is not None:
        check_int(
            "max_depth", max_depth, low=0, expect="a non-negative int or None (walk to the ends)"
        )
    root = graph[label]
    walked = _walk(graph, root, direction, max_depth)
    nodes = _nodes(graph, walked, direction)
    message = _message(root.label, nodes, direction, max_depth)
    count = {"nonfinite": 0, "unknown": 0}
    for node in nodes:
        count[node.finiteness] = count.get(node.finiteness, 0) + 1
    status: LineageStatus = (
        "found" if count["nonfinite"] else ("partial" if count["unknown"] else "clean")
    )
    return LineageReport(
        subject=f"{graph.model_type} ({len(graph)} ops)",
        status=status,
        lead=message,
        root=root.label,
        direction=cast(Direction, direction),  # checked against Direction above
        max_depth=max_depth,
        nodes=nodes,
        message=message,
        highlight=highlight,
        highlight_role=highlight_role,
        disclosures=_disclosures(graph, nodes, count),
        exits=_next_exit(nodes, direction),
        actions={"expand": _ring_action(graph, highlight, highlight_role)},
    )


def _next_exit(nodes: tuple[LineageNode, ...], direction: str) -> tuple[Exit, ...]:
    """The walk's next step: expand the frontier node farthest out (the first in execution
    order at that depth) on its own side; none when no node has unseen neighbours."""
    frontier = [n for n in nodes if n.is_frontier]
    if not frontier:
        return ()
    node = max(frontier, key=lambda n: n.depth)  # max keeps the first of equal depths
    side = (
        {"ancestor": "ancestors", "descendant": "descendants"}[node.relation]
        if node.relation != "root"
        else direction
    )
    return (
        Exit(
            f"Expand {node.label}",
            f"report.run_action('expand', label={node.label!r}, direction={side!r})",
            action="expand",
            args={"label": node.label, "direction": side},
        ),
    )


def _walk(
    graph: OpGraph, root: GraphOp, direction: str, max_depth: int | None
) -> list[tuple[str, Relation, int]]:
    walked: list[tuple[str, Relation, int]] = [(root.label, "root", 0)]
    sides: list[tuple[Relation, Callable[[GraphOp], tuple[str, ...]]]] = []
    if direction in ("ancestors", "both"):
        sides.append(("ancestor", lambda op: op.parents))
    if direction in ("descendants", "both"):
        sides.append(("descendant", lambda op: op.children))
    for relation, neighbours in sides:
        seen = {root.label}
        ring = [root.label]
        depth = 0
        while ring and (max_depth is None or depth < max_depth):
            depth += 1
            following = sorted(
                {n for label in ring for n in neighbours(graph[label]) if n not in seen},
                key=lambda lab: graph[lab].index,
            )
            seen.update(following)
            walked.extend((label, relation, depth) for label in following)
            ring = following
    return walked


def _nodes(
    graph: OpGraph, walked: list[tuple[str, Relation, int]], direction: str
) -> tuple[LineageNode, ...]:
    included = {label for label, _, _ in walked}
    stats = graph.value_stats(label for label, _, _ in walked)
    result = []
    for label, relation, depth in walked:
        op = graph[label]
        outward = {
            "ancestor": op.parents,
            "descendant": op.children,
            "root": op.parents + op.children
            if direction == "both"
            else (op.parents if direction == "ancestors" else op.children),
        }[relation]
        result.append(
            LineageNode(
                label=label,
                index=op.index,
                func=op.func,
                module=op.module,
                relation=relation,
                depth=depth,
                file=op.file,
                line=op.line,
                code=op.code,
                shape=op.shape,
                dtype=op.dtype,
                finiteness=op.finiteness,
                checked_by=op.checked_by,
                parents=op.parents,
                children=op.children,
                is_frontier=any(n not in included for n in outward),
                stats=stats.get(label),
            )
        )
    return tuple(result)


def _message(
    root: str, nodes: tuple[LineageNode, ...], direction: str, max_depth: int | None
) -> str:
    parts = []
    for relation in ("ancestor", "descendant"):
        if direction in (relation + "s", "both"):
            count = sum(1 for n in nodes if n.relation == relation)
            parts.append(f"{count} {relation}{'s' if count != 1 else ''}")
    scope = f"within depth {max_depth}" if max_depth is not None else "in total"
    return f"{root} has {' and '.join(parts)} {scope}."


def _disclosures(
    graph: OpGraph, nodes: tuple[LineageNode, ...], count: dict[str, int]
) -> tuple[str, ...]:
    notes = [
        f"{count['nonfinite']} of {len(nodes)} nodes hold a non-finite value; "
        f"{count['unknown']} unknown (value not saved)."
    ]
    if graph.mode == "saved" and not graph.is_trace_alive:
        notes.append(
            "the trace was released: finiteness is as checked when the first report on it was "
            "made, and value statistics are not shown (keep trace = tl.trace(...) to see them)."
        )
    frontier = sum(1 for n in nodes if n.is_frontier)
    if frontier:
        notes.append(
            f"{frontier} node{'s have' if frontier != 1 else ' has'} further "
            "neighbours: expand to walk on."
        )
    return tuple(notes)


def lineage_action(
    trace: Trace,
    facts: ForwardFacts | None,
    highlight: str | None,
    highlight_role: str | None,
    *,
    label: str | None = None,
    direction: str = "ancestors",
) -> Callable[..., LineageReport]:
    """A follow-up returning one ring (``max_depth=1``) around ``label``.

    It holds the trace's :class:`OpGraph`, not the trace: it keeps working after the trace is
    released (a live run's graph keeps its finiteness record and statistics too).
    """
    return _ring_action(
        _graph_of(trace, facts), highlight, highlight_role, label=label, direction=direction
    )


def _ring_action(
    graph: OpGraph,
    highlight: str | None,
    highlight_role: str | None,
    *,
    label: str | None = None,
    direction: str = "ancestors",
) -> Callable[..., LineageReport]:
    default_label, default_direction = label, direction

    def run(
        label: str | None = default_label,
        direction: str = default_direction,
        max_depth: int | None = 1,
    ) -> LineageReport:
        if label is None:
            raise DiagnosticArgumentError("name the node to expand: label='linear_1'.")
        return lineage_of_graph(
            graph,
            label,
            direction=direction,
            max_depth=max_depth,
            highlight=highlight,
            highlight_role=highlight_role,
        )

    return run


_last_facts: tuple[weakref.ref[ForwardFacts], OpGraph] | None = None
"""The graph of the last live NaN run seen: a NaN report builds its lineage and two follow-ups
from one run record, which then share one graph."""


def _graph_of(trace: Trace, facts: ForwardFacts | None) -> OpGraph:
    global _last_facts
    if facts is None:
        return op_graph(trace)
    if _last_facts is not None and _last_facts[0]() is facts:
        return _last_facts[1]
    graph = facts_graph(facts)
    _last_facts = (weakref.ref(facts), graph)
    return graph
