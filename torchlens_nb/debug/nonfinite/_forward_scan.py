"""Per-op finiteness of one forward, read from saved values or checked live, and its causes.

Two sources fill the same :class:`ForwardFacts`:

* ``scan_saved(trace)`` reads the payloads a trace saved (batched: one host sync per device);
* ``run_live(model, inputs)`` checks each floating-point op output while the forward runs, through
  the capture's tripwire, with ``save=False``: no activation is kept, only the statistics of the
  bad outputs. One reduction (``value_class``: aminmax) and one host sync per floating-point op.

Which of the non-finite values matter, and where the one that matters was born, is read from
these facts by ``_paths.read_paths`` (a NaN always matters; an Inf only when it reaches a model
output, a NaN or a parameter). The live run keeps going past an Inf and stops at the first NaN
(``stop_at_first``) or runs to the output, so an intentional -inf (a causal mask) never ends it.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import nn

from ..._undo import Undo, undoing
from ...capture import Op, Trace, run_capture, validate_model
from ...errors import DiagnosticArgumentError, ForwardError
from ...options import CaptureOptions
from ...report._lineage import CheckedBy, Finiteness
from ...report._nonfinite import Coverage, NonfiniteKind, ValueStats
from .._isolation import keep_model_state
from .._values import (
    BatchRows,
    ValueClass,
    checkable,
    is_float_dtype,
    nonfinite_kinds,
    nonfinite_rows,
    saved_tensors,
    value_class,
    value_classes,
    value_stats,
)
from ._paths import Paths, read_paths

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
    """Ops checked live on some outputs only: another output could not be read (sparse, meta);
    they count as unknown. Every float output of a multi-output op is read (``topk``)."""
    nan: set[str] = field(default_factory=set)
    """Non-finite op outputs holding a NaN (the others hold only +/-Inf)."""
    nonfinite_params: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Live form: op label -> the parameters/buffers it read that hold a non-finite value (every
    non-finite op that reads parameters is checked, each parameter once)."""
    input_rows: dict[str, BatchRows | None] = field(default_factory=dict)
    """Non-finite model inputs -> which of their rows along dim 0 hold the bad values (read
    live; from the saved value on first use, :meth:`batch_rows`)."""
    forward_error: BaseException | None = None
    """The exception the model's forward raised (live form), if it raised."""
    is_stopped_early: bool = False
    """The live run stopped at the first NaN (later ops never ran)."""
    _paths: Paths | None = None
    _kinds: dict[str, NonfiniteKind | None] = field(default_factory=dict)
    """Kinds read from saved values by :meth:`kinds_of` (each value is read once)."""

    # ----- counts (read once the facts are complete: each is computed on first use) --------
    @property
    def ops(self) -> list[Op]:
        return self.trace.ops

    @functools.cached_property
    def nonfinite(self) -> list[str]:
        """Labels of the non-finite op outputs, in execution order."""
        return [op.label for op in self.ops if self.state.get(op.label) == "nonfinite"]

    @functools.cached_property
    def num_checked(self) -> int:
        return sum(1 for how in self.checked_by.values() if how != "dtype")

    @functools.cached_property
    def num_exact(self) -> int:
        return sum(1 for how in self.checked_by.values() if how == "dtype")

    @functools.cached_property
    def num_unchecked(self) -> int:
        return sum(1 for op in self.ops if self.state.get(op.label, "unknown") == "unknown")

    @property
    def coverage(self) -> Coverage:
        """``partial`` also when the forward did not run to its end (a raise or a stop) or the
        capture could not see into part of it (``Trace.blind_spots``)."""
        if self.num_checked == 0 and self.num_unchecked:
            return "none"
        incomplete = (
            self.num_unchecked or self.partial or self.trace.is_partial or self.trace.blind_spots
        )
        return "partial" if incomplete else "full"

    def finiteness(self, label: str) -> Finiteness:
        return self.state.get(label, "unknown")

    # ----- what matters ---------------------------------------------------------------------
    def is_known_finite(self, label: str) -> bool:
        """Checked finite, on every output (an op with an unreadable output is not)."""
        return self.state.get(label) == "finite" and label not in self.partial

    def paths(self) -> Paths:
        """Causes, reach and origin of the non-finite values (computed once, ``_paths``)."""
        if self._paths is None:
            self._paths = read_paths(self)
        return self._paths

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
                        and not self.is_known_finite(parent)
                        and self.state.get(parent) != "nonfinite"
                    ):
                        seen[parent] = None
                        following.append(parent)
            frontier = following
        ordered = list(seen)
        return tuple(ordered[:MAX_ZONE_LABELS]), len(ordered)

    def kinds_of(self, labels: Sequence[str]) -> list[NonfiniteKind | None]:
        """The non-finite kind of each op output: from its statistics when kept (live births),
        else from its saved value (one batched read); None when neither is there."""
        kinds: dict[str, NonfiniteKind | None] = {
            label: self.stats[label].kind for label in labels if label in self.stats
        }
        read = self._kinds
        saved = [
            lab
            for lab in labels
            if lab not in kinds and lab not in read and saved_tensors(self.trace[lab].out)
        ]
        found = nonfinite_kinds([saved_tensors(self.trace[label].out) for label in saved])
        read.update(zip(saved, found))
        return [kinds[label] if label in kinds else read.get(label) for label in labels]

    def batch_rows(self, label: str) -> BatchRows | None:
        """Which rows of the model input ``label`` hold its non-finite values (None: not an
        input, 0-d, or its value was neither read live nor saved)."""
        if self.trace[label].func != "input":
            return None
        if label not in self.input_rows:
            saved = saved_tensors(self.trace[label].out)
            self.input_rows[label] = nonfinite_rows(saved[0]) if saved else None
        return self.input_rows[label]

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
    for label, found in zip(labels, value_classes(values)):
        record(facts, label, found, "saved")
    return facts


def facts_from_stats(trace: Trace, stats: dict[str, ValueStats]) -> ForwardFacts:
    """The :class:`ForwardFacts` of saved values whose statistics are already computed (the
    ``dtype_range`` audit), so the rule of the NaN tools applies without a second read."""
    facts = ForwardFacts(trace=trace, mode="saved", stats=dict(stats))
    for op in trace.ops:
        stat = stats.get(op.label)
        if stat is not None:
            found: ValueClass = "finite" if stat.is_finite else "nan" if stat.nan_count else "inf"
            record(facts, op.label, found, "saved")
        elif not is_float_dtype(op.dtype):
            facts.state[op.label] = "finite"
            facts.checked_by[op.label] = "dtype"
    return facts


def record(facts: Any, label: str, found: ValueClass, checked_by: CheckedBy) -> None:
    """Write one value's class into ``facts`` (a :class:`ForwardFacts` or the live check)."""
    facts.state[label] = "finite" if found == "finite" else "nonfinite"
    facts.checked_by[label] = checked_by
    if found == "nan":
        facts.nan.add(label)


def _is_exact(value: Any) -> bool:
    """An integer or bool tensor: it cannot hold a NaN or an Inf."""
    return isinstance(value, torch.Tensor) and not (value.is_floating_point() or value.is_complex())


class _LiveCheck:
    """The tripwire of a live run: classifies each output, keeps statistics of births only.

    Per op it keeps a few words (state, how checked, NaN or not); the statistics of a value
    (8 numbers) only where no input was non-finite (a possible birth, an Inf mask included).
    Every non-finite op that reads parameters has them checked, each parameter once.
    """

    def __init__(self, model: nn.Module, stop_at_first: bool) -> None:
        self.state: dict[str, Finiteness] = {}
        self.checked_by: dict[str, CheckedBy] = {}
        self.stats: dict[str, ValueStats] = {}
        self.partial: set[str] = set()
        self.nan: set[str] = set()
        self.nonfinite_params: dict[str, tuple[str, ...]] = {}
        self.input_rows: dict[str, BatchRows | None] = {}
        self.is_stopped_early = False
        self._stop_at_first = stop_at_first
        self._params: dict[str, torch.Tensor] = dict(model.named_parameters())
        self._params.update(model.named_buffers())
        self._param_finite: dict[str, bool] = {}

    def _bad_params(self, op: Op) -> tuple[str, ...]:
        for name in op.param_names:
            if name in self._params and name not in self._param_finite:
                self._param_finite[name] = value_class(self._params[name].detach()) == "finite"
        return tuple(n for n in op.param_names if not self._param_finite.get(n, True))

    def __call__(self, op: Op, outputs: tuple[Any, ...]) -> bool:
        values = [v for v in outputs if checkable(v)]
        if not values:
            if all(_is_exact(v) for v in outputs):
                self.state[op.label] = "finite"
                self.checked_by[op.label] = "dtype"
            return False
        # every floating-point output is read (topk's values; its int64 indices are finite by
        # dtype): one aminmax, or one batched norm for several outputs, and one host sync
        found = value_class(values[0]) if len(values) == 1 else value_classes([values])[0]
        record(self, op.label, found, "live")
        if found == "finite":
            if not all(checkable(v) or _is_exact(v) for v in outputs):
                self.partial.add(op.label)  # an output that could not be read (sparse, meta)
            return False
        if not any(self.state.get(p) == "nonfinite" for p in op.parents):
            self.stats[op.label] = value_stats([values])[0]
        if op.func == "input":  # the batch came in bad: which of its rows
            self.input_rows[op.label] = nonfinite_rows(values[0])
        bad = self._bad_params(op)
        if bad:
            self.nonfinite_params[op.label] = bad
        # an Inf may be a mask that a later softmax neutralises: only a NaN ends the run
        stop = self._stop_at_first and found == "nan"
        self.is_stopped_early = stop
        return stop


def run_live(
    model: Any,
    inputs: Any,
    *,
    stop_at_first: bool,
    trace_kwargs: dict[str, Any],
    backward: bool = False,
) -> ForwardFacts:
    """Run ``model`` once with every floating-point op output checked; keep no activation.

    ``stop_at_first`` ends the run right after the first NaN (an Inf never ends it: it may be
    neutralised later). ``trace_kwargs`` may hold ``capture=CaptureOptions(...)`` (hook plans,
    source lines) and ``save=False``. Gradients and the model output are not kept, unless
    ``backward`` is set: then the trace keeps its output and every op's grad_fn with gradient
    logging (``save_grads``) so ``trace.backward(loss)`` can follow (``investigate``). A forward
    that raises is reported through ``forward_error`` with the facts gathered before the raise.
    The model's buffers and the global RNG streams are restored afterwards, whatever instant an
    interrupt arrives at (``keep_model_state`` under ``undoing``).

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
        options, keep_output=backward, backward_ready=backward, save_grads=backward
    )
    check = _LiveCheck(model, stop_at_first)
    error: BaseException | None = None
    try:
        # The forward runs as the model is (train mode: batch statistics, Dropout), but leaves
        # no trace: a NaN would otherwise poison BatchNorm running stats for good.
        def forward(undo: Undo) -> Trace:
            keep_model_state(model, undo)
            return run_capture(model, inputs, save=False, capture=options, tripwire=check)

        trace = undoing(forward)
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
        nan=check.nan,
        nonfinite_params=check.nonfinite_params,
        input_rows=check.input_rows,
        forward_error=error,
        is_stopped_early=check.is_stopped_early,
    )
