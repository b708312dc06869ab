"""``InvestigationReport``: where the value that broke one training step was born, from a replay.

``tl.debug.investigate(model, inputs, loss_fn=...)`` replays one step (forward, loss, backward)
on the untouched weights and returns this report: the origin in the shared
:class:`~torchlens_nb.report.FirstBadThing` vocabulary (forward or backward), the forward
:class:`~torchlens_nb.report.NonfiniteReport` or the
:class:`~torchlens_nb.report.BackwardNanReport` it rests on, the fields of the batch that already
held NaN/Inf, or, when nothing non-finite appeared, the likely reasons. It renders with the
``nonfinite`` panel (origin card and lineage): the fields that panel reads come from the forward
replay (:class:`~._nonfinite.ScanFields`, :class:`~._nonfinite.OriginFields`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

from ._base import PAYLOAD_EXCLUDED, Report
from ._nonfinite import (
    BackwardNanReport,
    NonfiniteKind,
    NonfiniteReport,
    OriginFields,
    Phase,
    ScanFields,
    ValueStats,
)
from ._status import FINITENESS_TONES, tones

InvestigationStatus = Literal["found", "nonfinite_input", "not_reproduced", "incomplete"]
"""``found``: the replay names where the value was born (forward, loss or backward);
``nonfinite_input``: the batch already held the NaN/Inf; ``not_reproduced``: the whole step ran
finite on replay; ``incomplete``: the replay could not run to the end (the forward raised, the
loss has no gradient) and found nothing in what it ran."""
LossSource = Literal["loss_fn", "output.loss", "output['loss']", "output"]
"""Where the loss came from: the caller's ``loss_fn``, a Hugging Face ``output.loss``, the
``"loss"`` entry of a returned dict (a Lightning ``training_step``), or the model output itself
(a scalar tensor)."""
RngSource = Literal["kept", "current"]
"""Which RNG state the replay ran under: the ``rng_state`` passed in, or the current one."""


@dataclass(frozen=True)
class InputFault:
    """One tensor of the batch that already holds NaN/Inf before the forward."""

    field: str
    """Where it sits in the batch: ``inputs`` (one tensor), ``inputs[1]``, ``input_ids``,
    ``batch['pixels'][0]``."""
    op: str
    """Its input op in the trace (``input_2``)."""
    kind: NonfiniteKind
    """``nan``, ``inf``, ``-inf`` or ``mixed``."""
    rows: tuple[int, ...]
    """Indices along the first dimension holding a non-finite element (the first
    :data:`MAX_ROWS`; ``num_rows`` counts them all). Empty for a 0-d tensor."""
    num_rows: int
    """How many rows along the first dimension hold a non-finite element."""
    stats: ValueStats
    """Counts and finite-value statistics of the tensor."""


MAX_ROWS = 16
"""An :class:`InputFault` lists at most this many row indices; ``num_rows`` is exact."""


@dataclass(frozen=True, kw_only=True, repr=False)
class InvestigationReport(Report, ScanFields, OriginFields):
    """``tl.debug.investigate``: the replay of one step and where its NaN/Inf was born."""

    report_type = "investigation"
    row_tones = FINITENESS_TONES
    status_tones = tones(
        {
            "found": "critical",
            "nonfinite_input": "critical",
            "not_reproduced": "warning",
            "incomplete": "warning",
        }
    )
    payload_properties = ("op", "is_certain")
    status: InvestigationStatus
    """``found``, ``nonfinite_input``, ``not_reproduced`` or ``incomplete`` (see
    ``InvestigationStatus``)."""
    phase: Phase | None
    """``forward`` (an op of the forward or of the loss) or ``backward`` (a grad_fn fire)."""
    loss_source: LossSource | None
    """None when the forward raised before a loss was formed."""
    loss: float | None
    """The replayed loss value (None when the forward raised before it)."""
    rng: RngSource
    """``kept``: the replay ran under the ``rng_state`` passed in; ``current``: under the current
    RNG state."""
    nonfinite_inputs: tuple[InputFault, ...] = ()
    """Tensors of the batch that already held a NaN, or an Inf that matters."""
    likely_reasons: tuple[str, ...] = ()
    """Why a failure may not reproduce (``not_reproduced`` only)."""
    evidence: Literal["nonfinite", "backward_nan"] | None = None
    """``report_type`` of the report the origin rests on (``forward`` / ``backward``)."""
    forward: NonfiniteReport | None = dataclasses.field(default=None, metadata=PAYLOAD_EXCLUDED)
    """The forward replay's report (always there unless arguments were refused)."""
    backward: BackwardNanReport | None = dataclasses.field(default=None, metadata=PAYLOAD_EXCLUDED)
    """The backward ledger, when the forward and the loss were finite and the backward ran. Its
    own actions held the replay's trace, which is released: use this report's actions."""


__all__ = ["MAX_ROWS", "InputFault", "InvestigationReport", "InvestigationStatus"]
