"""Per-op finiteness of one forward, read from saved values or checked live, and its causes.

Two sources fill the same :class:`ForwardFacts`:

* ``scan_saved(trace)`` reads the payloads a trace saved (batched: one host sync per device);
* ``run_live(model, inputs)`` checks each floating-point op output while the forward runs, through
  the capture's tripwire, with ``save=False``: no activation is kept, only the statistics of the
  bad outputs. One reduction (``is_all_finite``) and one host sync per floating-point op.

Then every non-finite op gets a cause: ``birth`` (all its inputs checked finite: the value was
born here), ``propagated`` (a non-finite input reached it, directly or through unchecked ops), or
``unattributed`` (its inputs were not checked, so it may be a birth or a carrier: the unchecked
ancestors form its *uncertainty zone*). The origin is the first op, in execution order, that is
not ``propagated``; no op downstream of a non-finite input can be named the origin.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import nn

from ...capture import Op, Trace, run_capture, validate_model
from ...errors import DiagnosticArgumentError, ForwardError
from ...options import CaptureOptions
from ...report._lineage import CheckedBy, Finiteness
from ...report._nonfinite import Coverage, ValueStats
from .._isolation import preserved_model_state
from .._values import (
    checkable,
    finite_flags,
    is_all_finite,
    is_float_dtype,
    saved_tensors,
    value_stats,
)

Cause = Literal["birth", "propagated", "unattributed"]

MAX_ZONE_LABELS = 64
"""An uncertainty zone lists at most this many ops (the nearest ones); its size is exact."""


@dataclass
class ForwardFacts:
    """What is known about the finiteness of every op output of one forward."""

    trace: Trace
    mode: Literal["live", "saved"]
    state: dict[str, Finiteness] = field(default_factory=dict)
    checked_by: dict[str, CheckedBy] = field(default_factory=dict)
    stats: dict[str, ValueStats] = field(default_factory=dict)
    partial: set[str] = field(default_factory=set)
    """Multi-output ops checked live on their first output only (the rest count as unknown)."""
    nonfinite_params: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Live form: op label -> its parameters/buffers holding a non-finite value."""
    forward_error: BaseException | None = None
    """The exception the model's forward raised (live form), if it raised."""
    is_stopped_early: bool = False
    _causes: dict[str, Cause] | None = None

    # ----- counts -------------------------------------------------------------------------
    @property
    def ops(self) -> list[Op]:
        return self.trace.ops

    @property
    def nonfinite(self) -> list[str]:
        """Labels of the non-finite op outputs, in execution order."""
        return [op.label for op in self.ops if self.state.get(op.label) == "nonfinite"]

    @property
    def num_checked(self) -> int:
        return sum(1 for how in self.checked_by.values() if how != "dtype")

    @property
    def num_exact(self) -> int:
        return sum(1 for how in self.checked_by.values() if how == "dtype")

    @property
    def num_unchecked(self) -> int:
        return sum(1 for op in self.ops if self.state.get(op.label, "unknown") == "unknown")

    @property
    def coverage(self) -> Coverage:
        """``partial`` also when the forward did not run to its end (a raise or a stop)."""
        if self.num_checked == 0 and self.num_unchecked:
            return "none"
        incomplete = self.num_unchecked or self.partial or self.trace.is_partial
        return "partial" if incomplete else "full"

    def finiteness(self, label: str) -> Finiteness:
        return self.state.get(label, "unknown")

    # ----- causes -------------------------------------------------------------------------
    def _is_known_finite(self, label: str) -> bool:
        return self.state.get(label) == "finite" and label not in self.partial

    def causes(self) -> dict[str, Cause]:
        """Cause of every non-finite op (one pass in execution order; parents come first)."""
        if self._causes is not None:
            return self._causes
        tainted: dict[str, bool] = {}
        causes: dict[str, Cause] = {}
        for op in self.ops:
            state = self.state.get(op.label, "unknown")
            reached = any(tainted.get(p, False) for p in op.parents)
            if state == "nonfinite":
                tainted[op.label] = True
                if reached:
                    causes[op.label] = "propagated"
                elif all(self._is_known_finite(p) for p in op.parents):
                    causes[op.label] = "birth"
                else:
                    causes[op.label] = "unattributed"
            else:
                tainted[op.label] = reached and not self._is_known_finite(op.label)
        self._causes = causes
        return causes

    def origin(self) -> str | None:
        """The first non-finite op, in execution order, that is not merely propagating."""
        causes = self.causes()
        return next((label for label in self.nonfinite if causes[label] != "propagated"), None)

    def zone(self, label: str) -> tuple[tuple[str, ...], int]:
        """Unchecked ancestors of ``label`` reachable through unchecked ops only.

        Returns up to :data:`MAX_ZONE_LABELS` of them (nearest first) and their exact count.
        """
        seen: dict[str, None] = {}
        frontier = [label]
        while frontier:
            following: list[str] = []
            for current in frontier:
                for parent in self.trace[current].parents:
                    if (
                        parent not in seen
                        and not self._is_known_finite(parent)
                        and self.state.get(parent) != "nonfinite"
                    ):
                        seen[parent] = None
                        following.append(parent)
            frontier = following
        ordered = list(seen)
        return tuple(ordered[:MAX_ZONE_LABELS]), len(ordered)

    def ensure_stats(self, labels: Sequence[str]) -> None:
        """Compute statistics of the saved values of ``labels`` that lack them (one batch)."""
        missing = [
            label
            for label in labels
            if label not in self.stats and saved_tensors(self.trace[label].out)
        ]
        if missing:
            results = value_stats([saved_tensors(self.trace[label].out) for label in missing])
            self.stats.update(zip(missing, results))


def scan_saved(trace: Trace) -> ForwardFacts:
    """Finiteness of every saved op output of ``trace``; integer outputs are finite by dtype."""
    facts = ForwardFacts(trace=trace, mode="saved")
    labels: list[str] = []
    values: list[list[torch.Tensor]] = []
    for op in trace.ops:
        tensors = saved_tensors(op.out) if op.has_saved else []
        if tensors:
            labels.append(op.label)
            values.append(tensors)
        elif not is_float_dtype(op.dtype):
            facts.state[op.label] = "finite"
            facts.checked_by[op.label] = "dtype"
    for label, is_finite in zip(labels, finite_flags(values)):
        facts.state[label] = "finite" if is_finite else "nonfinite"
        facts.checked_by[label] = "saved"
    return facts


class _LiveCheck:
    """The tripwire of a live run: checks each output, keeps statistics of bad ones only."""

    def __init__(self, model: nn.Module, stop_at_first: bool) -> None:
        self.state: dict[str, Finiteness] = {}
        self.checked_by: dict[str, CheckedBy] = {}
        self.stats: dict[str, ValueStats] = {}
        self.partial: set[str] = set()
        self.nonfinite_params: dict[str, tuple[str, ...]] = {}
        self.is_stopped_early = False
        self._stop_at_first = stop_at_first
        self._params = dict(model.named_parameters())
        self._params.update(model.named_buffers())

    def _known_finite(self, labels: Sequence[str]) -> bool:
        return all(self.state.get(p) == "finite" and p not in self.partial for p in labels)

    def __call__(self, op: Op, value: Any) -> bool:
        if isinstance(value, torch.Tensor) and not (
            value.is_floating_point() or value.is_complex()
        ):
            self.state[op.label] = "finite"
            self.checked_by[op.label] = "dtype"
            return False
        if not checkable(value):
            return False
        is_finite = is_all_finite(value)  # one aminmax, one host sync per op
        self.state[op.label] = "finite" if is_finite else "nonfinite"
        self.checked_by[op.label] = "live"
        if is_finite:
            # the tripwire sees the first output only: the others of a multi-output op are
            # known finite only when they are views of finite inputs (split, chunk, unbind)
            if op.num_outputs > 1 and not (op.is_view and self._known_finite(op.parents)):
                self.partial.add(op.label)
            return False
        if not any(self.state.get(p) == "nonfinite" for p in op.parents):
            self.stats[op.label] = value_stats([[value]])[0]
            bad = [
                name
                for name in op.param_names
                if name in self._params
                and not bool(torch.isfinite(self._params[name].detach()).all())
            ]
            if bad:
                self.nonfinite_params[op.label] = tuple(bad)
        self.is_stopped_early = self._stop_at_first
        return self._stop_at_first


def run_live(
    model: Any, inputs: Any, *, stop_at_first: bool, trace_kwargs: dict[str, Any]
) -> ForwardFacts:
    """Run ``model`` once with every floating-point op output checked; keep no activation.

    ``trace_kwargs`` may hold ``capture=CaptureOptions(...)`` (hook plans, source lines) and
    ``save=False``. Gradients and the model output are never kept. A forward that raises is
    reported through ``forward_error`` with the facts gathered before the raise. The model's
    buffers and the global RNG streams are restored afterwards (``preserved_model_state``).

    Raises:
        DiagnosticArgumentError: an unknown keyword, or ``save`` other than False.
    """
    model = validate_model(model)
    unknown = sorted(set(trace_kwargs) - {"capture", "save"})
    if unknown:
        raise DiagnosticArgumentError(
            f"unexpected keyword(s) {unknown}; a live NaN check accepts capture=CaptureOptions(...)"
            " and save=False."
        )
    if trace_kwargs.get("save", False) is not False:
        raise DiagnosticArgumentError(
            f"save={trace_kwargs['save']!r}: the live check keeps no activation (save=False); to "
            "scan saved values, run tl.trace(model, inputs, save=...).find_nan()."
        )
    options = trace_kwargs.get("capture") or CaptureOptions()
    if not isinstance(options, CaptureOptions):
        raise DiagnosticArgumentError(
            f"capture must be tl.options.CaptureOptions(...), got {type(options).__name__}."
        )
    options = dataclasses.replace(
        options, keep_output=False, backward_ready=False, save_grads=False
    )
    check = _LiveCheck(model, stop_at_first)
    error: BaseException | None = None
    try:
        # The forward runs as the model is (train mode: batch statistics, Dropout), but leaves
        # no trace: a NaN would otherwise poison BatchNorm running stats for good.
        with preserved_model_state(model):
            trace = run_capture(model, inputs, save=False, capture=options, tripwire=check)
    except ForwardError as err:
        trace, error = err.partial_trace, err.__cause__ or err
        # the traceback's frames would pin the model's locals (activations) in the report
        error.__traceback__ = None
    return ForwardFacts(
        trace=trace,
        mode="live",
        state=check.state,
        checked_by=check.checked_by,
        stats=check.stats,
        partial=check.partial,
        nonfinite_params=check.nonfinite_params,
        forward_error=error,
        is_stopped_early=check.is_stopped_early,
    )
