"""``OpGraph``: what the lineage follow-ups need from a trace, held without any tensor.

A report holds its trace by weak reference (a report never pins activations), so a follow-up that
walked the trace itself would fail once the notebook rebinds ``trace`` or passes it inline
(``tl.debug.compare(tl.trace(m, a), tl.trace(m, b))``). The lineage follow-ups hold an
``OpGraph`` instead: every op's label, function, module, source line, shape, dtype, parents and
children, and its finiteness as known when the report was made (a saved value checked here, a
live check of a NaN run, an integer dtype). The labels and tuples are the trace's own objects,
shared while the trace lives. Value statistics need the values: they are read from the trace
while it lives and are absent (and disclosed) once it was released.

Cost (``benchmarks/bench_followups.py``, 20,001 ops, 2-core CPU, min of 3 rounds): building
it takes 0.03x the capture without saved values and 0.12x with them (one batched finiteness
read of every saved output); once the trace is released it keeps 8.0 MB (418 bytes per op)
of the trace's 21-24 MB; one lineage ring from it takes 0.25 ms.
"""

from __future__ import annotations

import linecache
import math
import weakref
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import torch

from ...capture import Op, Trace
from ...errors import OpNotFoundError
from ...report._lineage import CheckedBy, Finiteness
from .._values import is_float_dtype, saved_tensors, value_stats

if TYPE_CHECKING:
    from ...report._nonfinite import ValueStats
    from ..nonfinite._forward_scan import ForwardFacts


class GraphOp:
    """One op of an :class:`OpGraph`: the attributes of ``Op`` a lineage reads, no value."""

    __slots__ = (
        "checked_by",
        "children",
        "dtype",
        "file",
        "finiteness",
        "func",
        "index",
        "label",
        "line",
        "module",
        "parents",
        "shape",
    )

    def __init__(self, op: Op, finiteness: Finiteness, checked_by: CheckedBy | None) -> None:
        self.label = op.label
        self.index = op.index
        self.func = op.func
        self.module = op.module
        self.file = op.file
        self.line = op.line
        self.shape = op.shape
        self.dtype = op.dtype
        self.parents = op.parents
        self.children = op.children
        self.finiteness: Finiteness = finiteness
        self.checked_by: CheckedBy | None = checked_by

    @property
    def code(self) -> str | None:
        """Text of the source line, read lazily from ``linecache`` as ``Op.code`` does."""
        if self.file is None or self.line is None:
            return None
        return linecache.getline(self.file, self.line).strip() or None


class OpGraph:
    """The structure and finiteness of a trace's ops, by label (``graph["relu_1"]``).

    Build it with :func:`op_graph` (cached per trace) or :func:`facts_graph` (a live NaN run).
    """

    def __init__(
        self,
        trace: Trace,
        ops: list[GraphOp],
        *,
        stats: dict[str, ValueStats] | None = None,
        mode: CheckedBy = "saved",
    ) -> None:
        self.model_type = trace.model_type
        self.ops = ops
        self._by_label = {op.label: op for op in ops}
        self._trace = weakref.ref(trace)
        self._stats = stats
        self.mode = mode
        """How finiteness was known: ``saved`` values checked here, or a ``live`` NaN run."""

    def __len__(self) -> int:
        return len(self.ops)

    def __getitem__(self, label: str) -> GraphOp:
        """The op labelled ``label`` (the trace itself resolves indices and ``Op`` objects)."""
        op = self._by_label.get(label) if isinstance(label, str) else None
        if op is None:
            raise OpNotFoundError(
                f"no op labelled {label!r} in this trace; follow-ups name ops by label, "
                f"e.g. {self.ops[-1].label if self.ops else 'linear_1'!r}."
            )
        return op

    @property
    def is_trace_alive(self) -> bool:
        """Whether the trace (and so its saved values) still exists."""
        return self._trace() is not None

    def value_stats(self, labels: Iterable[str]) -> dict[str, ValueStats]:
        """Statistics of the values of ``labels`` that can be read now (a live run's record,
        or the saved values while the trace lives); one host sync per device."""
        wanted = list(labels)
        if self._stats is not None:
            return {label: self._stats[label] for label in wanted if label in self._stats}
        trace = self._trace()
        if trace is None:
            return {}
        saved = [label for label in wanted if saved_tensors(trace[label].out)]
        values = [saved_tensors(trace[label].out) for label in saved]
        return dict(zip(saved, value_stats(values)))


_GRAPHS: weakref.WeakKeyDictionary[Trace, OpGraph] = weakref.WeakKeyDictionary()
"""One graph per trace: reports on the same trace (an audit runs three) share it."""


def op_graph(trace: Trace) -> OpGraph:
    """The :class:`OpGraph` of a trace, finiteness from its saved values (built once per trace).

    Checks every saved floating-point value (one batched reduction, one host sync per device);
    integer outputs are finite by dtype; the rest is ``unknown``.
    """
    graph = _GRAPHS.get(trace)
    if graph is None or len(graph) != len(trace):
        graph = OpGraph(trace, _graph_ops(trace))
        _GRAPHS[trace] = graph
    return graph


def _graph_ops(trace: Trace) -> list[GraphOp]:
    flags = _finite_flags(trace)
    ops = []
    for index, op in enumerate(trace.ops):
        state: tuple[Finiteness, CheckedBy | None]
        if index in flags:
            state = ("finite" if flags[index] else "nonfinite", "saved")
        elif not is_float_dtype(op.dtype):
            state = ("finite", "dtype")
        else:
            state = ("unknown", None)
        ops.append(GraphOp(op, *state))
    return ops


def _finite_flags(trace: Trace) -> dict[int, bool]:
    """Op index -> whether every element of its saved value is finite (saved ops only); one
    host sync per device.

    The max-abs norm of a tensor is nan or inf exactly when an element is (it cannot overflow,
    unlike a sum); ``torch._foreach_norm`` computes it for a whole list in one call per
    (device, dtype) group, where per-tensor ``aminmax`` (``_values.finite_flags``) costs about
    five times as much on 20,000 small CPU tensors (0.13 s against 0.7 s). One pass, few
    allocations: on a 20,000-op trace the garbage collector's passes over the trace's objects
    cost more than the reductions (``benchmarks/bench_followups.py``).
    """
    groups: dict[tuple[torch.device, torch.dtype], tuple[list[int], list[torch.Tensor]]] = {}
    flags: dict[int, bool] = {}
    for index, op in enumerate(trace.ops):
        tensors = saved_tensors(op.out)
        if not tensors:
            continue
        flags[index] = True
        for tensor in tensors:
            if tensor.numel():
                t = torch.view_as_real(tensor) if tensor.is_complex() else tensor
                owners, members = groups.setdefault((t.device, t.dtype), ([], []))
                owners.append(index)
                members.append(t)
    by_device: dict[torch.device, tuple[list[int], list[torch.Tensor]]] = {}
    with torch.no_grad():
        for (device, _), (owners, members) in groups.items():
            norms = torch.stack(torch._foreach_norm(members, math.inf)).float()
            kept_owners, kept_norms = by_device.setdefault(device, ([], []))
            kept_owners.extend(owners)
            kept_norms.append(norms)
    for owners, parts in by_device.values():
        for index, is_finite in zip(owners, torch.isfinite(torch.cat(parts)).tolist()):
            flags[index] = flags[index] and is_finite
    return flags


def facts_graph(facts: ForwardFacts) -> OpGraph:
    """The :class:`OpGraph` of a live NaN run: finiteness and statistics from its record."""
    trace = facts.trace
    ops = []
    for op in trace:
        known = op.label in facts.state and op.label not in facts.partial
        state: Any = facts.state[op.label] if known else "unknown"
        ops.append(GraphOp(op, state, facts.checked_by.get(op.label) if known else None))
    return OpGraph(trace, ops, stats=dict(facts.stats), mode="live")
