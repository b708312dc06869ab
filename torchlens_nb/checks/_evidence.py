"""From device-resident backward evidence to host-side attempts.

:class:`Evidence` queues the :class:`~._sites.PendingBackward` records S-D produces and resolves
them with ONE host read per device (:func:`~._scan.read_host`). The session resolves at site S-B
(it must know before the optimizer writes), at the exit of ``session.step()``, in ``report()``,
and when more than ``MAX_PENDING_BACKWARDS`` are queued (to bound device memory).

An :class:`Attempt` is the evidence of one optimizer attempt: the backwards that fed it (more
than one under gradient accumulation) and, per parameter, the LAST norm its accumulated gradient
had (a parameter that received a gradient only in an early micro-batch keeps that norm).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from ..report._checks import ScaleProvenance, Stage, StepProvenance
from ._scan import read_host
from ._sites import PendingBackward

if TYPE_CHECKING:
    import torch

MAX_PENDING_BACKWARDS = 64
"""Resolve early past this many queued backwards: each holds one small norm vector per device."""

GradFact = Literal["none", "zero", "nonfinite", "ok", "unmeasured"]
AttemptStatus = Literal["pending", "accepted", "skipped", "raised", "failed"]


@dataclass(frozen=True)
class BackwardRecord:
    """One backward, read to the host."""

    index: int
    fired: tuple[int, ...]
    norms: dict[int, float]
    """Roster index -> pre-clip 2-norm of its accumulated gradient after this backward."""
    scale: float | None
    """GradScaler scale in effect (None without a scaler or before ``scaler.scale`` ran)."""


@dataclass
class Attempt:
    """The evidence of one optimizer attempt (mutable until the attempt closes)."""

    index: int
    backwards: tuple[BackwardRecord, ...]
    provenance: StepProvenance
    stage: Stage
    scale_provenance: ScaleProvenance
    has_norms: bool
    global_step: int | None = None
    micro_batches: int | None = None
    status: AttemptStatus = "pending"
    final_norms: dict[int, float] = field(init=False)
    """Roster index -> norm of its gradient after the last backward it arrived in."""
    fired: frozenset[int] = field(init=False)
    """Roster indices whose gradient arrived in any backward of the attempt."""

    def __post_init__(self) -> None:
        self.final_norms = {}
        for record in self.backwards:
            self.final_norms.update(record.norms)
        self.fired = frozenset(i for record in self.backwards for i in record.fired)

    @property
    def scale(self) -> float | None:
        """Scale of the attempt's last backward (one attempt runs at one scale)."""
        return self.backwards[-1].scale if self.backwards else None

    def fact(self, index: int) -> GradFact:
        """The gradient fact of roster parameter ``index`` for this attempt."""
        if index not in self.fired:
            return "none"
        if index not in self.final_norms:
            return "unmeasured"
        norm = self.final_norms[index]
        if not math.isfinite(norm):
            return "nonfinite"
        return "zero" if norm == 0.0 else "ok"

    def nonfinite(self) -> list[int]:
        """Roster indices whose final pre-clip norm is NaN or Inf, in roster order."""
        return sorted(i for i, n in self.final_norms.items() if not math.isfinite(n))

    def first_nonfinite_backward(self, index: int) -> int | None:
        """Backward number where parameter ``index`` first had a non-finite norm."""
        for record in self.backwards:
            if index in record.norms and not math.isfinite(record.norms[index]):
                return record.index
        return None


class Evidence:
    """Queue of device-resident backwards plus the resolved, not yet attributed ones."""

    def __init__(self) -> None:
        self._pending: list[PendingBackward] = []
        self.open: list[BackwardRecord] = []
        self.host_reads = 0

    @property
    def pending_count(self) -> int:
        return len(self._pending)

    def add(self, pending: PendingBackward) -> bool:
        """Queue one backward; return True when the queue asks to be resolved now."""
        self._pending.append(pending)
        return len(self._pending) > MAX_PENDING_BACKWARDS

    def resolve(self) -> None:
        """Read every queued backward to the host (one read per device) into ``open``."""
        if not self._pending:
            return
        tensors: list[torch.Tensor] = []
        for pending in self._pending:
            tensors.extend(norms for _, norms in pending.norms)
            if pending.scale is not None:
                tensors.append(pending.scale.reshape(1))
        values = read_host(tensors) if tensors else []
        self.host_reads += bool(tensors)
        cursor = 0
        for pending in self._pending:
            norms: dict[int, float] = {}
            for positions, _ in pending.norms:
                norms.update(zip(positions, values[cursor : cursor + len(positions)]))
                cursor += len(positions)
            scale = None
            if pending.scale is not None:
                scale = values[cursor]
                cursor += 1
            self.open.append(BackwardRecord(pending.index, pending.fired, norms, scale))
        self._pending.clear()

    def take(self) -> list[BackwardRecord]:
        """Hand over the resolved backwards not yet attributed to an attempt."""
        taken, self.open = self.open, []
        return taken

    def discard(self) -> None:
        """Drop everything (``disable()``: a half-observed attempt is never judged)."""
        self._pending.clear()
        self.open.clear()


def split_scale_runs(records: list[BackwardRecord]) -> list[list[BackwardRecord]]:
    """Group consecutive backwards that ran at the same GradScaler scale.

    Without an accepted step in between, the scale only changes when ``scaler.update()`` backs
    off after a skipped attempt, so each run is exactly one attempt.
    """
    runs: list[list[BackwardRecord]] = []
    for record in records:
        if runs and runs[-1][-1].scale == record.scale:
            runs[-1].append(record)
        else:
            runs.append([record])
    return runs
