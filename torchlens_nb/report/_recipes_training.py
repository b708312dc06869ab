"""Reports of the training recipes of ``tl.recipes``: overfit_one_batch, gradient_flow,
update_ratio and weight_distribution.

Same conventions as ``report/recipes.py`` (statuses, ``chart_specs()`` for the recipe panel,
``figure()`` importing plotly inside): the live overfit chart, per-parameter gradients with the
grad_health frontier, per-layer update ratios against the 1e-3 target, and weight histograms.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from ._recipes_data import Histogram, RecipeReport, TensorStats, chart, histogram_grid

if TYPE_CHECKING:
    import plotly.graph_objects as go


# ----- overfit_one_batch ---------------------------------------------------------------------
OverfitVerdict = Literal["memorised", "decreasing", "stuck", "diverged", "running", "stopped"]
"""``memorised``: the loss reached ~0; ``decreasing``: it fell but not to ~0; ``stuck``: it did
not fall; ``diverged``: it became non-finite or grew; ``running``: a live interim report;
``stopped``: an exception (the loss_fn raising, Ctrl-C) ended the run before a verdict."""


@dataclass(frozen=True, kw_only=True, repr=False)
class OverfitReport(RecipeReport):
    """Loss and gradient norm per step of training a copy of the model on one batch."""

    report_type = "overfit_one_batch"
    payload_properties = (
        "charts",
        "steps_run",
    )
    verdict: OverfitVerdict
    """``memorised``, ``decreasing``, ``stuck``, ``diverged`` or ``running`` (see
    ``OverfitVerdict``)."""
    steps: int
    """Steps requested."""
    lr: float
    """Learning rate of the copy's optimizer."""
    losses: tuple[float, ...]
    """Loss before each step's update, one per step run."""
    grad_norms: tuple[float, ...]
    """Total gradient norm (all parameters, before the update) per step run."""
    target_loss: float
    """The loss counted as "about zero": ``initial loss * zero_fraction``."""
    elapsed_s: float
    """Wall time of the run, in seconds."""

    @property
    def steps_run(self) -> int:
        return len(self.losses)

    def chart_specs(self) -> list[dict[str, Any]]:
        """The live chart of the panel: loss and gradient norm per step (log scale)."""
        return [
            chart(
                "loss and gradient norm per step",
                "line",
                [str(i) for i in range(len(self.losses))],
                {"loss": list(self.losses), "grad norm": list(self.grad_norms)},
                log=True,
                y_label="value",
            )
        ]

    def figure(self) -> go.Figure:
        """Loss (log scale, with the ~zero target) and gradient norm per step."""
        import plotly.graph_objects as go
        from plotly.subplots import make_subplots

        fig = make_subplots(
            rows=2, cols=1, shared_xaxes=True, subplot_titles=("loss", "gradient norm")
        )
        steps = list(range(len(self.losses)))
        fig.add_trace(go.Scatter(x=steps, y=list(self.losses), name="loss"), row=1, col=1)
        fig.add_trace(go.Scatter(x=steps, y=list(self.grad_norms), name="grad norm"), row=2, col=1)
        fig.add_hline(
            y=self.target_loss, line_dash="dash", row=1, col=1, annotation_text="about zero"
        )
        fig.update_yaxes(type="log")
        fig.update_layout(title=f"Overfit one batch: {self.verdict}", xaxis2_title="step")
        return fig


# ----- gradient_flow -------------------------------------------------------------------------
ParamGradVerdict = Literal[
    "ok", "disconnected", "frozen", "zero", "vanishing", "exploding", "nonfinite"
]
"""``disconnected``: requires grad but received None (not in the graph of the loss);
``frozen``: requires_grad=False; ``zero``: every element exactly 0 (a dead layer or its cone);
``vanishing`` / ``exploding``: norm below / above the grad_health thresholds."""


@dataclass(frozen=True)
class ParamGrad:
    """The gradient one parameter received from one backward of the loss."""

    name: str
    """The parameter's name in ``model.named_parameters()``."""
    module: str
    """Address of the module that owns it."""
    shape: tuple[int, ...]
    """The parameter's shape."""
    verdict: ParamGradVerdict
    """``ok``, ``disconnected`` (no gradient), ``frozen``, ``zero``, ``vanishing``, ``exploding`` or
    ``nonfinite``."""
    norm: float | None
    """Total L2 norm of the gradient (None when there is none)."""
    rms: float | None
    """``norm / sqrt(numel)``: comparable across layers of different sizes."""
    mean: float | None
    """Mean of the gradient's elements (None when there is none)."""
    std: float | None
    """Standard deviation of the gradient's elements (None when there is none)."""
    max_abs: float | None
    """Largest absolute element of the gradient (None when there is none)."""
    zero_fraction: float | None
    """Fraction of the gradient's elements that are exactly 0 (None when there is none)."""


@dataclass(frozen=True)
class FrontierOp:
    """A grad_health frontier op: flagged, while no consumer of its output shares the flag."""

    op: str
    """Trace label of the frontier op."""
    module: str
    """Innermost module address (``""`` is the root module)."""
    verdict: str
    """Its grad_health verdict (``zero``, ``vanishing`` or ``exploding``)."""
    grad_norm: float | None
    """Total norm of the gradient at its output (None when not recorded)."""
    params: tuple[str, ...]
    """Parameters the op reads (where the flagged cone starts)."""


@dataclass(frozen=True, kw_only=True, repr=False)
class GradientFlowReport(RecipeReport):
    """Per-parameter gradient statistics plus grad_health's frontier, from one backward."""

    report_type = "gradient_flow"
    payload_properties = ("charts",)
    loss: float
    """The loss value of the one backward."""
    params: tuple[ParamGrad, ...]
    """Every parameter's gradient statistics and verdict."""
    frontier: tuple[FrontierOp, ...]
    """Where the gradient dies (grad_health's frontier), with the parameters each op reads."""
    vanishing_threshold: float
    """A nonzero gradient norm below it is ``vanishing``."""
    exploding_threshold: float
    """A gradient norm above it is ``exploding``."""
    spread_decades: float | None
    """log10(max rms / min rms) over parameters with a finite, non-zero gradient."""

    def figure(self) -> go.Figure:
        """Gradient RMS per parameter on a log axis, coloured by verdict."""
        import plotly.graph_objects as go

        fig = go.Figure()
        for verdict in sorted({p.verdict for p in self.params}):
            shown = [p for p in self.params if p.verdict == verdict]
            fig.add_trace(
                go.Bar(
                    x=[p.name for p in shown],
                    name=verdict,
                    y=[p.rms if p.rms and p.rms > 0 else None for p in shown],
                    text=[verdict if not p.rms else "" for p in shown],
                )
            )
        fig.update_layout(
            title=f"Gradient RMS per parameter (loss {self.loss:.4g})",
            yaxis_type="log",
            yaxis_title="grad rms",
            barmode="overlay",
            xaxis={"categoryorder": "array", "categoryarray": [p.name for p in self.params]},
        )
        return fig

    def chart_specs(self) -> list[dict[str, Any]]:
        """Gradient RMS per parameter (log scale; None and zero drawn as marked points)."""
        return [
            chart(
                "gradient RMS per parameter",
                "bar",
                [p.name for p in self.params],
                {"grad rms": [p.rms if p.rms is not None else float("nan") for p in self.params]},
                log=True,
                y_label="grad rms",
            )
        ]


# ----- weight_distribution -------------------------------------------------------------------
WeightVerdict = Literal[
    "ok", "nonfinite", "all_zero", "all_same", "huge", "collapsed", "unusual_scale"
]
"""``all_zero`` / ``all_same``: every element one value (flagged for 2+ dimensions only: a
constant bias or norm scale is a canonical initialisation); ``huge``: |w| above the recipe's
limit; ``collapsed``: std about 0 without being constant; ``unusual_scale``: std outside the
usual [0.01, 1] (information: depends on the init scheme)."""


@dataclass(frozen=True)
class ParamWeights:
    """Statistics and histogram of one parameter tensor."""

    name: str
    """The parameter's name in ``model.named_parameters()``."""
    shape: tuple[int, ...]
    """The parameter's shape."""
    dtype: str
    """The parameter's dtype, e.g. ``float32``."""
    stats: TensorStats
    """Its element statistics."""
    histogram: Histogram
    """Its value histogram (the panel's chart)."""
    verdict: WeightVerdict
    """``ok``, ``nonfinite``, ``all_zero``, ``all_same``, ``huge``, ``collapsed`` or
    ``unusual_scale``."""


@dataclass(frozen=True, kw_only=True, repr=False)
class WeightDistributionReport(RecipeReport):
    """Per-parameter weight statistics and histograms, with param_health's findings."""

    report_type = "weight_distribution"
    payload_properties = ("charts",)
    params: tuple[ParamWeights, ...]
    """Every parameter's statistics, histogram and verdict."""
    huge_abs: float
    """Above this |w| a weight is ``huge`` (100: standard initialisations stay below about 3)."""
    collapsed_std: float
    """A matrix whose values differ by less than this has ``collapsed`` (1e-6)."""
    usual_std: tuple[float, float]
    """Where weight standard deviations usually sit after standard inits (information only)."""

    def chart_specs(self) -> list[dict[str, Any]]:
        """Standard deviation per parameter (log scale)."""
        return [
            chart(
                "weight std per parameter",
                "bar",
                [p.name for p in self.params],
                {"std": [p.stats.std for p in self.params]},
                log=True,
                y_label="std",
            )
        ]

    def figure(self, max_params: int = 24) -> go.Figure:
        """Histograms of the first ``max_params`` parameters, titled with their verdicts."""
        shown = self.params[:max_params]
        return histogram_grid(
            [f"{p.name} ({p.verdict})" for p in shown],
            [p.histogram for p in shown],
            f"Weight histograms ({len(shown)} of {len(self.params)})",
        )


# ----- update_ratio --------------------------------------------------------------------------
RatioVerdict = Literal["ok", "too_high", "too_low", "unknown"]
"""Against the target log10 ratio -3: more than ``tolerance_decades`` above (``too_high``: the
learning rate is too large for that layer) or below (``too_low``: barely updating); ``unknown``
when no sampled step had a defined ratio."""


@dataclass(frozen=True)
class LayerRatio:
    """log10(||update|| / ||weight||) of one parameter (or param group) per sampled step."""

    name: str
    """Parameter (or param group) name."""
    log10_ratios: tuple[float, ...]
    """One per sampled step (NaN where the ratio was undefined; -inf for a zero update)."""
    median: float
    """Median over the judged steps (the first step is skipped: Adam's is lr-sized)."""
    verdict: RatioVerdict
    """``ok``, ``too_high``, ``too_low`` or ``unknown`` (see ``RatioVerdict``)."""


@dataclass(frozen=True, kw_only=True, repr=False)
class UpdateRatioReport(RecipeReport):
    """Per-layer update-to-weight ratios over training steps against the 1e-3 target."""

    report_type = "update_ratio"
    payload_properties = ("charts",)
    layers: tuple[LayerRatio, ...]
    """One entry per parameter (or param group), with its ratios and verdict."""
    target_log10: float
    """The target log10 ratio (-3: Karpathy's 1e-3)."""
    tolerance_decades: float
    """How many decades a median may sit from the target before it is flagged."""
    steps: tuple[int, ...]
    """The sampled attempts (x axis)."""

    def chart_specs(self) -> list[dict[str, Any]]:
        """One line per layer plus the target line."""
        series = {layer.name: list(layer.log10_ratios) for layer in self.layers}
        series["target"] = [self.target_log10] * len(self.steps)
        return [
            chart(
                "log10(update / weight) per step",
                "line",
                [str(s) for s in self.steps],
                series,
                y_label="log10 ratio",
            )
        ]

    def figure(self) -> go.Figure:
        """Per-layer log10 ratio over steps, with the -3 target and its tolerance band."""
        import plotly.graph_objects as go

        fig = go.Figure(
            [
                go.Scatter(
                    x=list(self.steps),
                    y=list(layer.log10_ratios),
                    mode="lines",
                    name=f"{layer.name} ({layer.verdict})",
                )
                for layer in self.layers
            ]
        )
        fig.add_hline(y=self.target_log10, line_dash="dash", annotation_text="target")
        fig.add_hrect(
            y0=self.target_log10 - self.tolerance_decades,
            y1=self.target_log10 + self.tolerance_decades,
            opacity=0.1,
            line_width=0,
        )
        fig.update_layout(
            title="Update-to-weight ratio per layer",
            xaxis_title="step",
            yaxis_title="log10(||dw|| / ||w||)",
        )
        return fig
