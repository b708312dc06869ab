"""From device-resident backward evidence to host-side attempts.

:class:`Evidence` queues the :class:`~._sites.PendingBackward` records S-D produces and resolves
them with ONE host read per device (:func:`~._norms.read_host`), together with any step-site norms
the caller adds to the same read. The engine resolves at site S-B (it must know before the
optimizer writes), when an attempt ends without a step, at the exit of ``session.step()``, in
``report()``, and when more than ``MAX_PENDING_BACKWARDS`` are queued (to bound device memory).

A :class:`Group` accumulates the backwards of the attempt that is open: per parameter the LAST
pre-clip norm its accumulated gradient had (a parameter that received a gradient only in an early
micro-batch keeps that norm) and the micro-batch where it first turned non-finite. Its size is
bounded by the roster, however many backwards feed it. An :class:`Attempt` is the closed, judged
evidence of one optimizer attempt.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from ...report._checks import ScaleProvenance, SkipCause, Stage, StepProvenance
from ..scans._norms import read_host

if TYPE_CHECKING:
    import torch

    from ._sites import PendingBackward

MAX_PENDING_BACKWARDS = 64
"""Resolve early past this many queued backwards: each holds one small norm vector per device."""

MAX_KEPT_BACKWARDS = 64
"""Backward numbers an attempt lists by number; beyond, only their count is kept."""

GradFact = Literal["none", "zero", "nonfinite", "ok", "unmeasured"]
AttemptStatus = Literal["pending", "accepted", "skipped", "raised", "failed"]


@dataclass(frozen=True)
class BackwardRecord:
    """One backward, read to the host."""

    index: int
    fired: tuple[int, ...]
    positions: tuple[int, ...]
    """Roster indices whose norm was measured, in the order of ``values``."""
    values: Sequence[float]
    """Pre-clip 2-norms of those gradients (accumulated) after this backward."""
    scale: float | None
    """GradScaler scale in effect (None without a scaler or before ``scaler.scale`` ran)."""
    from_step: tuple[int, ...] = ()
    """Roster indices whose norm is the step site's (``PendingBackward.from_step``)."""
    unread: tuple[int, ...] = ()
    """Roster indices whose arrival was not read (``PendingBackward.unread``)."""

    def with_step_values(self, step_norms: dict[int, float]) -> BackwardRecord:
        """This record with the norms its deferred read took from the step site's read."""
        if not self.from_step:
            return self
        return BackwardRecord(
            self.index,
            self.fired,
            self.positions + self.from_step,
            [*self.values, *(step_norms[i] for i in self.from_step)],
            self.scale,
            unread=self.unread,
        )


class Evidence:
    """Queue of device-resident backwards."""

    def __init__(self) -> None:
        self._pending: list[PendingBackward] = []
        self.host_reads = 0

    @property
    def pending_count(self) -> int:
        return len(self._pending)

    @property
    def pending(self) -> tuple[PendingBackward, ...]:
        """The queued backwards, oldest first."""
        return tuple(self._pending)

    def replace(self, old: PendingBackward, new: PendingBackward) -> None:
        """Put ``new`` where ``old`` is queued (a deferred backward, now read)."""
        position = next(i for i, p in enumerate(self._pending) if p is old)
        self._pending[position] = new

    def add(self, pending: PendingBackward) -> bool:
        """Queue one backward; return True when the queue asks to be resolved now."""
        self._pending.append(pending)
        return len(self._pending) > MAX_PENDING_BACKWARDS

    def resolve(
        self, extra: Sequence[torch.Tensor] = ()
    ) -> tuple[list[BackwardRecord], list[float]]:
        """Read every queued backward and the ``extra`` 1-D tensors to the host in one read per
        device; return the records and the extra values (concatenated)."""
        tensors: list[torch.Tensor] = []
        for pending in self._pending:
            tensors.extend(norms for _, norms in pending.norms)
            if pending.scale is not None:
                tensors.append(pending.scale.reshape(1))
        tensors.extend(extra)
        values = read_host(tensors) if tensors else []
        self.host_reads += bool(tensors)
        cursor = 0
        records = []
        for pending in self._pending:
            positions: list[int] = []
            norms: list[float] = []
            for index, _ in pending.norms:
                positions.extend(index)
                norms.extend(values[cursor : cursor + len(index)])
                cursor += len(index)
            scale = None
            if pending.scale is not None:
                scale = values[cursor]
                cursor += 1
            records.append(
                BackwardRecord(
                    pending.index,
                    pending.fired,
                    tuple(positions),
                    norms,
                    scale,
                    from_step=pending.from_step,
                    # the engine reads a deferred backward before resolving it; one it did not
                    # is disclosed as unread, never judged on values nobody read
                    unread=pending.fired if pending.defers else pending.unread,
                )
            )
        self._pending.clear()
        return records, values[cursor:]

    def discard(self) -> None:
        """Drop everything (``disable()``: a half-observed attempt is never judged)."""
        self._pending.clear()


class Group:
    """The backwards of the attempt that is open (pending ones counted, resolved ones folded)."""

    def __init__(self) -> None:
        self.backward_count = 0
        self.backward_indices: list[int] = []
        self.fired: set[int] = set()
        """Roster indices whose gradient arrived in a backward of the group (known at S-D)."""
        self.norms: dict[int, float] = {}
        self.first_nonfinite: dict[int, int] = {}
        """Roster index -> backward number where its norm first was non-finite."""
        self.first_nonfinite_index: int | None = None
        """Session backward number of the first backward with a non-finite norm."""
        self.unread: set[int] = set()
        """Roster indices an earlier backward of the group left unread (``_arrival.py``)."""
        self.is_first_unknown = False
        """A gradient first seen non-finite had an unread earlier backward: which micro-batch
        made it non-finite is unknown (never the later one by default)."""
        self.scale: float | None = None
        self.is_in_block = False
        """A backward of the group ran inside a ``session.step()`` block."""
        self.losses: list[torch.Tensor] = []
        """Each backward's root (``_loss.py``), unscaled, still on its device."""
        self.recorded_losses: list[torch.Tensor] = []
        """Losses the loop gave with ``session.record_loss`` (they replace :attr:`losses`)."""

    def loss_tensors(self) -> list[torch.Tensor]:
        """The device losses the step site reads (the recorded ones when the loop gave any)."""
        return self.recorded_losses or self.losses

    def note(self, pending: PendingBackward) -> None:
        """S-D: count the backward and its arrivals (host facts, no tensor read)."""
        self.backward_count += 1
        if len(self.backward_indices) < MAX_KEPT_BACKWARDS:
            self.backward_indices.append(pending.index)
        self.fired.update(pending.fired)

    def fold(self, record: BackwardRecord) -> None:
        """Add one resolved backward (in order)."""
        self.scale = record.scale
        self.norms.update(zip(record.positions, record.values))
        if not math.isfinite(sum(record.values)):  # the common case: no per-value test
            self._first_nonfinite(record)
        self.unread.update(record.unread)

    def _first_nonfinite(self, record: BackwardRecord) -> None:
        for index, value in zip(record.positions, record.values):
            if math.isfinite(value) or index in self.first_nonfinite:
                continue
            if index in self.unread:
                self.is_first_unknown = True
            else:
                self.first_nonfinite[index] = record.index
                if self.first_nonfinite_index is None:
                    self.first_nonfinite_index = record.index


@dataclass
class Attempt:
    """The evidence of one optimizer attempt (mutable until the attempt closes)."""

    index: int
    provenance: StepProvenance
    stage: Stage
    scale_provenance: ScaleProvenance
    has_norms: bool
    backward_count: int
    backward_indices: tuple[int, ...]
    final_norms: dict[int, float]
    """Roster index -> norm of its gradient after the last backward it arrived in (pre-clip)."""
    fired: frozenset[int]
    """Roster indices whose gradient arrived in any backward of the attempt."""
    first_nonfinite: dict[int, int] = field(default_factory=dict)
    first_nonfinite_micro_batch: int | None = None
    """Position of the backward (micro-batch) that first produced a non-finite gradient."""
    scale: float | None = None
    """Scale of the attempt's last backward (one attempt runs at one scale)."""
    global_step: int | None = None
    micro_batches: int | None = None
    status: AttemptStatus = "pending"
    step_norms: dict[int, float] = field(default_factory=dict)
    """S-B: roster index -> norm of every gradient the optimizer is about to use (the S-A value
    where the gradient is unchanged since its backward, else read at the step site)."""
    skip_cause: SkipCause | None = None
    is_mid_step: bool = False
    """Judged when ``step(closure)`` re-evaluated its closure, after the step began writing."""
    has_replay: bool = False
    """The batch of the non-finite micro-batch is kept (``CheckViolationError.investigate``)."""
    loss: float | None = None
    """The attempt's loss read at the step site: the sum of its backwards' roots (a loop that
    divides each micro-batch's loss by K sums to the batch loss), None when none was seen."""

    @classmethod
    def from_group(
        cls,
        group: Group,
        *,
        index: int,
        provenance: StepProvenance,
        stage: Stage,
        scale_provenance: ScaleProvenance,
        has_norms: bool,
        global_step: int | None,
        micro_batches: int | None,
        first_backward: int | None,
    ) -> Attempt:
        """The attempt of ``group``; ``first_backward`` is the session number of micro-batch 0
        (the ``session.step()`` block's first backward; the group's own first by default)."""
        if first_backward is None and group.backward_indices:
            first_backward = group.backward_indices[0]
        bad = group.first_nonfinite_index
        micro = None
        if (
            bad is not None
            and first_backward is not None
            and bad >= first_backward
            and not group.is_first_unknown
        ):
            micro = bad - first_backward
        return cls(
            index=index,
            provenance=provenance,
            stage=stage,
            scale_provenance=scale_provenance,
            has_norms=has_norms,
            backward_count=group.backward_count,
            backward_indices=tuple(group.backward_indices),
            final_norms=group.norms,
            fired=frozenset(group.fired),
            first_nonfinite=group.first_nonfinite,
            first_nonfinite_micro_batch=micro,
            scale=group.scale,
            global_step=global_step,
            micro_batches=micro_batches,
        )

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
        if math.isfinite(sum(self.final_norms.values())):
            return []
        return sorted(i for i, n in self.final_norms.items() if not math.isfinite(n))

    def step_nonfinite(self) -> list[int]:
        """Roster indices whose step-site gradient is NaN or Inf, in roster order."""
        if math.isfinite(sum(self.step_norms.values())):
            return []
        return sorted(i for i, n in self.step_norms.items() if not math.isfinite(n))

    def first_nonfinite_backward(self, index: int) -> int | None:
        """Backward number where parameter ``index`` first had a non-finite norm."""
        return self.first_nonfinite.get(index)
