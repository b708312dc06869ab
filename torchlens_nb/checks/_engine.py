"""The session engine: site handlers S-B / S-C / S-D and the grouping of backwards into attempts.

Attempt grouping:

* boundary mode (inside ``session.step()``): the block is the attempt (``explicit``); it is
  accepted when S-C fired inside it, skipped when the block ends without S-C and without a
  raise; exact.
* hook-only mode (``inferred``): the backwards since the last S-C form the attempt judged at S-B.
  With a GradScaler, backwards that ran at a scale the scaler later backed off from belong to
  skipped attempts (:func:`~._evidence.split_scale_runs`): one decrement, one skipped attempt.
  Without a scaler, backwards not followed by a step stay ``pending_backwards``.

Host syncs: one read per device at each resolution point (S-B, ``step()`` exit, ``report()``,
and every ``MAX_PENDING_BACKWARDS`` backwards); one more at S-C on sampled steps; none at S-A or
S-D. Reading the live GradScaler scale at ``step()`` exit and ``report()`` is one more.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from ..report import Finding
from ..report._checks import ScaleProvenance, Stage
from ._check import Check
from ._evidence import Attempt, BackwardRecord, Evidence, split_scale_runs
from ._ledger import ScaleLedger, ScalerKind, StepLedger
from ._params import Roster
from ._series import Series
from ._sites import GradSites, PendingBackward
from ._update_ratio import UpdateSampler


@dataclass
class Block:
    """State of one ``session.step()`` block."""

    global_step: int | None
    micro_batches: int | None
    records: list[BackwardRecord] = field(default_factory=list)
    attempt: Attempt | None = None


class Engine:
    """Mutable session state and the handlers the hooks call.

    ``raise_violation(finding)`` is supplied by the session: it builds the partial report and
    raises ``CheckViolationError``.
    """

    def __init__(
        self,
        roster: Roster,
        optimizer: torch.optim.Optimizer,
        scaler: Any,
        scaler_kind: ScalerKind,
        loss_scale: float | None,
    ) -> None:
        self.roster = roster
        self.optimizer = optimizer
        self.scaler = scaler
        self.scaler_kind = scaler_kind
        self.loss_scale = loss_scale
        backoff = scaler.get_backoff_factor() if scaler_kind == "gradscaler" else None
        self.scale_ledger = ScaleLedger(scaler_kind, backoff)
        self.ledger = StepLedger()
        self.evidence = Evidence()
        self.series = Series(roster, loss_scale)
        self.sites = GradSites(roster, self.on_backward, self._scale_tensor)
        self.checks: dict[str, Check] = {}
        self.sampler: UpdateSampler | None = None
        self.block: Block | None = None
        self.in_flight: Attempt | None = None
        self.last_attempt: Attempt | None = None
        self.session_findings: list[Finding] = []
        self.carry: list[BackwardRecord] = []
        self.attempts_without_backward = 0
        self.site_ns = 0
        self.raise_violation: Callable[[Finding], None] = _unset
        self.agree: Callable[[Finding | None], Finding | None] = _unchanged
        """S-B: every rank's verdict before any rank writes (``_distributed.RankContext``)."""
        self.on_progress: Callable[[], None] = _noop

    # ----- labels -------------------------------------------------------------------------------
    def _scale_tensor(self) -> torch.Tensor | None:
        if self.scaler_kind != "gradscaler" or not self.scaler.is_enabled():
            return None
        return getattr(self.scaler, "_scale", None)

    def _labels(self, scale: float | None) -> tuple[Stage, ScaleProvenance]:
        """(stage, scale_provenance) of the S-A norms of an attempt."""
        if self.scaler_kind == "gradscaler" and self.scaler.is_enabled():
            return (
                ("pre_clip_scaled", "gradscaler")
                if scale is not None
                else ("pre_clip_scaled", "unknown")
            )
        if self.loss_scale is not None:
            return "pre_clip_scaled", "explicit"
        if self.scaler_kind == "undeclared":
            return "pre_clip_scaled", "unknown"
        return "pre_clip_unscaled", "unscaled"

    def _attempt(self, records: list[BackwardRecord], block: Block | None) -> Attempt:
        stage, provenance = self._labels(records[-1].scale if records else None)
        attempt = Attempt(
            index=self.ledger.next_attempt,
            backwards=tuple(records),
            provenance="explicit" if block else "inferred",
            stage=stage,
            scale_provenance=provenance,
            has_norms=self.sites.needs_norms,
            global_step=block.global_step if block else None,
            micro_batches=block.micro_batches if block else None,
        )
        self.ledger.next_attempt += 1
        return attempt

    # ----- resolution ---------------------------------------------------------------------------
    def resolve(self) -> list[BackwardRecord]:
        """Read queued backwards to the host (one read per device) and observe their scales."""
        self.evidence.resolve()
        records = self.evidence.take()
        for record in records:
            self.scale_ledger.observe(record.scale, record.index)
        return records

    def observe_live_scale(self) -> float | None:
        """Read the scaler's current scale (one host read) into the skip ledger."""
        tensor = self._scale_tensor()
        if tensor is None:
            return None
        scale = float(tensor)
        self.scale_ledger.observe(scale, self.sites.backwards - 1 if self.sites.backwards else None)
        return scale

    def settle_hook_only(self, live_scale: float | None) -> None:
        """Close hook-only attempts the scaler skipped; the rest stays in ``carry``."""
        if self.scaler_kind != "gradscaler" or not self.carry:
            return
        runs = split_scale_runs(self.carry)
        last_run = runs[-1]
        is_last_skipped = (
            live_scale is not None
            and last_run[-1].scale is not None
            and live_scale < last_run[-1].scale
        )
        for run in runs if is_last_skipped else runs[:-1]:
            self.close_skipped(self._attempt(run, None))
        self.carry = [] if is_last_skipped else list(last_run)

    def close_skipped(self, attempt: Attempt) -> None:
        attempt.status = "skipped"
        for check in self.checks.values():
            check.on_skipped(attempt)
        self.series.add_attempt(attempt)
        self.close(attempt)

    def close(self, attempt: Attempt) -> None:
        self.ledger.close(attempt)
        self.series.set_status(attempt)
        self.last_attempt = attempt

    def close_in_flight(self) -> None:
        """An attempt that passed S-B but never reached S-C: ``optimizer.step()`` failed."""
        if self.in_flight is not None:
            self.in_flight.status = "failed"
            self.close(self.in_flight)
            self.in_flight = None
            if self.sampler is not None:
                self.sampler.discard()

    # ----- site handlers ------------------------------------------------------------------------
    def on_backward(self, pending: PendingBackward) -> None:
        """S-D: queue the backward's device numbers; counting-tier checks."""
        start = time.perf_counter_ns()
        self.ledger.backwards_since_accepted += 1
        if self.evidence.add(pending):
            self.carry_or_block(self.resolve())
        violation = None
        for check in self.checks.values():
            violation = check.on_backward(self.ledger) or violation
        self.site_ns += time.perf_counter_ns() - start
        self.on_progress()
        if violation is not None:
            self.raise_violation(violation)

    def carry_or_block(self, records: list[BackwardRecord]) -> None:
        if self.block is not None:
            self.block.records.extend(records)
        else:
            self.carry.extend(records)

    def on_step_pre(self, _optimizer: Any, _args: Any, _kwargs: Any) -> None:
        """S-B: resolve, judge the attempt before the optimizer writes, snapshot if due."""
        if not self.sites.is_enabled:
            return
        start = time.perf_counter_ns()
        self.ledger.step_pre_fires += 1
        self.close_in_flight()
        self.carry_or_block(self.resolve())
        if self.block is not None:
            attempt = self._attempt(self.block.records, self.block)
            self.block.attempt = attempt
            self.block.records = []
        else:
            if self.scaler_kind == "gradscaler" and self.carry:
                runs = split_scale_runs(self.carry)
                for run in runs[:-1]:
                    self.close_skipped(self._attempt(run, None))
                self.carry = runs[-1]
            attempt = self._attempt(self.carry, None)
            self.carry = []
        self.in_flight = attempt
        violation = None
        if attempt.backwards:
            for check in self.checks.values():
                violation = check.on_attempt(attempt) or violation
        else:
            self.attempts_without_backward += 1
        violation = self.agree(violation)
        self.series.add_attempt(attempt)
        self.site_ns += time.perf_counter_ns() - start
        if violation is not None:
            attempt.status = "raised"
            self.in_flight = None
            self.close(attempt)
            self.raise_violation(violation)
        if self.sampler is not None:
            self.sampler.before_write(attempt, self.ledger.accepted, self.optimizer)

    def on_step_post(self, _optimizer: Any, _args: Any, _kwargs: Any) -> None:
        """S-C: the optimizer wrote; measure sampled updates, accept the attempt."""
        if not self.sites.is_enabled or self.in_flight is None:
            return
        start = time.perf_counter_ns()
        self.ledger.step_post_fires += 1
        attempt, self.in_flight = self.in_flight, None
        attempt.status = "accepted"
        sample = self.sampler.after_write() if self.sampler is not None else None
        self.series.add_update(attempt, sample)
        violation = None
        for check in self.checks.values():
            violation = check.on_written(attempt, sample) or violation
        self.close(attempt)
        self.site_ns += time.perf_counter_ns() - start
        self.on_progress()
        if violation is not None:
            self.raise_violation(violation)

    # ----- boundary mode ------------------------------------------------------------------------
    def close_block(self, block: Block) -> None:
        """``session.step()`` exit: settle the block's attempt exactly."""
        self.close_in_flight()
        block.records.extend(self.resolve())
        self.observe_live_scale()
        attempt = block.attempt
        if attempt is None and block.records:
            attempt = self._attempt(block.records, block)
            self.close_skipped(attempt)
        if (
            attempt is not None
            and block.micro_batches is not None
            and (len(attempt.backwards) != block.micro_batches)
        ):
            self.session_findings.append(
                Finding(
                    "micro_batches_mismatch",
                    "warning",
                    f"step(global_step={block.global_step}, micro_batches={block.micro_batches}) "
                    f"ran {len(attempt.backwards)} backward(s).",
                    remedy="Declare the accumulation factor the loop really uses; the accumulation "
                    "factor K and the watchdog limit are taken from it.",
                    fields={
                        "code": "micro_batches_mismatch",
                        "global_step": block.global_step,
                        "declared": block.micro_batches,
                        "observed": len(attempt.backwards),
                    },
                )
            )
        self.on_progress()


def _unset(finding: Finding) -> None:
    raise AssertionError(f"the session did not wire raise_violation ({finding.code})")


def _noop() -> None:
    return None


def _unchanged(violation: Finding | None) -> Finding | None:
    return violation
