"""Ops whose gradient a logged backward cannot record: they ran inside a custom autograd.Function.

A custom ``torch.autograd.Function`` runs its ``forward`` without autograd, so the ops recorded
inside it have no ``grad_fn``; the gradient reaches the loss through the Function's own backward
node (a ``BackwardCFunction``), never through those ops. ``torch.utils.checkpoint(...,
use_reentrant=True)`` is the common case: ``CheckpointFunction`` runs the checkpointed block under
``no_grad`` and recomputes it, outside the trace, during the backward. ``use_reentrant=False``
records every op with its ``grad_fn`` (tests/gradients/test_checkpoint.py has both).

The rule: an op is *unrecorded* when it has no ``grad_fn`` although it computed a floating-point
value from a parameter or from a value that needed a gradient, and its result flows (through other
such ops) into a recorded op whose ``grad_fn`` takes an input from a custom Function node outside
the trace. Ops cut off on purpose (``detach``, a ``no_grad`` block whose result feeds no such
node) have no gradient at all and are not counted.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from torch.autograd.function import BackwardCFunction

from ...capture import Trace
from ...report import Finding, Unavailable
from .._values import where_of

_FLOATING = ("float", "bfloat", "complex")
"""dtype name prefixes of values that carry gradients."""


def unrecorded_ops(trace: Trace) -> tuple[str, ...]:
    """Labels of the ops inside custom autograd.Functions whose gradients were not recorded.

    Reads the ``grad_fn`` objects the trace kept (``backward_ready``), and only those of the
    consumers of gradient-blind ops: one pass over the ops in each direction, so a trace with no
    such op costs one attribute check per op (21,000 ops: 20-40 ms, benchmarks/bench_audit.py).
    """
    blind: set[str] = set()
    for op in trace:
        if op.is_input or op.grad_fn_name is not None or not _is_floating(op.dtype):
            continue
        if op.param_names or any(
            parent in blind or trace[parent].requires_grad for parent in op.parents
        ):
            blind.add(op.label)
    if not blind:
        return ()
    consumers = {c for label in blind for c in trace[label].children if c not in blind}
    recorded = {id(trace.grad_fn_of(op.label)) for op in trace if op.grad_fn_name is not None}
    bridges = {c for c in consumers if _takes_function_input(trace.grad_fn_of(c), recorded)}
    unread: set[str] = set()
    for op in reversed(trace.ops):
        if op.label in blind and any(c in bridges or c in unread for c in op.children):
            unread.add(op.label)
    return tuple(op.label for op in trace if op.label in unread)


def frontier_kind(
    trace: Trace, label: str, flag: Mapping[str, str], unrecorded: frozenset[str]
) -> Literal["frontier", "hidden"] | None:
    """Whether the flagged op ``label`` is the frontier, or a ``hidden`` one: no consumer shares
    its verdict, but a consumer's gradient was not recorded, so the flag may begin there."""
    verdict = flag.get(label)
    if verdict is None:
        return None
    children = trace[label].children
    if any(flag.get(child) == verdict for child in children):
        return None
    return "hidden" if any(child in unrecorded for child in children) else "frontier"


def hidden_frontier_finding(
    trace: Trace, row: Mapping[str, Any], unrecorded: frozenset[str]
) -> Finding:
    """The finding of a flagged op whose unflagged consumers include unrecorded ones."""
    op = trace[row["op"]]
    unread = [child for child in op.children if child in unrecorded]
    plural = len(unread) != 1
    return Finding(
        code="gradient_frontier_hidden",
        severity="critical" if row["verdict"] == "exploding" else "warning",
        message=(
            f"the {row['verdict']} gradient reaches {op.label} from {len(unread)} "
            f"consumer{'s' if plural else ''} whose gradient{'s were' if plural else ' was'} "
            f"not recorded ({', '.join(unread[:3])}, inside a custom autograd.Function): the "
            "frontier may lie downstream of it."
        ),
        where=where_of(op),
        remedy=_REMEDY,
        fields={"verdict": row["verdict"], "unrecorded_consumers": unread},
    )


def unrecorded_entry(trace: Trace, labels: tuple[str, ...]) -> Unavailable:
    """The ``unavailable`` entry naming the unrecorded ops and their modules (first few)."""
    modules = list(dict.fromkeys(trace[label].module or "(root)" for label in labels))
    return Unavailable(
        check="grad_health",
        reason=(
            f"{len(labels)} ops ({_first(labels, 3)}; in {_first(modules, 2)}) ran in a "
            f"custom autograd.Function, so their gradients were not recorded. "
            f"{_REMEDY}"
        ),
        code="gradients_not_recorded",
    )


_REMEDY = "With torch.utils.checkpoint, pass use_reentrant=False."


def _first(items: list[str] | tuple[str, ...], count: int) -> str:
    shown = ", ".join(items[:count])
    return shown + (f" and {len(items) - count} more" if len(items) > count else "")


def _takes_function_input(grad_fn: Any, recorded: set[int]) -> bool:
    if grad_fn is None:
        return False
    return any(
        isinstance(node, BackwardCFunction) and id(node) not in recorded
        for node, _ in grad_fn.next_functions
    )


def _is_floating(dtype: str | None) -> bool:
    return dtype is not None and dtype.startswith(_FLOATING)
