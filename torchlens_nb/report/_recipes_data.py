"""Reports of the practitioner recipes (``tl.recipes``): data, losses, training and weights.

Each recipe returns one typed report here: findings carry the expected value and what to do,
tabular results carry a table, and ``figure()`` draws a plotly chart where a person would rather
look than read (plotly is imported inside ``figure``). Training recipes (overfit, gradient flow,
update ratio, weights) live in ``report/recipe_training.py``, the dependency, leakage and shape
recipes in ``report/recipe_flow.py``. Statuses are :data:`RecipeStatus` words, derived from the
worst finding by :func:`recipe_status` unless a recipe says otherwise.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from ._base import SEVERITY_ORDER, Finding, Report
from ._status import tones

if TYPE_CHECKING:
    import plotly.graph_objects as go

RecipeStatus = Literal["pass", "warn", "fail", "inconclusive", "running"]
"""``fail``: a critical finding; ``warn``: a warning; ``pass``: neither; ``inconclusive``: the
recipe could not decide (it says why); ``running``: a live interim report (overfit_one_batch)."""


RECIPE_TONES = tones(
    {
        "pass": "ok",
        "warn": "warning",
        "fail": "critical",
        "inconclusive": "warning",
        "running": "info",
    }
)


@dataclass(frozen=True, kw_only=True, repr=False)
class RecipeReport(Report):
    """The base of every ``tl.recipes`` report: the recipe statuses, and the panel's charts."""

    report_type = "recipe"
    status_tones = RECIPE_TONES
    status: RecipeStatus

    @property
    def charts(self) -> list[dict[str, Any]]:
        """The panel's chart specs (``payload_properties`` of the recipes that draw them)."""
        return self.chart_specs()

    def chart_specs(self) -> list[dict[str, Any]]:
        """Chart specs drawn by the recipe panel (none by default)."""
        return []


def recipe_status(findings: Iterable[Finding]) -> RecipeStatus:
    """``fail`` with any critical finding, ``warn`` with any warning, else ``pass``."""
    severities = {f.severity for f in findings}
    if "critical" in severities:
        return "fail"
    return "warn" if "warning" in severities else "pass"


def worst_finding(findings: Sequence[Finding]) -> Finding:
    """The first of the most severe findings (what a non-passing recipe leads with)."""
    return min(findings, key=lambda f: SEVERITY_ORDER[f.severity])


@dataclass(frozen=True)
class TensorStats:
    """Moments and counts of one tensor (NaN where undefined, e.g. the std of one element)."""

    numel: int
    """Number of elements."""
    mean: float
    """Mean of the finite elements."""
    std: float
    """Sample standard deviation (Bessel-corrected, like ``Tensor.std``) of the finite elements."""
    min: float
    """Smallest finite element."""
    max: float
    """Largest finite element."""
    abs_max: float
    """Largest finite magnitude."""
    nan_count: int
    """Elements that are NaN."""
    inf_count: int
    """Elements that are +inf or -inf."""
    zero_fraction: float
    """Share of elements exactly equal to zero."""


@dataclass(frozen=True)
class Histogram:
    """Counts of the finite elements in equal-width bins between ``edges[0]`` and ``edges[-1]``."""

    edges: tuple[float, ...]
    """Bin edges, one more than ``counts``."""
    counts: tuple[int, ...]
    """Finite elements per bin."""


def chart(
    title: str,
    kind: Literal["bar", "line"],
    labels: list[str],
    series: dict[str, list[float]],
    *,
    log: bool = False,
    y_label: str = "",
) -> dict[str, Any]:
    """One chart for the recipe panel (``js/shared/chart.js`` draws it; values decided here)."""
    return {
        "title": title,
        "kind": kind,
        "labels": labels,
        "log": log,
        "y_label": y_label,
        "series": [{"name": name, "values": values} for name, values in series.items()],
    }


def histogram_grid(titles: list[str], histograms: list[Histogram], title: str) -> go.Figure:
    """Bar charts of several histograms in a grid of at most three columns."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    columns = min(3, max(1, len(histograms)))
    rows = max(1, -(-len(histograms) // columns))
    fig = make_subplots(rows=rows, cols=columns, subplot_titles=titles or None)
    for index, hist in enumerate(histograms):
        centres = [(a + b) / 2 for a, b in zip(hist.edges, hist.edges[1:])]
        widths = [b - a for a, b in zip(hist.edges, hist.edges[1:])]
        fig.add_trace(
            go.Bar(
                x=centres, y=list(hist.counts), width=widths, showlegend=False, name=titles[index]
            ),
            row=index // columns + 1,
            col=index % columns + 1,
        )
    fig.update_layout(title=title, bargap=0, height=max(300, 220 * rows))
    return fig


# ----- data_sanity ---------------------------------------------------------------------------
FieldRole = Literal["input", "target"]


@dataclass(frozen=True)
class FieldSummary:
    """One field of a batch (a dict key or a tuple position)."""

    name: str
    """Dict key, or the position in a tuple batch (``"0"``, ``"1"``)."""
    role: FieldRole
    """``input`` or ``target``."""
    type_name: str
    """The field's Python type: ``Tensor``, an array type converted and analysed (``ndarray``),
    or the type of a field that was not analysed (its ``stats`` is None, and the report lists
    it as unavailable)."""
    shape: tuple[int, ...] | None
    """Shape in the first batch (None for a non-tensor field)."""
    dtype: str | None
    """The field's dtype (None for a non-tensor field)."""
    stats: TensorStats | None
    """Statistics over every element of every sampled batch (None for a non-tensor field)."""
    distinct: int | None
    """Number of distinct values of an integer or bool field (None otherwise)."""
    histogram: Histogram | None
    """Value histogram of the field (None for a non-tensor field)."""


@dataclass(frozen=True, kw_only=True, repr=False)
class DataSanityReport(RecipeReport):
    """Per-field shape, dtype, range, mean, std and NaN/Inf counts of a batch or loader."""

    report_type = "data_sanity"
    fields: tuple[FieldSummary, ...] = ()
    """One summary per field of the batch (dict key or tuple position)."""
    num_batches: int = 1
    """How many batches the statistics cover."""

    def figure(self) -> go.Figure:
        """Histograms of every tensor field's values."""
        shown = [f for f in self.fields if f.histogram is not None and f.histogram.counts]
        return histogram_grid(
            [f"{f.name} ({f.role})" for f in shown],
            [f.histogram for f in shown if f.histogram is not None],
            f"Value histograms over {self.num_batches} batch(es)",
        )


# ----- class_balance -------------------------------------------------------------------------
@dataclass(frozen=True)
class ClassCount:
    """How often one class occurs."""

    label: int
    """The class index."""
    count: int
    """How many times it occurs."""
    fraction: float
    """Its share of ``total`` (0..1)."""


@dataclass(frozen=True, kw_only=True, repr=False)
class ClassBalanceReport(RecipeReport):
    """Class counts, the majority:minority ratio, and its verdict."""

    report_type = "class_balance"
    payload_properties = ("charts",)
    counts: tuple[ClassCount, ...] = ()
    """Every class, most frequent first (classes of ``num_classes`` never seen count 0)."""
    total: int = 0
    """Labels counted (positives, for multi-label targets)."""
    ratio: float = 1.0
    """Majority count over minority count (inf when a class of ``num_classes`` never occurs)."""
    warn_ratio: float = 10.0
    """A majority:minority ratio above it warns (10:1)."""
    critical_ratio: float = 100.0
    """A ratio above it fails (100:1)."""
    is_multilabel: bool = False
    """True when counts are per-class positives of 2-D 0/1 targets."""

    def figure(self) -> go.Figure:
        """Bar chart of the class counts, most frequent first."""
        import plotly.graph_objects as go

        fig = go.Figure(
            go.Bar(
                x=[str(c.label) for c in self.counts],
                y=[c.count for c in self.counts],
                text=[f"{100 * c.fraction:.1f}%" for c in self.counts],
            )
        )
        fig.update_layout(
            title=f"Class counts (ratio {self.ratio:.3g}:1)",
            xaxis_title="class",
            yaxis_title="count",
            xaxis_type="category",
        )
        return fig

    def chart_specs(self) -> list[dict[str, Any]]:
        """Class counts as bars, most frequent first."""
        return [
            chart(
                f"class counts (ratio {self.ratio:.3g}:1)",
                "bar",
                [str(c.label) for c in self.counts],
                {"count": [float(c.count) for c in self.counts]},
                y_label="count",
            )
        ]


# ----- init_loss and random_input_test -------------------------------------------------------
LossKind = Literal["cross_entropy", "nll", "bce", "bce_logits", "mse", "l1", "unknown"]
"""The loss families whose value at initialisation is predictable (``unknown``: any other)."""


@dataclass(frozen=True, kw_only=True, repr=False)
class InitLossReport(RecipeReport):
    """The loss at initialisation against the value random predictions give."""

    report_type = "init_loss"
    payload_properties = ("charts",)
    loss: float
    """The loss of the untrained model on the batch."""
    expected: float | None
    """The loss of uninformed predictions (None for an unknown loss family)."""
    basis: str
    """How ``expected`` was derived, e.g. ``"ln(10): uniform over 10 classes"``."""
    loss_kind: LossKind
    """The loss family it was read as (``cross_entropy``, ``nll``, ``bce``, ``bce_logits``, ``mse``,
    ``l1`` or ``unknown``)."""
    ratio: float | None
    """``loss / expected``."""
    band: tuple[float, float] | None
    """The tolerated range ``(expected / factor, expected * factor)``."""
    num_classes: int | None
    """Number of classes the expected value assumes (None when not a classification loss)."""
    output_shape: tuple[int, ...]
    """Shape of the model's output."""
    target_shape: tuple[int, ...]
    """Shape of the batch's target."""

    def figure(self) -> go.Figure:
        """The observed loss beside the expected value and its tolerated band."""
        import plotly.graph_objects as go

        names = ["observed"] + (["expected"] if self.expected is not None else [])
        values = [self.loss] + ([self.expected] if self.expected is not None else [])
        fig = go.Figure(
            go.Bar(x=values, y=names, orientation="h", text=[f"{v:.4g}" for v in values])
        )
        if self.band is not None:
            fig.add_vrect(
                x0=self.band[0],
                x1=self.band[1],
                opacity=0.15,
                line_width=0,
                annotation_text="tolerated",
            )
        fig.update_layout(title=f"Initial {self.loss_kind} loss", xaxis_title="loss")
        return fig

    def chart_specs(self) -> list[dict[str, Any]]:
        """Observed loss beside the expected value and the tolerated band's edges."""
        if self.expected is None or self.band is None:
            return []
        return [
            chart(
                "initial loss vs random predictions",
                "bar",
                ["observed", "expected", "band low", "band high"],
                {"loss": [self.loss, self.expected, *self.band]},
                y_label="loss",
            )
        ]


@dataclass(frozen=True, kw_only=True, repr=False)
class RandomInputReport(RecipeReport):
    """The loss on the real inputs against the loss on random noise of the same shape."""

    report_type = "random_input_test"
    payload_properties = ("charts",)
    real_loss: float
    """The loss on the real inputs."""
    noise_loss: float
    """Mean over the noise trials."""
    noise_losses: tuple[float, ...]
    """The loss of each noise trial."""
    relative_gap: float
    """``(noise_loss - real_loss) / max(|real_loss|, |noise_loss|)``: > 0 when real data helps."""
    chance_loss: float | None
    """The loss of uninformed predictions (init_loss's expected value), None if unknown."""
    loss_kind: LossKind
    """The loss family it was read as (see ``InitLossReport.loss_kind``)."""
    output_change: float
    """Largest absolute change of any model output when the input is replaced by noise."""
    is_input_constant: bool
    """True when every example of the real batch has the same input."""

    def figure(self) -> go.Figure:
        """Real-input loss beside each noise trial's loss (and the chance level)."""
        import plotly.graph_objects as go

        names = ["real"] + [f"noise {i + 1}" for i in range(len(self.noise_losses))]
        fig = go.Figure(go.Bar(x=names, y=[self.real_loss, *self.noise_losses]))
        if self.chance_loss is not None:
            fig.add_hline(y=self.chance_loss, line_dash="dash", annotation_text="chance")
        fig.update_layout(title="Loss on real input vs random noise", yaxis_title="loss")
        return fig

    def chart_specs(self) -> list[dict[str, Any]]:
        """Real-input loss beside each noise trial's loss."""
        names = ["real"] + [f"noise {i + 1}" for i in range(len(self.noise_losses))]
        return [
            chart(
                "loss on real input vs random noise",
                "bar",
                names,
                {"loss": [self.real_loss, *self.noise_losses]},
                y_label="loss",
            )
        ]


# ----- confident_errors ----------------------------------------------------------------------
@dataclass(frozen=True)
class ConfidentError:
    """One wrong prediction, ranked by the model's confidence in it."""

    rank: int
    """1 for the most confident mistake, then in decreasing confidence."""
    index: int
    """Position of the example in iteration order over the loader (0-based)."""
    predicted: int
    """The class the model predicted."""
    target: int
    """The true class."""
    confidence: float
    """Probability of the predicted class."""
    target_prob: float
    """Probability the model gave the true class."""


@dataclass(frozen=True, kw_only=True, repr=False)
class ConfidentErrorsReport(RecipeReport):
    """The most confident wrong predictions over a loader."""

    report_type = "confident_errors"
    payload_properties = (
        "charts",
        "accuracy",
    )
    errors: tuple[ConfidentError, ...]
    """The most confident mistakes, most confident first."""
    num_examples: int
    """Examples the model was run on."""
    num_errors: int
    """How many of them it got wrong."""

    @property
    def accuracy(self) -> float:
        return 1.0 - self.num_errors / self.num_examples if self.num_examples else float("nan")

    def figure(self) -> go.Figure:
        """The confidence of each of the top errors, labelled index: predicted -> true."""
        import plotly.graph_objects as go

        labels = [f"#{e.index}: {e.predicted}→{e.target}" for e in self.errors]
        fig = go.Figure(go.Bar(x=[e.confidence for e in self.errors], y=labels, orientation="h"))
        fig.update_layout(
            title="Most confident wrong predictions",
            xaxis_title="confidence",
            xaxis_range=[0, 1],
            yaxis_autorange="reversed",
        )
        return fig

    def chart_specs(self) -> list[dict[str, Any]]:
        """Confidence of each top error, labelled index: predicted -> true."""
        if not self.errors:
            return []
        return [
            chart(
                "most confident wrong predictions",
                "bar",
                [f"#{e.index}: {e.predicted}→{e.target}" for e in self.errors],
                {"confidence": [e.confidence for e in self.errors]},
                y_label="confidence",
            )
        ]
