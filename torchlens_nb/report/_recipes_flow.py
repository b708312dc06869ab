"""Reports of the information-flow recipes of ``tl.recipes``: what depends on what.

``batch_independence`` / ``causal_dependency`` return :class:`DependencyReport` (gradient of each
output index with respect to each input index), ``leakage_poison`` returns
:class:`LeakageReport` (where dye injected into forbidden rows reached allowed ones) and
``prime_dims`` returns :class:`PrimeDimsReport` (the first op whose shape broke or silently
broadcast with prime-sized dimensions). Data, loss and training recipes live in
``report/recipes.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from ._base import payload_as
from ._recipes_data import RecipeReport

if TYPE_CHECKING:
    import plotly.graph_objects as go

DependencyCheck = Literal["batch_independence", "causal_dependency"]
"""``batch_independence``: output i may depend on input i only; ``causal_dependency``: output
position t may depend on input positions <= t only."""


@dataclass(frozen=True)
class Leak:
    """One output index that depends on input indices it must not see."""

    output_index: int
    """The output index (along the checked dimension)."""
    input_indices: tuple[int, ...]
    """The forbidden input indices with a non-zero gradient, ascending."""
    max_grad: float
    """Largest |gradient| over those inputs."""


@dataclass(frozen=True, kw_only=True, repr=False)
class DependencyReport(RecipeReport):
    """Gradient of every output index with respect to every input index, and the leaks."""

    report_type = "dependency"
    check: DependencyCheck
    """``batch_independence`` or ``causal_dependency`` (see ``DependencyCheck``)."""
    size: int
    """Number of indices along the checked dimension (batch size or sequence length)."""
    dim: int
    """The checked dimension of input and output (0 for batch, 1 for sequence by default)."""
    probed: str
    """What the gradient was taken with respect to: ``"input"`` or ``"embedding <module>"``."""
    matrix: tuple[tuple[float, ...], ...] | None
    """``matrix[i][j]``: max |d output_i / d input_j|; None above ``MATRIX_MAX`` indices."""
    leaks: tuple[Leak, ...]
    """Every output index that reads input indices it must not see."""
    blind: tuple[int, ...]
    """Output indices with zero gradient on their own input index."""
    rtol: float
    """A gradient counts when above ``rtol`` x the largest gradient (0: any non-zero)."""

    def forbidden(self, output_index: int, input_index: int) -> bool:
        """Whether output ``output_index`` must not depend on input ``input_index``."""
        if self.check == "batch_independence":
            return input_index != output_index
        return input_index > output_index

    def figure(self) -> go.Figure:
        """Heatmap of log10 |gradient| (output index x input index), leaks marked with x."""
        import math

        import plotly.graph_objects as go

        fig = go.Figure()
        if self.matrix is not None:
            z = [[math.log10(v) if v > 0 else None for v in row] for row in self.matrix]
            fig.add_trace(
                go.Heatmap(
                    z=z,
                    colorbar={"title": "log10 |grad|"},
                    hovertemplate="output %{y}, input %{x}: %{z:.2f}",
                )
            )
        xs = [j for leak in self.leaks for j in leak.input_indices]
        ys = [leak.output_index for leak in self.leaks for _ in leak.input_indices]
        fig.add_trace(
            go.Scatter(x=xs, y=ys, mode="markers", name="leak", marker={"symbol": "x", "size": 10})
        )
        noun = "example" if self.check == "batch_independence" else "position"
        fig.update_layout(
            title=f"{self.check}: which input {noun}s each output depends on",
            xaxis_title=f"input {noun}",
            yaxis_title=f"output {noun}",
            yaxis_autorange="reversed",
        )
        return fig


# ----- leakage_poison --------------------------------------------------------------------------
LeakageVerdict = Literal["leak", "suspect", "clean", "inconclusive"]
"""``leak``: changing forbidden rows changes allowed ones; ``suspect``: only the NaN dye crossed
(possibly a false positive); ``clean``: neither crossed; ``inconclusive``: no stage could be
checked (see each stage's note)."""


@dataclass(frozen=True)
class StageResult:
    """What the dye did at one pipeline stage (outputs compared with the undyed run)."""

    name: str
    """The stage's name (its step name in the pipeline)."""
    index: int
    """Position of the stage in the pipeline (from 0)."""
    rows_out: int | None
    """Rows of the stage's X output on the undyed data."""
    past_rows: int | None
    """Allowed (past / train) rows the check could align, None when it could not."""
    nan_crossed: bool | None
    """NaN dye reached an allowed row that is finite in the undyed run (or removed it)."""
    sentinel_changed: bool | None
    """An allowed row differs when the forbidden rows hold +/-sentinel instead of their values."""
    dye_vanished: bool
    """The stage received NaN and returned none while keeping the forbidden rows: it skips or
    fills NaN (pandas skipna, nanmean, fillna, imputers), so the NaN test is blind here."""
    columns: tuple[str, ...]
    """X columns (names, or positions for arrays) where an allowed row changed."""
    is_crossing: bool
    """True at the first stage where the leak appears (the earlier stage outputs were clean)."""
    note: str | None
    """Why a check is None (a stage that raised, rows that could not be aligned)."""


@dataclass(frozen=True, kw_only=True, repr=False)
class LeakageReport(RecipeReport):
    """Per-stage result of poisoning the forbidden rows and running the real pipeline."""

    report_type = "leakage_poison"
    verdict: LeakageVerdict
    """``leak``, ``suspect``, ``clean`` or ``inconclusive`` (see ``LeakageVerdict``)."""
    stages: tuple[StageResult, ...]
    """What the dye did at each pipeline stage, in order."""
    cutoff: int
    """Rows ``[cutoff:]`` of X and y were poisoned; rows ``[:cutoff]`` must stay untouched."""
    num_rows: int
    """Rows of X."""
    sentinel: float
    """The magnitude of the +/- sentinel written into the forbidden rows."""


# ----- prime_dims ------------------------------------------------------------------------------
@dataclass(frozen=True)
class ShapeBreak:
    """Where the forward raised with prime-sized dimensions."""

    error: str
    """``ExceptionType: message``."""
    file: str | None
    """The user's source frame closest to the failure."""
    line: int | None
    """Line number in ``file``."""
    code: str | None
    """Text of that line."""
    after_op: str | None
    """Label of the last op recorded before the failure."""
    module: str | None
    """Innermost module of that op."""


@dataclass(frozen=True)
class BroadcastSite:
    """An elementwise op whose output repeats a free dimension more often than any input: two
    different axes of the same size were broadcast against each other (an outer product)."""

    op: str
    """Trace label of the elementwise op."""
    func: str
    """The torch function the op called."""
    module: str
    """Innermost module address (``""`` is the root module)."""
    file: str | None
    """Path of the file holding the op's own source line."""
    line: int | None
    """Line number of that source line."""
    code: str | None
    """Text of that source line."""
    input_shapes: tuple[tuple[int, ...], ...]
    """Shapes of the op's tensor inputs in the prime-sized run."""
    output_shape: tuple[int, ...]
    """Shape of its output in the prime-sized run."""
    dims: tuple[str, ...]
    """The free dimensions that were crossed (e.g. ``("batch",)`` for ``(7, 1) + (7,)``)."""


@dataclass(frozen=True, kw_only=True, repr=False)
class PrimeDimsReport(RecipeReport):
    """The model run with ordinary and with distinct prime sizes for every free dimension."""

    report_type = "prime_dims"
    baseline_sizes: tuple[tuple[str, int], ...] = field(metadata=payload_as("baseline_size_map"))
    """Dimension name and size of the ordinary run."""
    prime_sizes: tuple[tuple[str, int], ...] = field(metadata=payload_as("prime_size_map"))
    """Dimension name and distinct prime size of the probe run."""
    is_baseline_ok: bool
    """True when the ordinary run completed."""
    is_prime_ok: bool
    """True when the prime-sized run completed."""
    broke: ShapeBreak | None
    """Where the prime-sized run raised (None when it ran)."""
    broadcasts: tuple[BroadcastSite, ...]
    """Elementwise ops that crossed two different free dimensions (silent broadcasts)."""
    output_dims: tuple[str, ...]
    """The prime run's output shape with each free size replaced by its name (``"batch"``)."""

    @property
    def baseline_size_map(self) -> dict[str, int]:
        """Dimension name -> size of the baseline run."""
        return dict(self.baseline_sizes)

    @property
    def prime_size_map(self) -> dict[str, int]:
        """Dimension name -> prime size of the probe run."""
        return dict(self.prime_sizes)
