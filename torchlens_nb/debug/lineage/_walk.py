"""``tl.debug.lineage``: walk the parents and/or children of one op, ring by ring.

Each node states its finiteness from what is known: a saved value (checked here, batched with
one host sync per device), a live check made during a NaN run, or an integer dtype; otherwise
``unknown``. The report's ``expand`` action returns the next ring around any node, so a panel
grows the view one click at a time and a large trace never ships whole.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, get_args

from ...capture import Op, Trace
from ...errors import DiagnosticArgumentError, UnavailableError
from ...report import Exit
from ...report._lineage import Direction, LineageNode, LineageReport, Relation
from ...report._nonfinite import ValueStats
from .._values import finite_flags, is_float_dtype, saved_tensors, value_stats

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
        in execution order. Values are read, never kept; the report's ``expand`` action (which
        holds the trace by weak reference) returns the next ring around a node.

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
    if direction not in get_args(Direction):
        raise DiagnosticArgumentError(
            f"direction must be one of {list(get_args(Direction))}, got {direction!r}."
        )
    if max_depth is not None and (
        isinstance(max_depth, bool) or not isinstance(max_depth, int) or max_depth < 0
    ):
        raise DiagnosticArgumentError(
            f"max_depth must be a non-negative int or None (walk to the ends), got {max_depth!r}."
        )
    root = trace[op_or_label]
    walked = _walk(trace, root, direction, max_depth)
    nodes = _nodes(trace, walked, direction, facts)
    message = _message(root.label, nodes, direction, max_depth)
    count = {"nonfinite": 0, "unknown": 0}
    for node in nodes:
        count[node.finiteness] = count.get(node.finiteness, 0) + 1
    status = "found" if count["nonfinite"] else ("partial" if count["unknown"] else "clean")
    return LineageReport(
        subject=f"{trace.model_type} ({len(trace)} ops)",
        status=status,
        lead=message,
        root=root.label,
        direction=direction,
        max_depth=max_depth,  # type: ignore[arg-type]
        nodes=nodes,
        message=message,
        highlight=highlight,
        highlight_role=highlight_role,
        disclosures=_disclosures(nodes, count),
        exits=(
            Exit(
                "Expand a node",
                f"report.run_action('expand', label={root.label!r}, direction='ancestors')",
                action="expand",
                args={"label": root.label},
            ),
        ),
        actions={"expand": lineage_action(trace, facts, highlight, highlight_role)},
    )


def _walk(
    trace: Trace, root: Op, direction: str, max_depth: int | None
) -> list[tuple[str, Relation, int]]:
    walked: list[tuple[str, Relation, int]] = [(root.label, "root", 0)]
    sides: list[tuple[Relation, Callable[[Op], tuple[str, ...]]]] = []
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
                {n for label in ring for n in neighbours(trace[label]) if n not in seen},
                key=lambda lab: trace[lab].index,
            )
            seen.update(following)
            walked.extend((label, relation, depth) for label in following)
            ring = following
    return walked


def _nodes(
    trace: Trace,
    walked: list[tuple[str, Relation, int]],
    direction: str,
    facts: ForwardFacts | None,
) -> tuple[LineageNode, ...]:
    included = {label for label, _, _ in walked}
    finiteness: dict[str, str] = {}
    checked_by: dict[str, Any] = {}
    stats: dict[str, ValueStats] = {}
    if facts is not None:
        for label in included:
            if label in facts.state and label not in facts.partial:
                finiteness[label] = facts.state[label]
                checked_by[label] = facts.checked_by.get(label)
        stats.update({k: v for k, v in facts.stats.items() if k in included})
    else:
        saved = [label for label, _, _ in walked if saved_tensors(trace[label].out)]
        values = [saved_tensors(trace[label].out) for label in saved]
        for label, is_finite, value in zip(saved, finite_flags(values), value_stats(values)):
            finiteness[label] = "finite" if is_finite else "nonfinite"
            checked_by[label] = "saved"
            stats[label] = value
        for label in included - set(saved):
            if not is_float_dtype(trace[label].dtype):
                finiteness[label], checked_by[label] = "finite", "dtype"
    result = []
    for label, relation, depth in walked:
        op = trace[label]
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
                finiteness=finiteness.get(label, "unknown"),  # type: ignore[arg-type]
                checked_by=checked_by.get(label),
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


def _disclosures(nodes: tuple[LineageNode, ...], count: dict[str, int]) -> tuple[str, ...]:
    notes = [
        f"{count['nonfinite']} of {len(nodes)} nodes hold a non-finite value; "
        f"{count['unknown']} unknown (value not saved)."
    ]
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

    A saved trace is held by weak reference. A live run's trace holds no tensor value
    (save=False), so the action keeps it with its finiteness record.
    """
    held: Callable[[], Trace | None] = weakref.ref(trace) if facts is None else _Held(trace)
    default_label, default_direction = label, direction

    def run(
        label: str | None = default_label,
        direction: str = default_direction,
        max_depth: int | None = 1,
    ) -> LineageReport:
        target = held()
        if target is None:
            raise UnavailableError(
                "the trace behind this lineage was released; keep a reference to it "
                "(trace = tl.trace(...)) while you explore.",
                code="trace_released",
            )
        if label is None:
            raise DiagnosticArgumentError("name the node to expand: label='linear_1'.")
        return lineage_of_facts(
            target,
            label,
            direction=direction,
            max_depth=max_depth,
            facts=facts,
            highlight=highlight,
            highlight_role=highlight_role,
        )

    return run


class _Held:
    """A strong reference with the call shape of ``weakref.ref`` (for metadata-only traces)."""

    def __init__(self, trace: Trace) -> None:
        self._trace = trace

    def __call__(self) -> Trace:
        return self._trace
