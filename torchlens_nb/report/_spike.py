"""The report of spike forensics: what changed at one step against the step before it.

Built by ``session.spike_forensics()`` (``checks/stability/_spike.py``) from the batch and the
weights the session kept at a step's site (``checks/stability/_spike_keep.py``). Two tables:

* ``layers``: per module, the activation RMS of its output on this step's batch and on the
  previous step's batch (both forwards on the kept weights, so the batch is the only
  difference), the gradient norm of its parameters on each (needs a loss the analysis can
  compute), and the update/weight ratio of the update the optimizer was about to take against
  the one it took the step before (from the optimizer's state), each with ``now / before``;
* ``samples``: the loss of each sample of this step's batch, its multiple of the batch median
  and its share of the batch's loss.

Python decides what jumped (``is_jumped``: any ratio at least :data:`JUMP`) and which samples
carry the loss (``carries``: at least :data:`CARRY` x the batch median); the panel draws them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from ._base import Report
from ._status import tones

if TYPE_CHECKING:
    import plotly.graph_objects

JUMP = 2.0
"""A layer's value this many times its value on the previous step counts as a jump. Measured
between consecutive healthy steps of the 2-block GPT of ``tests/stability`` (AdamW at lr 1e-3
and 3e-3, steps 10-145 every 5): the largest layer's activation RMS ratio stays within 1.16x,
the update ratio within 1.33x; the gradient norm ratio has a median of 1.24x and reached 1.75x
at lr 1e-3, but 6.6x once (a LayerNorm gain at step 15 of the lr 3e-3 run, while the loss fell
fast): a gradient jump alone can be batch noise, so a step kept on request reports its jumps
as info; the LR-growth spike (``cases.LR_GROWTH``, attempt 193) jumped 5.9x."""
CARRY = 2.0
"""A sample whose loss is this many times the batch median carries the loss."""

LAYER_COLUMNS = (
    "layer",
    "activation_rms",
    "activation_rms_before",
    "activation_jump",
    "grad_norm",
    "grad_norm_before",
    "grad_jump",
    "update_ratio",
    "update_ratio_before",
    "update_jump",
    "is_jumped",
)
"""One row per module, largest jump first. ``*_jump`` is ``now / before`` (None where either is
missing); ``is_jumped`` is any jump at least :data:`JUMP`."""
SAMPLE_COLUMNS = ("sample", "loss", "loss_to_median", "share", "carries")
"""One row per sample of the step's batch, highest loss first: ``sample`` is its index in the
batch (``micro-batch:index`` when the step ran several forwards)."""

SpikeStatus = Literal["jumped", "nothing_jumped", "partly_seen", "not_kept"]
Trigger = Literal["spike", "every_step"]
"""Why the step was kept: a loss spike the stability check detected, or ``keep="every_step"``."""


@dataclass(frozen=True, kw_only=True, repr=False)
class SpikeReport(Report):
    """What changed at one training step against the step before it (see the module docstring).

    ``jumped``: at least one layer's activations, gradients or update jumped, or samples carry
    the loss. ``nothing_jumped``: every measure was taken and nothing moved :data:`JUMP` x.
    ``partly_seen``: nothing jumped among what could be measured, and something could not be
    (its ``unavailable`` entry says what). ``not_kept``: no step was kept to explain.
    """

    report_type = "spike"
    status_tones = tones(
        {"jumped": "findings", "nothing_jumped": "ok", "partly_seen": "info", "not_kept": "info"}
    )
    status: SpikeStatus
    """``jumped``, ``nothing_jumped``, ``partly_seen`` or ``not_kept`` (see the class docstring)."""
    attempt: int | None = None
    """The session attempt the kept step was (the stability check's ``first_attempt``)."""
    trigger: Trigger | None = None
    """Why the step was kept: ``spike`` (a loss spike the stability check detected) or
    ``every_step`` (``register_stability_check(keep="every_step")``)."""
    loss: float | None = None
    """The step's loss as the session read it."""
    loss_median: float | None = None
    """The running median the spike was judged against (None on a step kept for another reason)."""
    rerun_loss: float | None = None
    """The mean per-sample loss of the re-run forward on the kept weights (None without a loss)."""
    loss_kind: str | None = None
    """How the per-sample loss was computed: ``"loss_fn"`` (the caller's) or
    ``"next_token_cross_entropy"`` (a language model's output over its own input tokens)."""
    num_samples: int = 0
    """Samples in the step's batch."""
    kept_bytes: int = 0
    """Bytes the session held for this step on the host: the weights, this batch and the previous one."""
    jump: float = JUMP
    """The ratio to the previous step from which a layer's value counts as a jump (:data:`JUMP`)."""
    carry: float = CARRY
    """The multiple of the batch median from which a sample carries the loss (:data:`CARRY`)."""

    def figure(self) -> plotly.graph_objects.Figure:
        """The jumps per layer (activations, gradients, update; log axis, the :data:`JUMP` line
        drawn) over the per-sample losses, as a plotly figure (needs plotly)."""
        import plotly.graph_objects as go
        from plotly.subplots import make_subplots

        fig = make_subplots(
            rows=2, cols=1, subplot_titles=("now / before, per layer", "loss per sample")
        )
        layers = self.table("layers").dicts() if self.tables else []
        for column, name in (
            ("activation_jump", "activations (RMS)"),
            ("grad_jump", "gradient norm"),
            ("update_jump", "update ratio"),
        ):
            fig.add_trace(
                go.Bar(x=[r["layer"] for r in layers], y=[r[column] for r in layers], name=name),
                row=1,
                col=1,
            )
        fig.add_hline(y=self.jump, line_dash="dash", row=1, col=1)
        fig.update_yaxes(type="log", row=1, col=1)
        samples = self.table("samples").dicts() if len(self.tables) > 1 else []
        fig.add_trace(
            go.Bar(
                x=[str(r["sample"]) for r in samples],
                y=[r["loss"] for r in samples],
                name="loss",
            ),
            row=2,
            col=1,
        )
        fig.update_layout(title=self.lead, barmode="group")
        return fig
