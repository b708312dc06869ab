"""Logging one backward pass: grad_fn fire order and, with ``save_grads``, the gradients.

Every node reachable from ``loss.grad_fn`` gets a post-hook for the duration of the call. A node's
``grad_outputs`` are the gradients flowing INTO it (w.r.t. its forward output, already summed over
consumers by the engine); its ``grad_inputs`` are what it sends on. The hooks keep detached
references only (no copies, no host syncs); finiteness is judged later by the analyses.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from .._undo import Undo, undoing
from ..errors import BackwardError

if TYPE_CHECKING:
    from ._trace import Trace


@dataclass
class GradFnFire:
    """One grad_fn execution in measured fire order."""

    order: int
    """0 for the first node the engine ran (the loss's grad_fn)."""
    node: str
    """grad_fn class name, e.g. ``SqrtBackward0``."""
    labels: tuple[str, ...]
    """Forward ops whose output this node differentiates (empty for internal nodes)."""
    grad_outputs: tuple[Any, ...] | None
    """Incoming gradients (detached tensors or None); None when gradients were not saved."""
    grad_inputs: tuple[Any, ...] | None
    """Outgoing gradients; None when gradients were not saved."""


@dataclass
class BackwardPass:
    """What one ``trace.backward(...)`` observed."""

    index: int
    fires: list[GradFnFire] = field(default_factory=list)
    op_grads: dict[str, Any] = field(default_factory=dict)
    """Op label -> gradient w.r.t. its output (only with ``save_grads``)."""
    num_nodes: int = 0
    """Nodes reachable from the loss when the pass started."""


def _graph_nodes(root: Any) -> list[Any]:
    seen: set[int] = set()
    nodes: list[Any] = []
    pending = [root]
    while pending:
        node = pending.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        nodes.append(node)
        pending.extend(next_node for next_node, _ in node.next_functions)
    return nodes


def _detached(values: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(v.detach() if isinstance(v, torch.Tensor) else None for v in values)


def log_backward(
    trace: Trace,
    loss: torch.Tensor,
    *,
    gradient: torch.Tensor | None,
    retain_graph: bool,
    save_grads: bool,
    index: int,
) -> BackwardPass:
    """Run autograd on ``loss`` with temporary hooks on every reachable node."""
    labels_of: dict[int, list[str]] = {}
    for label, node in trace._grad_fns.items():
        labels_of.setdefault(id(node), []).append(label)
    record = BackwardPass(index=index)
    nodes = _graph_nodes(loss.grad_fn)
    record.num_nodes = len(nodes)

    live = [True]
    """The hooks record only while this call runs: one whose handle a Ctrl-C lost (between
    ``register_hook``'s return and the handle's registration) stays on the node, inert."""

    def make_hook(node: Any) -> Any:
        labels = tuple(labels_of.get(id(node), ()))
        name = type(node).__name__

        def hook(grad_inputs: tuple[Any, ...], grad_outputs: tuple[Any, ...]) -> None:
            if not live:
                return
            outs = _detached(grad_outputs) if save_grads else None
            ins = _detached(grad_inputs) if save_grads else None
            record.fires.append(GradFnFire(len(record.fires), name, labels, outs, ins))
            if outs:
                for label in labels:
                    record.op_grads[label] = outs[0]

        return hook

    def run(undo: Undo) -> None:
        undo.add(live.clear)
        for node in nodes:
            undo.add(node.register_hook(make_hook(node)).remove)  # idempotent
        try:
            torch.autograd.backward(loss, grad_tensors=gradient, retain_graph=retain_graph)
        except RuntimeError as exc:
            raise BackwardError(
                f"autograd failed during trace.backward: {exc}. If this is a second backward "
                "over the same graph, pass retain_graph=True to the first one."
            ) from exc

    undoing(run)
    return record
