"""The session engine: site handlers S-B / S-C / S-D and the grouping of backwards into attempts.

The session talks to the engine through a small interface and never touches its state:
``register(check)``, ``install(stack)`` (the hooks), ``begin_step()`` / ``end_step()`` (boundary
mode), ``pause()`` / ``resume()``, ``settle()`` and ``close_in_flight()``; the callbacks it needs
(raise a violation, report progress, agree across ranks) are given to the constructor. The
report builder reads the engine through its read-only properties.

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

import contextlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import torch

from ..report import Finding
from ..report.checks import ScaleProvenance, Stage
from ._check import Check
from ._evidence import Attempt, BackwardRecord, Evidence, split_scale_runs
from ._ledger import ScaleLedger, ScalerKind, StepLedger
from ._params import Roster
from ._series import Series
from ._sites import GradSites, PendingBackward
from ._update_ratio import UpdateSampler


@dataclass
class _Block:
    """State of one ``session.step()`` block."""

    global_step: int | None
    micro_batches: int | None
    records: list[BackwardRecord] = field(default_factory=list)
    attempt: Attempt | None = None


Agree = Callable[[Finding | None], Finding | None]
"""S-B: every rank's verdict before any rank writes (``_distributed.RankContext.agree``)."""


class Engine:
    """Session state and the handlers the hooks call.

    Args:
        roster: the parameters to check.
        optimizer: the optimizer whose step hooks are sites S-B and S-C.
        scaler: the GradScaler (or None / the undeclared marker).
        scaler_kind: what ``scaler`` declares.
        loss_scale: a constant loss scale the caller declared, or None.
        raise_violation: builds the partial report and raises ``CheckViolationError``.
        on_progress: called after each backward and each accepted step (the dashboard feed).
        agree: S-B agreement across ranks (identity when the session is rank-local).
    """

    def __init__(
        self,
        roster: Roster,
        optimizer: torch.optim.Optimizer,
        scaler: Any,
        scaler_kind: ScalerKind,
        loss_scale: float | None,
        *,
        raise_violation: Callable[[Finding], None],
        on_progress: Callable[[], None],
        agree: Agree | None = None,
    ) -> None:
        self._roster = roster
        self._optimizer = optimizer
        self._scaler = scaler
        self._scaler_kind = scaler_kind
        self._loss_scale = loss_scale
        self._raise_violation = raise_violation
        self._on_progress = on_progress
        self._agree: Agree = agree if agree is not None else _unchanged
        backoff = scaler.get_backoff_factor() if scaler_kind == "gradscaler" else None
        self._scale_ledger = ScaleLedger(scaler_kind, backoff)
        self._ledger = StepLedger()
        self._evidence = Evidence()
        self._series = Series(roster, loss_scale)
        self._sites = GradSites(roster, self._on_backward, self._scale_tensor)
        self._checks: dict[str, Check] = {}
        self._sampler: UpdateSampler | None = None
        self._block: _Block | None = None
        self._in_flight: Attempt | None = None
        self._last_attempt: Attempt | None = None
        self._session_findings: list[Finding] = []
        self._carry: list[BackwardRecord] = []
        self._attempts_without_backward = 0
        self._site_ns = 0

    # ----- the session's interface ---------------------------------------------------------------
    def register(self, check: Check, *, sample_every: int | None = None) -> None:
        """Add (or replace) ``check``; ``sample_every`` arms the weight-update sampler."""
        self._checks[check.name] = check
        self._sites.needs_norms = any(c.needs_norms for c in self._checks.values())
        if sample_every is not None:
            every = min(sample_every, self._sampler.every) if self._sampler else sample_every
            self._sampler = UpdateSampler(self._roster, every)

    def install(self, stack: contextlib.ExitStack) -> None:
        """Install S-A on every roster parameter and S-B / S-C on the optimizer; every handle
        goes to ``stack``."""
        self._sites.install(stack)
        stack.callback(self._optimizer.register_step_pre_hook(self._on_step_pre).remove)
        stack.callback(self._optimizer.register_step_post_hook(self._on_step_post).remove)

    @property
    def is_in_step(self) -> bool:
        """Whether a ``session.step()`` block is open."""
        return self._block is not None

    def begin_step(self, global_step: int | None, micro_batches: int | None) -> None:
        """Open a boundary-mode block (the caller checked that none is open)."""
        self._carry.extend(self.resolve())
        self._block = _Block(global_step, micro_batches)
        if micro_batches is not None:
            self._ledger.declared_micro_batches = micro_batches

    def end_step(self) -> None:
        """``session.step()`` exit: settle the block's attempt exactly."""
        block, self._block = self._block, None
        if block is None:
            return
        self.close_in_flight()
        block.records.extend(self.resolve())
        self._observe_live_scale()
        attempt = block.attempt
        if attempt is None and block.records:
            attempt = self._attempt(block.records, block)
            self._close_skipped(attempt)
        if (
            attempt is not None
            and block.micro_batches is not None
            and (len(attempt.backwards) != block.micro_batches)
        ):
            self._session_findings.append(_micro_batches_mismatch(block, attempt))
        self._on_progress()

    @property
    def is_enabled(self) -> bool:
        return self._sites.is_enabled

    def pause(self) -> None:
        """Stop observing; the open attempt's evidence is dropped, never judged half-seen."""
        self._sites.is_enabled = False
        self._evidence.discard()
        self._carry.clear()
        self._in_flight = None
        if self._sampler is not None:
            self._sampler.discard()

    def resume(self) -> None:
        """Observe again from the next backward."""
        self._sites.is_enabled = True

    def settle(self) -> None:
        """Resolve queued backwards (one host read) and close what hook-only mode can close."""
        self._carry_or_block(self.resolve())
        if self._block is None:
            self._settle_hook_only(self._observe_live_scale())

    def close_in_flight(self) -> None:
        """An attempt that passed S-B but never reached S-C: ``optimizer.step()`` failed."""
        if self._in_flight is not None:
            self._in_flight.status = "failed"
            self._close(self._in_flight)
            self._in_flight = None
            if self._sampler is not None:
                self._sampler.discard()

    def start_feeding(self) -> None:
        """Keep the chart rows added between dashboard increments."""
        self._series.is_feeding = True

    # ----- read side (the report builder) --------------------------------------------------------
    @property
    def roster(self) -> Roster:
        return self._roster

    @property
    def loss_scale(self) -> float | None:
        return self._loss_scale

    @property
    def scaler_kind(self) -> ScalerKind:
        return self._scaler_kind

    @property
    def checks(self) -> Mapping[str, Check]:
        return MappingProxyType(self._checks)

    @property
    def ledger(self) -> StepLedger:
        return self._ledger

    @property
    def scale_ledger(self) -> ScaleLedger:
        return self._scale_ledger

    @property
    def series(self) -> Series:
        return self._series

    @property
    def last_attempt(self) -> Attempt | None:
        return self._last_attempt

    @property
    def session_findings(self) -> tuple[Finding, ...]:
        return tuple(self._session_findings)

    @property
    def sample_every(self) -> int | None:
        """Accepted steps between weight snapshots, None when nothing samples updates."""
        return self._sampler.every if self._sampler is not None else None

    @property
    def needs_norms(self) -> bool:
        return self._sites.needs_norms

    @property
    def attempts_without_backward(self) -> int:
        return self._attempts_without_backward

    @property
    def backwards(self) -> int:
        return self._sites.backwards

    @property
    def arrivals(self) -> int:
        return self._sites.arrivals

    @property
    def pending_backwards(self) -> int:
        """Backwards observed but not yet part of a closed or in-flight attempt."""
        block = len(self._block.records) if self._block is not None else 0
        return self._evidence.pending_count + len(self._carry) + block

    @property
    def host_reads(self) -> int:
        """Host reads of backward evidence so far (one per resolution point)."""
        return self._evidence.host_reads

    @property
    def site_ms(self) -> float:
        """Time spent in the S-B / S-C / S-D callbacks (the S-D norms included)."""
        return (self._site_ns + self._sites.norm_ns) / 1e6

    # ----- labels -------------------------------------------------------------------------------
    def _scale_tensor(self) -> torch.Tensor | None:
        if self._scaler_kind != "gradscaler" or not self._scaler.is_enabled():
            return None
        return getattr(self._scaler, "_scale", None)

    def _labels(self, scale: float | None) -> tuple[Stage, ScaleProvenance]:
        """(stage, scale_provenance) of the S-A norms of an attempt."""
        if self._scaler_kind == "gradscaler" and self._scaler.is_enabled():
            return (
                ("pre_clip_scaled", "gradscaler")
                if scale is not None
                else ("pre_clip_scaled", "unknown")
            )
        if self._loss_scale is not None:
            return "pre_clip_scaled", "explicit"
        if self._scaler_kind == "undeclared":
            return "pre_clip_scaled", "unknown"
        return "pre_clip_unscaled", "unscaled"

    def _attempt(self, records: list[BackwardRecord], block: _Block | None) -> Attempt:
        stage, provenance = self._labels(records[-1].scale if records else None)
        attempt = Attempt(
            index=self._ledger.next_attempt,
            backwards=tuple(records),
            provenance="explicit" if block else "inferred",
            stage=stage,
            scale_provenance=provenance,
            has_norms=self._sites.needs_norms,
            global_step=block.global_step if block else None,
            micro_batches=block.micro_batches if block else None,
        )
        self._ledger.next_attempt += 1
        return attempt

    # ----- resolution ---------------------------------------------------------------------------
    def resolve(self) -> list[BackwardRecord]:
        """Read queued backwards to the host (one read per device) and observe their scales."""
        self._evidence.resolve()
        records = self._evidence.take()
        for record in records:
            self._scale_ledger.observe(record.scale, record.index)
        return records

    def _observe_live_scale(self) -> float | None:
        """Read the scaler's current scale (one host read) into the skip ledger."""
        tensor = self._scale_tensor()
        if tensor is None:
            return None
        scale = float(tensor)
        backwards = self._sites.backwards
        self._scale_ledger.observe(scale, backwards - 1 if backwards else None)
        return scale

    def _settle_hook_only(self, live_scale: float | None) -> None:
        """Close hook-only attempts the scaler skipped; the rest stays in ``carry``."""
        if self._scaler_kind != "gradscaler" or not self._carry:
            return
        runs = split_scale_runs(self._carry)
        last_run = runs[-1]
        is_last_skipped = (
            live_scale is not None
            and last_run[-1].scale is not None
            and live_scale < last_run[-1].scale
        )
        for run in runs if is_last_skipped else runs[:-1]:
            self._close_skipped(self._attempt(run, None))
        self._carry = [] if is_last_skipped else list(last_run)

    def _close_skipped(self, attempt: Attempt) -> None:
        attempt.status = "skipped"
        for check in self._checks.values():
            check.on_skipped(attempt)
        self._series.add_attempt(attempt)
        self._close(attempt)

    def _close(self, attempt: Attempt) -> None:
        self._ledger.close(attempt)
        self._series.set_status(attempt)
        self._last_attempt = attempt

    # ----- site handlers ------------------------------------------------------------------------
    def _on_backward(self, pending: PendingBackward) -> None:
        """S-D: queue the backward's device numbers; counting-tier checks."""
        start = time.perf_counter_ns()
        self._ledger.backwards_since_accepted += 1
        if self._evidence.add(pending):
            self._carry_or_block(self.resolve())
        violation = None
        for check in self._checks.values():
            violation = check.on_backward(self._ledger) or violation
        self._site_ns += time.perf_counter_ns() - start
        self._on_progress()
        if violation is not None:
            self._raise_violation(violation)

    def _carry_or_block(self, records: list[BackwardRecord]) -> None:
        if self._block is not None:
            self._block.records.extend(records)
        else:
            self._carry.extend(records)

    def _on_step_pre(self, _optimizer: Any, _args: Any, _kwargs: Any) -> None:
        """S-B: resolve, judge the attempt before the optimizer writes, snapshot if due."""
        if not self._sites.is_enabled:
            return
        start = time.perf_counter_ns()
        self._ledger.step_pre_fires += 1
        self.close_in_flight()
        self._carry_or_block(self.resolve())
        if self._block is not None:
            attempt = self._attempt(self._block.records, self._block)
            self._block.attempt = attempt
            self._block.records = []
        else:
            if self._scaler_kind == "gradscaler" and self._carry:
                runs = split_scale_runs(self._carry)
                for run in runs[:-1]:
                    self._close_skipped(self._attempt(run, None))
                self._carry = runs[-1]
            attempt = self._attempt(self._carry, None)
            self._carry = []
        self._in_flight = attempt
        violation = None
        if attempt.backwards:
            for check in self._checks.values():
                violation = check.on_attempt(attempt) or violation
        else:
            self._attempts_without_backward += 1
        violation = self._agree(violation)
        self._series.add_attempt(attempt)
        self._site_ns += time.perf_counter_ns() - start
        if violation is not None:
            attempt.status = "raised"
            self._in_flight = None
            self._close(attempt)
            self._raise_violation(violation)
        if self._sampler is not None:
            self._sampler.before_write(attempt, self._ledger.accepted, self._optimizer)

    def _on_step_post(self, _optimizer: Any, _args: Any, _kwargs: Any) -> None:
        """S-C: the optimizer wrote; measure sampled updates, accept the attempt."""
        if not self._sites.is_enabled or self._in_flight is None:
            return
        start = time.perf_counter_ns()
        self._ledger.step_post_fires += 1
        attempt, self._in_flight = self._in_flight, None
        attempt.status = "accepted"
        sample = self._sampler.after_write() if self._sampler is not None else None
        self._series.add_update(attempt, sample)
        violation = None
        for check in self._checks.values():
            violation = check.on_written(attempt, sample) or violation
        self._close(attempt)
        self._site_ns += time.perf_counter_ns() - start
        self._on_progress()
        if violation is not None:
            self._raise_violation(violation)


def _micro_batches_mismatch(block: _Block, attempt: Attempt) -> Finding:
    return Finding(
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


def _unchanged(violation: Finding | None) -> Finding | None:
    return violation
