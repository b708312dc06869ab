"""The gradient-health report: ``tl.debug.grad_health``'s frontier table and norm profile.

Frozen plain data built by ``debug/gradients/``. The table holds the rows of the pandas-free
``grad_health_rows`` core unchanged, so ``report.to_pandas()`` and the panel show the same facts
the core returns.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from ._base import Report, frozen_mapping
from ._status import Tone, tones

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


GradHealthStatus = Literal["found", "clean", "unknown"]
"""The statuses of :class:`GradHealthReport`."""


@dataclass(frozen=True, kw_only=True, repr=False)
class GradHealthReport(Report):
    """One row per gradient a backward pass saved, with verdicts and the frontier.

    Read the table with ``to_pandas()`` (``attrs`` carry bwd, thresholds and coverage), the
    profile with ``figure()``.
    """

    report_type = "grad_health"
    row_tones: ClassVar[Mapping[str, Tone]] = {  # one per Verdict
        "ok": "ok",
        "zero": "critical",
        "vanishing": "warning",
        "exploding": "critical",
        "unknown": "info",
    }
    status_tones = tones({"found": "findings", "clean": "ok", "unknown": "warning"})
    payload_properties = ("verdicts", "flag_verdicts")
    status: GradHealthStatus
    """``unknown``: magnitudes could not be judged (unknown loss scale, nothing saved)."""
    bwd: int
    """Index of the backward pass in ``trace.backward_passes``."""
    basis: Basis
    """What the thresholds compare: ``total_norm`` (each gradient's L2 norm, the default) or ``rms``
    (``norm / sqrt(numel)``, fair across widths)."""
    vanishing_threshold: float
    """A nonzero gradient below it (on ``basis``) is ``vanishing`` (1e-7 by default)."""
    exploding_threshold: float
    """A gradient above it (on ``basis``) is ``exploding`` (1e4 by default)."""
    grad_scale: float | None
    """The loss scale the gradients were divided by (None when not known)."""
    scale_provenance: ScaleProvenance
    """What scale the saved gradients carry: ``unscaled``, ``gradscaler``, ``explicit`` or
    ``unknown``."""
    stage: Stage
    """Where the gradients were read (``trace.backward`` reads them before any clipping)."""
    frontier: tuple[str, ...] = ()
    """Labels of the frontier ops, in execution order."""
    verdict_counts: Mapping[str, int] = field(default_factory=frozen_mapping)
    """Verdict -> number of rows with it."""

    @property
    def verdicts(self) -> tuple[Verdict, ...]:
        """Every verdict a row can have (the panel's legend order)."""
        return VERDICTS

    @property
    def flag_verdicts(self) -> tuple[Verdict, ...]:
        """The verdicts that flag a row."""
        return FLAG_VERDICTS

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
        the profile ``value`` of :func:`profile_points` (bars and chart; 0, inf and nan kept
        as they are: the panel draws them in labelled lanes), ``verdict``
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
        columns["plot_y"] = _floats([p["value"] for p in profile_points(self)])
        columns["verdict"] = _bytes(bytes(VERDICTS.index(r["verdict"]) for r in rows))
        columns["is_frontier"] = _bytes(bytes(int(r["is_frontier"]) for r in rows))
        columns["ops"] = _bytes("\n".join(r["op"] for r in rows).encode())
        columns["modules"] = _bytes("\n".join(modules).encode())
        return columns


def _floats(values: list[float | None]) -> dict[str, Any]:
    data = [math.nan if v is None else float(v) for v in values]
    return {"dtype": "float32", "shape": [len(data)], "data": data}


def _bytes(data: bytes) -> dict[str, Any]:
    return {"dtype": "uint8", "shape": [len(data)], "data": data}


def profile_points(report: GradHealthReport) -> list[dict[str, Any]]:
    """The points of the profile chart: ``index``, ``op``, ``module``, ``verdict``,
    ``is_frontier``, ``value`` (the value the verdict read: 0, inf or nan where it is one) and
    ``y`` (that value on the plotly figure's log axis, where 0/inf/nan sit on a floor; see
    :meth:`GradHealthReport.figure`). The panel draws ``value``, with 0, inf and nan in labelled
    lanes outside the numeric range."""
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
        points.append(
            {
                "index": row["index"],
                "op": row["op"],
                "module": row["module"],
                "verdict": row["verdict"],
                "is_frontier": row["is_frontier"],
                "y": value if value is not None and 0 < value < math.inf else floor,
                "value": math.nan if value is None else value,
            }
        )
    return points
