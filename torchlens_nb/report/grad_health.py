"""Gradient and activation health reports: ``grad_health``, ``dead_neurons``, ``dtype_range``
and the ``trace.audit()`` roll-up.

Each is frozen plain data built by ``tl.debug`` (``debug/_grad_health.py``,
``debug/_dead_neurons.py``, ``debug/_dtype_range.py``, ``debug/_audit.py``). The tables hold the
rows of the pandas-free ``*_rows`` cores unchanged, so ``report.to_pandas()`` and the panels show
the same facts the cores return.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from ._base import Report, Unavailable, frozen_mapping

if TYPE_CHECKING:
    import plotly.graph_objects

Verdict = Literal["ok", "zero", "vanishing", "exploding", "unknown"]
"""Gradient verdict of one row: ``zero`` is exact and needs no scale; ``vanishing``, ``ok`` and
``exploding`` compare a magnitude with a threshold and are ``unknown`` when the loss scale is."""
VERDICTS: tuple[Verdict, ...] = ("ok", "zero", "vanishing", "exploding", "unknown")
FLAG_VERDICTS: tuple[Verdict, ...] = ("zero", "vanishing", "exploding")
"""The verdicts that flag a row (and can put it on the frontier)."""
ScaleProvenance = Literal["unscaled", "gradscaler", "explicit", "unknown"]
"""Where the scale dividing the recorded gradients came from (checks kit vocabulary)."""
Stage = Literal["pre_clip_scaled", "pre_clip_unscaled", "post_clip_applied"]
"""Where in the step the recorded gradient was read (checks kit vocabulary)."""
Basis = Literal["total_norm", "rms"]
"""What the thresholds compare: each gradient's total L2 norm, or norm / sqrt(numel)."""

GRAD_HEALTH_COLUMNS = (
    "op",
    "index",
    "module",
    "grad_norm",
    "grad_norm_raw",
    "rms",
    "numel",
    "verdict",
    "is_frontier",
    "stage",
    "scale_provenance",
    "source_line",
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

MAX_PANEL_ROWS = 100_000
"""Rows the grad_health panel receives whole: about 36 bytes a row of binary columns, so 3.6 MB
at this cap, well under the widgets' 8 MiB array limit (which would downsample, and so corrupt,
the label text); beyond it the panel shows the kernel-paged table instead."""

_PROFILE_COLOURS = {
    "ok": "#2e7d32",
    "vanishing": "#ef6c00",
    "exploding": "#c62828",
    "zero": "#6a1b9a",
    "unknown": "#757575",
}
"""Plotly figures are not themed by the notebook CSS, so the verdict colours are fixed here."""


@dataclass(frozen=True, kw_only=True, repr=False)
class GradHealthReport(Report):
    """One row per gradient a backward pass saved, with verdicts and the frontier.

    Read the table with ``to_pandas()`` (``attrs`` carry bwd, thresholds and coverage), the
    profile with ``figure()``.
    """

    report_type = "grad_health"
    bwd: int
    """Index of the backward pass in ``trace.backward_passes``."""
    basis: Basis
    vanishing_threshold: float
    exploding_threshold: float
    grad_scale: float | None
    """The loss scale the gradients were divided by (None when not known)."""
    scale_provenance: ScaleProvenance
    stage: Stage
    frontier: tuple[str, ...] = ()
    """Labels of the frontier ops, in execution order."""
    verdict_counts: Mapping[str, int] = field(default_factory=frozen_mapping)

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "verdict_counts", frozen_mapping(self.verdict_counts))

    def figure(self) -> plotly.graph_objects.Figure:
        """The per-op gradient-norm profile as a plotly figure (needs plotly).

        x is the op's execution index, y the value the verdict was decided on (``grad_norm`` or
        ``rms``) on a log axis, with both thresholds drawn. Zero gradients sit on a floor a
        decade below the smallest positive value (a log axis has no 0); rows whose scale is
        unknown show their RAW (still scaled) value in grey, for shape only.
        """
        import plotly.graph_objects as go

        points = profile_points(self)
        fig = go.Figure()
        for verdict, colour in _PROFILE_COLOURS.items():
            chosen = [p for p in points if p["verdict"] == verdict]
            if not chosen:
                continue
            name = "unknown (raw, scale unknown)" if verdict == "unknown" else verdict
            fig.add_trace(
                go.Scatter(
                    x=[p["index"] for p in chosen],
                    y=[p["y"] for p in chosen],
                    mode="markers",
                    name=name,
                    marker={"color": colour, "symbol": "x" if verdict == "zero" else "circle"},
                    text=[f"{p['op']} ({p['module'] or 'root'})" for p in chosen],
                    hovertemplate="%{text}<br>%{y:.3g}<extra>" + name + "</extra>",
                )
            )
        frontier = [p for p in points if p["is_frontier"]]
        if frontier:
            fig.add_trace(
                go.Scatter(
                    x=[p["index"] for p in frontier],
                    y=[p["y"] for p in frontier],
                    mode="markers",
                    name="frontier",
                    marker={"color": "#000000", "symbol": "circle-open", "size": 14},
                    text=[p["op"] for p in frontier],
                    hovertemplate="frontier %{text}<extra></extra>",
                )
            )
        for threshold, label in (
            (self.vanishing_threshold, "vanishing"),
            (self.exploding_threshold, "exploding"),
        ):
            if 0 < threshold < math.inf:
                fig.add_hline(y=threshold, line_dash="dash", annotation_text=f"{label} threshold")
        axis_title = "rms (norm / sqrt(numel))" if self.basis == "rms" else "gradient norm"
        fig.update_layout(
            title=f"Gradient norm profile, backward {self.bwd}",
            xaxis_title="op (execution order)",
            yaxis_title=axis_title,
            yaxis_type="log",
        )
        return fig

    def panel_arrays(self) -> dict[str, Any]:
        """Every row for the grad_health panel, as binary columns (never JSON lists).

        Numbers are float32 (NaN where a value is None: the ``verdict`` says which), ``plot_y``
        the profile value of :func:`profile_points` (bars and chart), ``verdict``
        is a uint8 index into :data:`VERDICTS`, ``is_frontier`` uint8, ``module_id`` an index
        into ``modules``; ``ops`` and ``modules`` are UTF-8 text, one name per line. Above
        :data:`MAX_PANEL_ROWS` rows this is empty and the panel shows the kernel-paged table.
        """
        rows = self.table().dicts()
        if len(rows) > MAX_PANEL_ROWS:
            return {}
        modules = list(dict.fromkeys(r["module"] for r in rows))
        module_ids = {address: i for i, address in enumerate(modules)}
        columns: dict[str, Any] = {
            name: _floats([r[name] for r in rows])
            for name in ("index", "grad_norm", "grad_norm_raw", "rms", "numel")
        }
        columns["module_id"] = _floats([module_ids[r["module"]] for r in rows])
        columns["plot_y"] = _floats([p["y"] for p in profile_points(self)])
        columns["verdict"] = _bytes(bytes(VERDICTS.index(r["verdict"]) for r in rows))
        columns["is_frontier"] = _bytes(bytes(int(r["is_frontier"]) for r in rows))
        columns["ops"] = _bytes("\n".join(r["op"] for r in rows).encode())
        columns["modules"] = _bytes("\n".join(modules).encode())
        return columns

    def _data(self) -> dict[str, Any]:
        return {
            "bwd": self.bwd,
            "basis": self.basis,
            "vanishing_threshold": self.vanishing_threshold,
            "exploding_threshold": self.exploding_threshold,
            "grad_scale": self.grad_scale,
            "scale_provenance": self.scale_provenance,
            "stage": self.stage,
            "frontier": list(self.frontier),
            "verdict_counts": dict(self.verdict_counts),
            "verdicts": list(VERDICTS),
            "flag_verdicts": list(FLAG_VERDICTS),
        }


def _floats(values: list[float | None]) -> dict[str, Any]:
    data = [math.nan if v is None else float(v) for v in values]
    return {"dtype": "float32", "shape": [len(data)], "data": data}


def _bytes(data: bytes) -> dict[str, Any]:
    return {"dtype": "uint8", "shape": [len(data)], "data": data}


def profile_points(report: GradHealthReport) -> list[dict[str, Any]]:
    """The points of the profile chart: ``index``, ``op``, ``module``, ``verdict``,
    ``is_frontier`` and ``y`` (the plotted value; see :meth:`GradHealthReport.figure`)."""
    column = "rms" if report.basis == "rms" else "grad_norm"
    rows = report.table().dicts()
    positive = [r[column] for r in rows if r[column] is not None and 0 < r[column] < math.inf]
    floor = min(positive) / 10 if positive else 1e-12
    points = []
    for row in rows:
        value = row[column]
        if row["verdict"] == "unknown":
            raw = row["grad_norm_raw"]
            value = raw / math.sqrt(row["numel"]) if column == "rms" and row["numel"] else raw
        if value is None or not (0 < value < math.inf):
            value = floor
        points.append(
            {
                "index": row["index"],
                "op": row["op"],
                "module": row["module"],
                "verdict": row["verdict"],
                "is_frontier": row["is_frontier"],
                "y": value,
            }
        )
    return points


@dataclass(frozen=True, kw_only=True, repr=False)
class DeadNeuronsReport(Report):
    """Units that are zero at every position, one row per op a module (or the model) returned."""

    report_type = "dead_neurons"
    dim: int | None
    """The unit axis forced by the caller, or None for the per-op rules."""
    max_activation: float
    num_rows: int
    num_counted: int
    """Rows whose output was saved and floating point (the others have no count)."""
    total_dead: int

    def _data(self) -> dict[str, Any]:
        return {
            "dim": self.dim,
            "max_activation": self.max_activation,
            "num_rows": self.num_rows,
            "num_counted": self.num_counted,
            "total_dead": self.total_dead,
        }


@dataclass(frozen=True, kw_only=True, repr=False)
class DTypeRangeReport(Report):
    """Numeric-range and precision hazards of saved activations, with audited coverage."""

    report_type = "dtype_range"
    num_audited_ops: int
    """Ops whose saved floating-point output was inspected."""
    num_ops: int
    """Every op of the trace (unsaved and non-float outputs are counted here, not audited)."""
    max_fraction: float
    subnormal_fraction_threshold: float

    def _data(self) -> dict[str, Any]:
        return {
            "num_audited_ops": self.num_audited_ops,
            "num_ops": self.num_ops,
            "max_fraction": self.max_fraction,
            "subnormal_fraction_threshold": self.subnormal_fraction_threshold,
        }


@dataclass(frozen=True)
class CheckOutcome:
    """How one diagnostic of ``trace.audit()`` ended."""

    check: str
    """Diagnostic name, e.g. ``"dtype_range"``."""
    report_type: str
    status: str
    lead: str
    num_findings: int


@dataclass(frozen=True, kw_only=True, repr=False)
class HealthReport(Report):
    """What ``trace.audit()`` ran, what each found, and what it skipped (never counted as run).

    ``findings`` merge the findings of every diagnostic that ran; each carries
    ``fields["check"]``. The full sub-report of a check opens with
    ``run_action("open", check=name)``.
    """

    report_type = "health"
    checks_run: tuple[str, ...] = ()
    outcomes: tuple[CheckOutcome, ...] = ()

    @property
    def skipped(self) -> tuple[Unavailable, ...]:
        """Diagnostics not run on this trace, each with its reason (``check``, ``reason``)."""
        return self.unavailable

    def _data(self) -> dict[str, Any]:
        return {
            "checks_run": list(self.checks_run),
            "outcomes": [dataclasses.asdict(o) for o in self.outcomes],
        }
