"""The training timeline of a ``CheckReport``: layers x steps heatmaps, the loss, the findings.

Built by ``checks/dashboard/_timeline.py`` from host numbers the stability check already read
(no device work of its own). Steps are folded into at most ``columns`` columns of
``attempts_per_column`` attempts each; a cell holds the MAX of its attempts (a one-step spike of
a gradient norm or an attention logit survives any fold), the loss keeps its min and max per
column (the envelope). In every cell NaN means "not measured in these attempts" and +inf
"measured, and not finite": a metric or cell that was not measured is never drawn as zero.

The panel draws the summary (``CheckReport.to_dict()["data"]["timeline"]``) and the binary
arrays ``timeline_loss`` (float32 ``(2, columns)``: min row, max row) and ``timeline_<metric>``
(float32 ``(layers, columns)``); :meth:`CheckTimeline.figure` is the plotly version.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from ._base import frozen_mapping

if TYPE_CHECKING:
    import plotly.graph_objects as go

TimelineMetric = Literal["grad_norm", "update_ratio", "activation_rms", "attention_logit"]
"""Per-layer series of the timeline, in drawing order."""
TIMELINE_METRICS: tuple[TimelineMetric, ...] = (
    "grad_norm",
    "update_ratio",
    "activation_rms",
    "attention_logit",
)
METRIC_TITLES: Mapping[str, str] = {
    "grad_norm": "gradient norm per block (pre-clip)",
    "update_ratio": "update ratio ||dw||/||w|| per block (sampled)",
    "activation_rms": "activation RMS per block (probed forwards)",
    "attention_logit": "max pre-softmax attention logit per layer (probed forwards)",
}


@dataclass(frozen=True)
class TimelineMap:
    """One metric's heatmap."""

    metric: TimelineMetric
    """Which series (see :data:`TimelineMetric`)."""
    layers: tuple[str, ...]
    """Row names: a block (``blocks.1``) or the module that ran the attention."""
    values: tuple[tuple[float, ...], ...]
    """One row per layer, one value per column: the max over the column's attempts; NaN where
    not measured, +inf where the measured value was not finite."""


@dataclass(frozen=True)
class TimelineMark:
    """A finding placed on the timeline."""

    attempt: int
    """The attempt the finding starts at (its ``first_attempt`` or ``attempt`` field)."""
    column: int
    """The column holding that attempt."""
    code: str
    """The finding's code."""
    severity: Literal["critical", "warning", "info"]
    """The finding's severity."""
    finding: int
    """Its index in the report's ``findings`` (the panel jumps to that row)."""


@dataclass(frozen=True)
class TimelineSummary:
    """What the payload carries of a timeline (the values travel as binary arrays)."""

    attempts_per_column: int
    """Attempts folded into one column (a power of two)."""
    columns: int
    """Columns filled so far (at most the recorder's ``COLUMNS``)."""
    layers: Mapping[str, tuple[str, ...]]
    """Each measured metric -> its rows (array ``timeline_<metric>``), in drawing order."""
    not_measured: Mapping[str, str]
    """Each metric with no measured cell -> why (the panel says it, never draws zeros)."""
    has_loss: bool
    """Whether any loss was read (array ``timeline_loss``)."""
    marks: tuple[TimelineMark, ...]
    """The findings that name an attempt."""
    layers_dropped: int
    """Layers seen beyond the recorder's per-metric limit (not drawn)."""


@dataclass(frozen=True)
class CheckTimeline:
    """The timeline of a session (``CheckReport.timeline``)."""

    attempts_per_column: int
    """Attempts folded into one column (a power of two)."""
    columns: int
    """Columns filled so far."""
    maps: tuple[TimelineMap, ...]
    """The measured metrics' heatmaps, in :data:`TIMELINE_METRICS` order."""
    not_measured: Mapping[str, str] = field(default_factory=frozen_mapping)
    """Each metric without a map -> why it was not measured."""
    loss_low: tuple[float, ...] = ()
    """The smallest loss per column (NaN: no loss read there)."""
    loss_high: tuple[float, ...] = ()
    """The largest loss per column (+inf where a loss was not finite)."""
    marks: tuple[TimelineMark, ...] = ()
    """The findings that name an attempt."""
    layers_dropped: int = 0
    """Layers seen beyond the recorder's per-metric limit (not drawn)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "not_measured", frozen_mapping(self.not_measured))

    @property
    def has_loss(self) -> bool:
        return any(not math.isnan(v) for v in self.loss_high)

    def map(self, metric: str) -> TimelineMap | None:
        """The heatmap of ``metric``; None when it was not measured."""
        return next((m for m in self.maps if m.metric == metric), None)

    def column_start(self, column: int) -> int:
        """The first attempt of ``column``."""
        return column * self.attempts_per_column

    def summary(self) -> TimelineSummary:
        return TimelineSummary(
            self.attempts_per_column,
            self.columns,
            frozen_mapping({m.metric: m.layers for m in self.maps}),
            self.not_measured,
            self.has_loss,
            self.marks,
            self.layers_dropped,
        )

    def arrays(self) -> dict[str, dict[str, Any]]:
        """``timeline_loss`` and one ``timeline_<metric>`` per map, as panel array specs."""
        out: dict[str, dict[str, Any]] = {}
        if self.has_loss:
            out["timeline_loss"] = {
                "dtype": "float32",
                "shape": [2, self.columns],
                "data": [list(self.loss_low), list(self.loss_high)],
            }
        for item in self.maps:
            out[f"timeline_{item.metric}"] = {
                "dtype": "float32",
                "shape": [len(item.layers), self.columns],
                "data": [list(row) for row in item.values],
            }
        return out

    def figure(self) -> go.Figure:
        """The plotly version of the panel's timeline: the loss (min-max band) on top, one
        heatmap per measured metric below (log10 colour scale), each finding a dashed line.

        Raises:
            ImportError: plotly is not installed (``pip install plotly``).
        """
        import plotly.graph_objects as go
        from plotly.subplots import make_subplots

        rows = 1 + len(self.maps)
        x = [self.column_start(c) for c in range(self.columns)]
        fig = make_subplots(
            rows=rows,
            cols=1,
            shared_xaxes=True,
            vertical_spacing=0.04,
            subplot_titles=["loss (min-max per column)"]
            + [METRIC_TITLES[m.metric] for m in self.maps],
        )
        low = [_finite_or_none(v) for v in self.loss_low]
        high = [_finite_or_none(v) for v in self.loss_high]
        fig.add_trace(go.Scatter(x=x, y=high, name="loss max", mode="lines"), row=1, col=1)
        fig.add_trace(
            go.Scatter(x=x, y=low, name="loss min", mode="lines", fill="tonexty"), row=1, col=1
        )
        for row, item in enumerate(self.maps, start=2):
            z = [[_log10_or_none(v) for v in values] for values in item.values]
            fig.add_trace(
                go.Heatmap(
                    x=x,
                    y=list(item.layers),
                    z=z,
                    name=item.metric,
                    colorscale="Viridis",
                    showscale=False,
                    hovertemplate="%{y}<br>attempt %{x}<br>log10 %{z:.3g}<extra></extra>",
                ),
                row=row,
                col=1,
            )
        for mark in self.marks:
            fig.add_vline(x=self.column_start(mark.column), line_dash="dash", line_color="red")
        fig.update_layout(height=200 + 160 * len(self.maps), showlegend=False)
        fig.update_xaxes(title_text="attempt", row=rows, col=1)
        return fig


def _finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _log10_or_none(value: float) -> float | None:
    return math.log10(value) if math.isfinite(value) and value > 0 else None
