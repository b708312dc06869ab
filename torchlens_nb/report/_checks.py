"""Reports of the training checks kit: ``CheckReport`` and ``ParamHealthReport``.

Both are frozen plain data built by ``torchlens_nb.checks``. This module also owns the closed
vocabularies every gradient or parameter scalar carries across a surface (``Stage``,
``ScaleProvenance``) and the session's ``Site`` / ``Action`` / ``CheckState`` words, so the
payload, the card and the panel use one spelling.

``CheckReport.to_dict()`` carries ``schema_version`` (1), ``counters``, ``ledgers`` and
``checks_run`` at the top level of the envelope as well as under ``data``: the public export is
``report.to_dict()["counters"]`` and ``report.to_dict()["ledgers"]["scale"]``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from .._jsonsafe import to_jsonable
from ..errors import ReportOptionError
from ._base import PAYLOAD_EXCLUDED, Report, Table, frozen_mapping, payload_as
from ._status import Tone, tones
from ._timeline import CheckTimeline, TimelineSummary

if TYPE_CHECKING:
    import plotly.graph_objects as go

CHECK_REPORT_SCHEMA_VERSION = 1
"""Version of the ``CheckReport`` record shape (``counters``, ``ledgers``, ``checks_run``)."""

Stage = Literal["pre_clip_scaled", "pre_clip_unscaled", "post_clip_applied"]
"""Where a gradient scalar was read: before clipping (loss-scaled or not) or as applied."""
ScaleProvenance = Literal["unscaled", "gradscaler", "explicit", "unknown"]
"""What scale a gradient scalar carries: none, a GradScaler's, a caller-declared one, unknown."""
Site = Literal["S-A", "S-B", "S-C", "S-D"]
"""S-A gradient arrival, S-B step pre-hook (pre-write), S-C step post-hook, S-D boundary."""
Action = Literal["raise", "warn", "collect"]
"""Control flow of a check, separate from the severity of what it finds."""
CheckState = Literal["clean", "collecting", "warned", "raised", "unavailable"]
"""``clean``: evaluated, nothing found; ``collecting``: not evaluated yet or findings collected;
``warned`` / ``raised``: emitted; ``unavailable``: the evidence does not exist in this run."""
StepProvenance = Literal["inferred", "explicit"]
"""How attempts were grouped: from hooks alone (``inferred``) or by ``session.step()``."""
SkipCause = Literal["scaler", "loop", "unknown"]
"""Who skipped an attempt that never reached the optimizer's write: the GradScaler (its scale
backed off), the training loop itself (no scale decrement, or no scaler), or unknown (no
``scaler=`` declared, so a GradScaler skip looks like a loop skip)."""
CheckStatus = Literal["clean", "found", "raised", "incomplete"]
"""``clean`` only when every registered check was evaluated and nothing was found or unknown."""


@dataclass(frozen=True)
class CheckRun:
    """One registered check of a session and where it stands."""

    name: str
    """``"change"``, ``"nonfinite_grad"``, ``"update_ratio"``, ``"magnitude"``,
    ``"no_accepted_steps"`` or ``"param_scan"``."""
    site: Site
    """The site whose evidence the check judges."""
    action: Action
    """What the check does when it fires: ``raise``, ``warn`` or ``collect``."""
    state: CheckState
    """``clean``, ``collecting``, ``warned``, ``raised`` or ``unavailable`` (see ``CheckState``)."""
    evaluations: int
    """How many attempts (or scans) the check judged."""
    findings: int
    """How many findings it made."""
    options: Mapping[str, Any] = field(default_factory=frozen_mapping)
    """The registration arguments (window, thresholds, schedule)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "options", frozen_mapping(self.options))

    def as_dict(self) -> dict[str, Any]:
        """Plain-dict form (JSON-safe values)."""
        return to_jsonable({f.name: getattr(self, f.name) for f in dataclasses.fields(self)})


@dataclass(frozen=True, kw_only=True, repr=False)
class CheckReport(Report):
    """What a ``ChecksSession`` observed: findings, checks run, counters and ledgers.

    ``counters`` holds ``attempts``, ``accepted``, ``skipped`` (and ``skipped_by_scaler`` /
    ``skipped_by_loop`` / ``skipped_by_unknown``: see ``SkipCause``), ``raised``,
    ``pending_backwards``, ``backwards``, ``grad_arrivals``, ``step_pre_fires``,
    ``step_post_fires``, ``accumulation_factor`` and ``step_provenance``. ``ledgers["scale"]`` is the skip ledger
    (GradScaler scale decrements) and ``ledgers["steps"]`` the per-attempt records (most recent
    first-in order, bounded; ``ledgers["steps_truncated"]`` counts what was dropped).
    """

    report_type = "checks"
    row_tones: ClassVar[Mapping[str, Tone]] = {  # one per CheckState
        "clean": "ok",
        "collecting": "info",
        "warned": "warning",
        "raised": "critical",
        "unavailable": "warning",
    }
    status_tones = tones(
        {"clean": "ok", "found": "findings", "raised": "critical", "incomplete": "warning"}
    )
    status: CheckStatus
    """``clean`` only when every registered check was evaluated and found nothing; ``found``,
    ``raised`` (the session stopped a step) or ``incomplete``."""
    schema_version: int = CHECK_REPORT_SCHEMA_VERSION
    """Version of this record's shape (``counters``, ``ledgers``, ``checks_run``)."""
    checks_run: tuple[CheckRun, ...] = ()
    """Each registered check and where it stands (``report.check(name)`` finds one)."""
    counters: Mapping[str, Any] = field(default_factory=frozen_mapping)
    """Attempt and hook counts (the keys are listed in the class docstring above),
    ``accumulation_factor`` and ``step_provenance``."""
    ledgers: Mapping[str, Any] = field(default_factory=frozen_mapping)
    """``scale``: the skip ledger (GradScaler scale decrements); ``steps``: the per-attempt records
    (bounded; ``steps_truncated`` counts what was dropped)."""
    is_final: bool = False
    """True once the session's scope exited (normally or by an exception)."""
    exit_reason: str | None = None
    """``"completed"``, ``"raised CheckViolationError"``, ``"exception ValueError"``; None while
    the session is still attached."""
    timeline: CheckTimeline | None = field(default=None, metadata=payload_as("timeline_summary"))
    """Layers x steps of the values the stability check measured, the loss and the findings
    at their steps (``report/_timeline.py``); None when the stability check did not run."""

    @property
    def timeline_summary(self) -> TimelineSummary | None:
        """The timeline without its values (those travel as the ``timeline_*`` arrays)."""
        return self.timeline.summary() if self.timeline is not None else None

    def figure(self) -> go.Figure:
        """The timeline as a plotly figure (:meth:`CheckTimeline.figure`).

        Raises:
            ReportOptionError: the session recorded no timeline (stability check off, or no
                attempt yet).
        """
        if self.timeline is None:
            raise ReportOptionError(
                "this report has no timeline: the session's stability check did not run or saw "
                "no attempt yet; keep ChecksSession(stability=True) and train at least one step."
            )
        return self.timeline.figure()

    def check(self, name: str) -> CheckRun:
        """The registered check called ``name``."""
        for run in self.checks_run:
            if run.name == name:
                return run
        raise ReportOptionError(
            f"no check {name!r} ran in this session; registered: "
            f"{[r.name for r in self.checks_run]}."
        )

    def panel_arrays(self) -> dict[str, Any]:
        """The ``series`` table as binary arrays for the dashboard chart.

        ``series``: float32 ``(rows, 4)`` of attempt, group, grad_norm, update_ratio (NaN where
        not measured); ``series_present``: uint8 ``(rows, 2)``, 1 where grad_norm / update_ratio
        was measured (so a measured NaN stays distinguishable from "not measured"); the
        timeline's ``timeline_loss`` and ``timeline_<metric>`` (``report/_timeline.py``).
        """
        timeline = self.timeline.arrays() if self.timeline is not None else {}
        if not any(t.name == "series" for t in self.tables):
            return timeline
        rows = self.table("series").dicts()
        values = [
            [r["attempt"], r["group"], _number(r["grad_norm"]), _number(r["update_ratio"])]
            for r in rows
        ]
        present = [
            [int(r["grad_norm"] is not None), int(r["update_ratio"] is not None)] for r in rows
        ]
        return {
            "series": {"dtype": "float32", "shape": [len(rows), 4], "data": values},
            "series_present": {"dtype": "uint8", "shape": [len(rows), 2], "data": present},
            **timeline,
        }

    def to_dict(self) -> dict[str, Any]:
        """The payload envelope plus ``schema_version``, ``counters``, ``ledgers`` and
        ``checks_run`` at the top level (the spec's public export shape)."""
        payload = super().to_dict()
        data = payload["data"]
        for key in ("schema_version", "counters", "ledgers", "checks_run"):
            payload[key] = data[key]
        return payload


@dataclass(frozen=True)
class SessionOverhead:
    """What ``ChecksSession.overhead()`` measured (milliseconds and bytes, never percentages:
    a percentage belongs to the caller's batch shape)."""

    scan_ms: float
    """Best of the repeated scan-kernel runs over the parameters and their gradients."""
    scanned_tensors: int
    """Tensors the scan kernel read (parameters and their gradients)."""
    scanned_bytes: int
    """Bytes the scan kernel read."""
    snapshot_bytes: int
    """Bytes one update-ratio snapshot copies."""
    site_ms: float
    """Time spent so far in the session's S-B, S-C and S-D callbacks (S-D's batched norm
    included; S-A's counting is not timed)."""
    attempts: int
    """Optimizer attempts the session has seen so far."""
    site_ms_per_attempt: float | None
    """``site_ms / attempts`` (None before the first attempt)."""


def _number(value: float | None) -> float:
    return float("nan") if value is None else float(value)


ParamHealthKind = Literal["parameter", "buffer", "tensor"]
ParamHealthStatus = Literal["scanned", "skipped"]
Fill = Literal["all_zero", "all_same"]

PARAM_HEALTH_COLUMNS = (
    "name",
    "kind",
    "status",
    "skip_reason",
    "dtype",
    "shape",
    "numel",
    "device",
    "coverage",
    "nan_count",
    "posinf_count",
    "neginf_count",
    "zero_count",
    "subnormal_count",
    "finite_min",
    "finite_max",
    "absmax",
    "dtype_max",
    "headroom_fraction",
    "fill",
    "bounds",
    "out_of_bounds_count",
)


@dataclass(frozen=True)
class ParamHealthRow:
    """One tensor of a ``param_health`` scan (scanned, or skipped with its reason)."""

    name: str
    """The tensor's name (parameter or buffer address, or the mapping's key)."""
    kind: ParamHealthKind
    """``parameter``, ``buffer`` or ``tensor`` (an entry of a mapping)."""
    status: ParamHealthStatus
    """``scanned``, or ``skipped`` with its ``skip_reason``."""
    skip_reason: str | None
    """``"meta"``, ``"sparse"``, ``"quantized"``, ``"not_a_tensor"`` or ``"none"``."""
    dtype: str | None
    """The tensor's dtype, e.g. ``float16`` (None when not a tensor)."""
    shape: tuple[int, ...] | None
    """The tensor's shape (None when not a tensor)."""
    numel: int
    """Number of elements."""
    device: str | None
    """The tensor's device, e.g. ``cpu`` (None when not a tensor)."""
    coverage: float
    """Fraction of the tensor's elements the scan read: 1.0 when scanned, 0.0 when skipped."""
    nan_count: int = 0
    """Elements that are NaN."""
    posinf_count: int = 0
    """Elements that are +inf."""
    neginf_count: int = 0
    """Elements that are -inf."""
    zero_count: int = 0
    """Elements that are exactly zero."""
    subnormal_count: int = 0
    """Nonzero elements smaller in magnitude than the dtype's smallest normal number."""
    finite_min: float | None = None
    """Smallest finite value (None when no element is finite)."""
    finite_max: float | None = None
    """Largest finite value (None when no element is finite)."""
    absmax: float | None = None
    """Largest finite magnitude."""
    dtype_max: float | None = None
    """Largest finite value of the dtype (``finfo.max`` / ``iinfo.max``)."""
    headroom_fraction: float | None = None
    """``absmax / dtype_max``: 0.95 means one 1.05x growth from overflow."""
    fill: Fill | None = None
    """``all_zero`` or ``all_same`` when every element holds one value (numel >= 2)."""
    bounds: tuple[float, float] | None = None
    """The caller-declared ``(low, high)`` that applied to this tensor."""
    out_of_bounds_count: int | None = None
    """Finite elements outside ``bounds`` (None when no bounds applied)."""

    def as_tuple(self) -> tuple[Any, ...]:
        """The row in ``PARAM_HEALTH_COLUMNS`` order."""
        return tuple(getattr(self, c) for c in PARAM_HEALTH_COLUMNS)


@dataclass(frozen=True, kw_only=True, repr=False)
class ParamHealthReport(Report):
    """A one-shot scan of a module's tensors or of any name -> tensor mapping."""

    report_type = "param_health"
    status_tones = tones({"clean": "ok", "found": "findings", "incomplete": "warning"})
    status: Literal["clean", "found", "incomplete"]
    """``incomplete``: some tensors were skipped (meta, sparse, quantized) or nothing was scanned."""
    rows: tuple[ParamHealthRow, ...] = field(default=(), metadata=PAYLOAD_EXCLUDED)
    """One row per tensor (they travel as the ``params`` table)."""
    checks_run: tuple[str, ...] = ()
    """The rules evaluated: ``nonfinite``, ``bounds``, ``dtype_headroom``, ``subnormal``,
    ``fill``."""
    coverage: Mapping[str, Any] = field(default_factory=frozen_mapping)
    """``tensors_scanned``, ``tensors_skipped``, ``elements_scanned``, ``elements_total`` and
    ``fraction`` (elements scanned / elements total)."""
    thresholds: Mapping[str, Any] = field(default_factory=frozen_mapping)
    """The rule thresholds of the scan: ``max_fraction`` (dtype headroom) and
    ``subnormal_fraction_threshold``."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.tables:
            table = Table(
                "param_health",
                PARAM_HEALTH_COLUMNS,
                tuple(r.as_tuple() for r in self.rows),
                {**self.coverage, **self.thresholds},
            )
            object.__setattr__(self, "tables", (table,))

    @property
    def skipped(self) -> tuple[ParamHealthRow, ...]:
        """The rows that were not scanned, each with its ``skip_reason``."""
        return tuple(r for r in self.rows if r.status == "skipped")

    def row(self, name: str) -> ParamHealthRow:
        """The row of tensor ``name``."""
        for candidate in self.rows:
            if candidate.name == name:
                return candidate
        raise ReportOptionError(f"no tensor {name!r} in this scan; {len(self.rows)} rows.")
