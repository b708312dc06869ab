"""Reports about activation values: the probes, their post-hoc doors, dead neurons, dtype range.

Typed reports, all frozen plain data:

* :class:`DeadNeuronsReport` (``tl.debug.dead_neurons``): output units zero at every position of
  one trace, one row per op a module returned.
* :class:`DTypeRangeReport` (``tl.debug.dtype_range``): numeric-range and precision hazards of
  saved activations, with audited coverage.
* :class:`RangeReport` (``RangeProbe.report()``): per-site observed ranges against the caller's
  declared bounds; ``activation_range_violated`` findings.
* :class:`LivenessReport` (``LivenessProbe.report()``): per-site zero fraction and running maxima,
  statistics only (no unit verdict: one batch can never prove a unit dead).
* :class:`DeadReport` (``tl.dead([...])``): the multi-sample dead-unit verdict, worded as an
  upper bound.
* :class:`ThresholdReport` (``tl.threshold(trace, within=...)``): which saved ops hold values
  outside a range, where the first out-of-range value sits, and which ops start it.

Each table comes from a pandas-free ``*_rows(...) -> (rows, attrs)`` function.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ._base import Report, payload_head
from ._status import tones

RANGE_COLUMNS = (
    "label",
    "module",
    "low",
    "high",
    "calls",
    "numel",
    "below",
    "above",
    "nonfinite",
    "observed_min",
    "observed_max",
    "is_violated",
)
LIVENESS_COLUMNS = (
    "label",
    "module",
    "calls",
    "numel",
    "zero_fraction",
    "running_max",
    "running_max_abs",
    "unit_dim",
    "units",
    "units_all_zero",
)
DEAD_COLUMNS = (
    "label",
    "module",
    "func",
    "unit_dim",
    "units",
    "dead",
    "dead_fraction",
    "dead_indices",
    "file",
    "line",
)
THRESHOLD_COLUMNS = (
    "label",
    "module",
    "func",
    "shape",
    "below",
    "above",
    "nonfinite",
    "observed_min",
    "observed_max",
    "first_index",
    "first_value",
    "is_origin",
    "file",
    "line",
)
DEAD_NEURONS_COLUMNS = (
    "op",
    "module",
    "total_units",
    "dead_count",
    "dead_frac",
    "sample_dead_idx",
    "reason",
    "source_line",
)
DTYPE_RANGE_COLUMNS = (
    "op",
    "module",
    "dtype",
    "is_audited",
    "numel",
    "nan_count",
    "inf_count",
    "max_abs",
    "dtype_max",
    "subnormal_frac",
    "downcast_from",
    "flags",
    "source_line",
)

MAX_LISTED_INDICES = 32
"""Dead-unit indices listed per op (the count is always exact; the list is for reading)."""
MAX_PAYLOAD_ITEMS = 200
"""Dead-unit entries / violations in the payload's ``data`` (``*_total`` keeps the count). The
tables carry every row and the panel pages them from Python: without the cut a 5,000-op trace
shipped its threshold violations twice, 1.4 MB (tests/faults/test_size.py)."""


@dataclass(frozen=True)
class RangeStat:
    """What a :class:`~torchlens_nb.debug.RangeProbe` saw at one site, over every call."""

    label: str
    """Trace label of the op whose output was observed, e.g. ``"relu_1"``."""
    module: str
    """Innermost module address (``""`` is the root module)."""
    low: float
    """Declared lower bound (inclusive)."""
    high: float
    """Declared upper bound (inclusive)."""
    calls: int
    """How many values the site produced (one per matching op execution per capture)."""
    numel: int
    """Elements inspected in total."""
    below: int
    """Elements < ``low``."""
    above: int
    """Elements > ``high``."""
    nonfinite: int
    """NaN or +-Inf elements (NaN lies in no range; infinities also count in below/above)."""
    observed_min: float
    """Smallest finite element seen (NaN when none was finite)."""
    observed_max: float
    """Largest finite element seen (NaN when none was finite)."""

    @property
    def is_violated(self) -> bool:
        """True when any element fell outside ``[low, high]`` or was NaN."""
        return self.below > 0 or self.above > 0 or self.nonfinite > 0


@dataclass(frozen=True)
class LivenessStat:
    """Zero fraction and running maxima of one site (statistics, not a unit verdict)."""

    label: str
    """Trace label of the op whose output was observed."""
    module: str
    """Innermost module address (``""`` is the root module)."""
    calls: int
    """How many values the site produced."""
    numel: int
    """Elements inspected in total."""
    zero_fraction: float
    """Fraction of all elements seen that were exactly 0."""
    running_max: float
    """Largest element seen over every call (NaN when nothing finite was seen)."""
    running_max_abs: float
    """Largest absolute element seen over every call."""
    unit_dim: int
    """Axis read as units (see ``tl.debug.LivenessProbe``); -1 for 0-D/1-D values."""
    units: int
    """Size of that axis."""
    units_all_zero: int
    """Units whose every element so far was exactly 0 (a statistic over the calls seen)."""


@dataclass(frozen=True)
class DeadUnits:
    """Units of one op that were exactly zero in every sample given to ``tl.dead``."""

    label: str
    """Trace label of the op whose units were counted."""
    module: str
    """Innermost module address (``""`` is the root module)."""
    func: str
    """The torch function the op called."""
    unit_dim: int
    """Axis read as units."""
    units: int
    """Size of that axis."""
    dead: int
    """Units zero in every element of every sample seen (an upper bound on truly dead units)."""
    dead_indices: tuple[int, ...]
    """The first :data:`MAX_LISTED_INDICES` such unit indices."""
    file: str | None = None
    """Path of the file holding the op's own source line."""
    line: int | None = None
    """Line number of that source line."""


@dataclass(frozen=True)
class RangeViolation:
    """One saved op whose output holds values outside ``within`` (``tl.threshold``)."""

    label: str
    """Trace label of the op."""
    module: str
    """Innermost module address (``""`` is the root module)."""
    func: str
    """The torch function the op called."""
    shape: tuple[int, ...]
    """Shape of the op's output."""
    below: int
    """Elements below ``low``."""
    above: int
    """Elements above ``high``."""
    nonfinite: int
    """NaN or +-Inf elements."""
    observed_min: float
    """Smallest finite element (NaN when none is finite)."""
    observed_max: float
    """Largest finite element (NaN when none is finite)."""
    first_index: tuple[int, ...]
    """Index of the first out-of-range element in row-major order."""
    first_value: float
    """Value of the first out-of-range element."""
    is_origin: bool
    """True when no saved parent op was itself outside the range: the violation starts here."""
    file: str | None = None
    """Path of the file holding the op's own source line."""
    line: int | None = None
    """Line number of that source line."""


def range_rows(stats: Sequence[RangeStat]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Rows of the ``sites`` table of a :class:`RangeReport`, and its attrs."""
    rows = [
        dict(
            label=s.label,
            module=s.module,
            low=s.low,
            high=s.high,
            calls=s.calls,
            numel=s.numel,
            below=s.below,
            above=s.above,
            nonfinite=s.nonfinite,
            observed_min=s.observed_min,
            observed_max=s.observed_max,
            is_violated=s.is_violated,
        )
        for s in stats
    ]
    return rows, {"sites": len(rows), "violated": sum(s.is_violated for s in stats)}


def liveness_rows(stats: Sequence[LivenessStat]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Rows of the ``sites`` table of a :class:`LivenessReport`, and its attrs."""
    rows = [
        dict(
            label=s.label,
            module=s.module,
            calls=s.calls,
            numel=s.numel,
            zero_fraction=s.zero_fraction,
            running_max=s.running_max,
            running_max_abs=s.running_max_abs,
            unit_dim=s.unit_dim,
            units=s.units,
            units_all_zero=s.units_all_zero,
        )
        for s in stats
    ]
    return rows, {"sites": len(rows)}


def dead_rows(
    units: Sequence[DeadUnits], samples: int
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Rows of the ``ops`` table of a :class:`DeadReport` (every op scanned), and its attrs."""
    rows = [
        dict(
            label=u.label,
            module=u.module,
            func=u.func,
            unit_dim=u.unit_dim,
            units=u.units,
            dead=u.dead,
            dead_fraction=u.dead / u.units if u.units else math.nan,
            dead_indices=" ".join(map(str, u.dead_indices)),
            file=u.file,
            line=u.line,
        )
        for u in units
    ]
    return rows, {"samples": samples, "ops": len(rows), "dead": sum(u.dead for u in units)}


def threshold_rows(
    violations: Sequence[RangeViolation], low: float, high: float
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Rows of the ``violations`` table of a :class:`ThresholdReport`, and its attrs."""
    rows = [
        dict(
            label=v.label,
            module=v.module,
            func=v.func,
            shape=list(v.shape),
            below=v.below,
            above=v.above,
            nonfinite=v.nonfinite,
            observed_min=v.observed_min,
            observed_max=v.observed_max,
            first_index=list(v.first_index),
            first_value=v.first_value,
            is_origin=v.is_origin,
            file=v.file,
            line=v.line,
        )
        for v in violations
    ]
    return rows, {
        "low": low,
        "high": high,
        "ops": len(rows),
        "origins": sum(v.is_origin for v in violations),
    }


RangeStatus = Literal["found", "clean", "no_sites"]
"""The statuses of :class:`RangeReport`."""


@dataclass(frozen=True, kw_only=True, repr=False)
class RangeReport(Report):
    """Declared activation ranges against what a :class:`RangeProbe` observed."""

    report_type = "range"
    status_tones = tones({"found": "findings", "clean": "ok", "no_sites": "warning"})
    status: RangeStatus
    """``no_sites``: no selected site produced a value, so nothing was observed."""
    stats: tuple[RangeStat, ...] = ()
    """One entry per declared site, with what it observed."""


LivenessStatus = Literal["measured", "no_sites"]
"""The statuses of :class:`LivenessReport`."""


@dataclass(frozen=True, kw_only=True, repr=False)
class LivenessReport(Report):
    """Per-site zero fraction and running maxima from a :class:`LivenessProbe`."""

    report_type = "liveness"
    status_tones = tones({"measured": "info", "no_sites": "warning"})
    status: LivenessStatus
    """``measured``, or ``no_sites`` when no selected site produced a value."""
    stats: tuple[LivenessStat, ...] = ()
    """One entry per observed site."""


DeadStatus = Literal["found", "none_found", "partial", "unavailable"]
"""The statuses of :class:`DeadReport`."""


@dataclass(frozen=True, kw_only=True, repr=False)
class DeadReport(Report):
    """``tl.dead``: units zero in every sample seen, an upper bound on dead units."""

    report_type = "dead"
    status_tones = tones(
        {"found": "findings", "none_found": "ok", "partial": "warning", "unavailable": "warning"}
    )
    payload_properties = ("units_total",)
    status: DeadStatus
    """``found``, ``none_found``, ``partial`` (some ops were not comparable) or ``unavailable``."""
    samples: int = 0
    """Traces (forward passes) compared."""
    batch_rows: int = 0
    """Batch rows over all samples (the leading dimension of each trace's first input)."""
    units: tuple[DeadUnits, ...] = field(default=(), metadata=payload_head(MAX_PAYLOAD_ITEMS))
    """Every op scanned, with its dead-unit count (zero included)."""
    ops_not_common: int = 0
    """Ops skipped because they were not saved (or not float) in every trace."""

    @property
    def units_total(self) -> int:
        """Ops scanned (the payload lists at most :data:`MAX_PAYLOAD_ITEMS` of them)."""
        return len(self.units)


ThresholdStatus = Literal["found", "clean", "partial", "unavailable"]
"""The statuses of :class:`ThresholdReport`."""


@dataclass(frozen=True, kw_only=True, repr=False)
class ThresholdReport(Report):
    """``tl.threshold``: saved ops holding values outside ``[low, high]``, in execution order."""

    report_type = "threshold"
    status_tones = tones(
        {"found": "findings", "clean": "ok", "partial": "warning", "unavailable": "warning"}
    )
    payload_properties = ("violations_total",)
    status: ThresholdStatus
    """``found``, ``clean``, ``partial`` (some matching ops were not saved) or ``unavailable``."""
    low: float = -math.inf
    """Lower bound of ``within=(low, high)`` (inclusive)."""
    high: float = math.inf
    """Upper bound of ``within=(low, high)`` (inclusive)."""
    ops_scanned: int = 0
    """Saved ops whose output was checked."""
    ops_unsaved: int = 0
    """Ops of the trace (matching the selector) whose output was not saved: not scanned."""
    violations: tuple[RangeViolation, ...] = field(
        default=(), metadata=payload_head(MAX_PAYLOAD_ITEMS)
    )
    """Each saved op with values outside the range, in execution order."""

    @property
    def violations_total(self) -> int:
        """Ops holding values outside the range (the payload lists at most
        :data:`MAX_PAYLOAD_ITEMS`)."""
        return len(self.violations)


DeadNeuronsStatus = Literal["found", "clean", "unknown"]
"""The statuses of :class:`DeadNeuronsReport`."""


@dataclass(frozen=True, kw_only=True, repr=False)
class DeadNeuronsReport(Report):
    """Units that are zero at every position, one row per op a module (or the model) returned."""

    report_type = "dead_neurons"
    status_tones = tones({"found": "findings", "clean": "ok", "unknown": "warning"})
    status: DeadNeuronsStatus
    """``unknown``: no row could be counted (nothing saved or nothing floating point)."""
    dim: int | None
    """The unit axis forced by the caller, or None for the per-op rules."""
    max_activation: float
    """A unit is dead when every element of its slice has ``|x| <= max_activation`` (0.0 by default:
    exactly zero)."""
    num_rows: int
    """Rows of the table: one per op a module (or the model) returned."""
    num_counted: int
    """Rows whose output was saved and floating point (the others have no count)."""
    total_dead: int
    """Dead units summed over the counted rows."""


DTypeRangeStatus = Literal["found", "clean", "unknown"]
"""The statuses of :class:`DTypeRangeReport`."""


@dataclass(frozen=True, kw_only=True, repr=False)
class DTypeRangeReport(Report):
    """Numeric-range and precision hazards of saved activations, with audited coverage."""

    report_type = "dtype_range"
    status_tones = tones({"found": "findings", "clean": "ok", "unknown": "warning"})
    status: DTypeRangeStatus
    """``found``, ``clean``, or ``unknown`` (no saved floating-point output to audit)."""
    num_audited_ops: int
    """Ops whose saved floating-point output was inspected."""
    num_ops: int
    """Every op of the trace (unsaved and non-float outputs are counted here, not audited)."""
    max_fraction: float
    """A finite magnitude at least this fraction of the dtype's maximum is ``near_max`` (0.9 by
    default)."""
    subnormal_fraction_threshold: float
    """A tensor with at least this fraction of subnormal elements is ``subnormal_heavy`` (0.1 by
    default)."""


__all__ = [
    "DEAD_NEURONS_COLUMNS",
    "DTYPE_RANGE_COLUMNS",
    "DTypeRangeReport",
    "DeadNeuronsReport",
    "DeadReport",
    "DeadUnits",
    "LivenessReport",
    "LivenessStat",
    "RangeReport",
    "RangeStat",
    "RangeViolation",
    "ThresholdReport",
    "dead_rows",
    "liveness_rows",
    "range_rows",
    "threshold_rows",
]
