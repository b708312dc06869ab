"""The session engine: site handlers S-B / S-C / S-D and the grouping of backwards into attempts.

The session talks to the engine through a small interface and never touches its state:
``register(check)``, ``install(stack)`` (the hooks), ``begin_step()`` / ``end_step()`` (boundary
mode), ``pause()`` / ``resume()``, ``settle()`` and ``close_in_flight()``; the callbacks it needs
(raise a violation, report progress, agree across ranks) are given to the constructor. The
report builder reads the engine through its read-only properties.

Attempt grouping. The backwards since the last attempt closed form the open :class:`Group`.

* S-B (the optimizer's step pre-hook) closes it as the attempt judged before the write. In
  boundary mode (inside ``session.step()``) it carries the caller's ``global_step`` and is exact
  (``explicit``); in hook-only mode it is ``inferred``.
* A backward that starts from reset gradients (``PendingBackward.is_fresh``: the loop called
  ``zero_grad()``) while the group holds backwards no step used closes the group as SKIPPED. Its
  cause is read from the scale: ``scaler`` when the GradScaler's scale went down in between (the
  scaler skipped ``optimizer.step``), ``loop`` otherwise (the loop's own guard skipped it),
  ``unknown`` without a ``scaler=`` declaration. A ``session.step()`` block that ends without a
  step is skipped by the scaler when the scale went down; otherwise its backwards stay open (the
  loop may accumulate across blocks) until a step uses them, a backward from reset gradients
  closes them as skipped, or ``detach()`` does.
* Boundary mode: backwards that ran outside every ``session.step()`` block and were reset before
  a step used them are no attempt (``backwards_outside_steps``): another optimizer's loss
  backpropagated through these parameters, as a GAN generator's through its discriminator.
* A closure step (``optimizer.step(closure)``) runs the closure's first evaluation inside the
  pre-hook and judges it there, before the optimizer's own code runs; later evaluations (LBFGS)
  are judged before the optimizer uses their gradients (``_optimizer.EvaluatedClosure``).

The pre-write verdict is on exactly the gradients the optimizer is about to use: every parameter
of its param groups NOW (the roster is synced at each S-B: groups added, layers unfrozen) whose
``.grad`` is not None, each normed as it is at the step site (one batched norm per device, read
in the same host read as the S-D norms), whatever the loop did after the backward: clipped,
replaced, written through ``.data`` (which does not bump ``_version``), arrived without a hook.
Where the loop leaves its gradients alone, that pass is also the arrival read, and S-D launches
no norm (``_arrival.py``: learned on three attempts read both ways, verified one in 25).

Host syncs: one read per device at each resolution point (S-B, an attempt closed without a step,
``step()`` exit, ``report()``, and every ``MAX_PENDING_BACKWARDS`` backwards); one more at S-C on
sampled steps; none at S-A or S-D. Reading the live GradScaler scale at ``step()`` exit and
``report()`` is one more.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import torch

from ..._hooks import remove_hook
from ..._interrupts import shielded
from ...report import Finding
from ...report._checks import ScaleProvenance, SkipCause, Stage
from ..distributed._sharded import ShardedGradSites
from ..gradients._nonfinite import NonfiniteGradCheck
from ..gradients._update_ratio import UpdateSampler
from ..gradients._watchdog import NoAcceptedStepsCheck
from ..scans._norms import NormPlan, device_norms
from ._arrival import ArrivalReads, Break
from ._check import Check
from ._evidence import Attempt, BackwardRecord, Evidence, Group
from ._ledger import ScaleLedger, ScalerKind, StepLedger
from ._loss import LOSS_ROOTS, as_loss
from ._optimizer import EvaluatedClosure, closure_of, with_closure
from ._params import Roster
from ._replay import KeptBatch, Replay
from ._series import Series
from ._sites import GradSites, PendingBackward
from ._tally import Tally

LOSS_READ_EVERY = 8
"""Where the step site reads nothing else (no check needs gradient norms) and the losses live on
an accelerator, they wait on the device and are read together once per this many attempts: a
read of its own per step would be a host sync per step. On the CPU a read is a copy: read at once."""

Agree = Callable[[Finding | None], Finding | None]
"""S-B: every rank's verdict before any rank writes (``_distributed.RankContext.agree``)."""
RaiseViolation = Callable[[Finding, Replay | None], None]
"""Builds the final report of the raise and raises ``CheckViolationError``."""


@dataclass
class _Block:
    """State of one ``session.step()`` block."""

    global_step: int | None
    micro_batches: int | None
    kept: KeptBatch | None
    first_backward: int
    """Session backward number of the block's first backward (micro-batch 0)."""
    attempt: Attempt | None = None


class Engine:
    """Session state and the handlers the hooks call.

    Args:
        roster: the parameters to watch.
        optimizer: the (unwrapped) optimizer whose step hooks are sites S-B and S-C.
        scaler: the GradScaler (or None / the undeclared marker).
        scaler_kind: what ``scaler`` declares.
        loss_scale: a constant loss scale the caller declared, or None.
        raise_violation: builds the final report of the raise and raises it.
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
        raise_violation: RaiseViolation,
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
        sites = ShardedGradSites if roster.is_sharded else GradSites
        self._sites = sites(roster, self._on_backward, self._scale_tensor)
        self._step_plan = NormPlan()
        """The S-B kernel: every gradient the optimizer is about to use, at every attempt."""
        self._arrival = ArrivalReads(is_enabled=not roster.is_sharded)
        self._sites.on_reset = self._read_deferred
        self._checks: dict[str, Check] = {}
        self._defaults: dict[str, Check] = {}
        """The invariants that run unless turned off (``_invariant.py``); not "registered"."""
        self._watchdog: Check = NoAcceptedStepsCheck(roster, threshold_attempts=20, action="warn")
        self._is_watchdog_registered = False
        self._observer: NonfiniteGradCheck | None = None
        """Collects the non-finite gradients a session without the non-finite check still
        reads (its gradient norms are measured for another check): never a silent "clean"."""
        self._sampler: UpdateSampler | None = None
        self._open = Group()
        self._block: _Block | None = None
        self._in_flight: Attempt | None = None
        self._last_attempt: Attempt | None = None
        self._mismatches = Tally(
            "micro_batches_mismatch",
            "warning",
            _mismatch_message,
            remedy="Declare the accumulation factor the loop really uses; the accumulation "
            "factor K and the watchdog limit are taken from it.",
            histogram="observed",
        )
        self._attempts_without_backward = 0
        self._queued_losses: list[tuple[Attempt | None, list[torch.Tensor]]] = []
        """Attempts whose losses wait on the device for the next read (``LOSS_READ_EVERY``)."""
        self._site_ns = 0
        self._has_blocks = False
        """Boundary mode: a ``session.step()`` block ran; attempts are what blocks delimit."""

    # ----- the session's interface ---------------------------------------------------------------
    def register(self, check: Check, *, sample_every: int | None = None) -> None:
        """Add (or replace) ``check``; ``sample_every`` arms the weight-update sampler. The
        death-spiral watchdog is registered from the start; registering one replaces it."""
        if isinstance(check, NoAcceptedStepsCheck):
            self._watchdog = check
            self._is_watchdog_registered = True
        else:
            self._checks[check.name] = check
        self._sites.needs_norms = any(c.needs_norms for c in self._checks.values())
        if not self._sites.needs_norms or NonfiniteGradCheck.name in self._checks:
            self._observer = None
        elif self._observer is None:
            self._observer = NonfiniteGradCheck(self._roster, action="collect", smear_min_params=2)
        if sample_every is not None:
            every = min(sample_every, self._sampler.every) if self._sampler else sample_every
            self._sampler = UpdateSampler(self._roster, every)

    def add_default(self, check: Check) -> None:
        """Add (or replace) a default check: it runs, but the session does not count it as
        registered by the caller."""
        self._defaults[check.name] = check

    def observe_backward_open(
        self,
        callback: Callable[[int, torch.Tensor], None],
        *,
        before_reduce: Callable[[], None] | None = None,
    ) -> None:
        """Call ``callback(index, param)`` at the first gradient arrival of every backward
        (FSDP2: at the first shard the reduce-scatter wrote, with the sharded parameter), and
        under FSDP2 ``before_reduce()`` at the first local arrival, before any shard is
        written (``distributed/_sharded.py``)."""
        self._sites.on_open = callback
        if isinstance(self._sites, ShardedGradSites):
            self._sites.before_reduce = before_reduce

    def install(self, stack: contextlib.ExitStack) -> None:
        """Install S-A on every roster parameter and S-B / S-C on the optimizer; every handle
        goes to ``stack``, and so does freeing the update sampler's kept snapshot."""
        stack.callback(self._release_snapshot)
        LOSS_ROOTS.use(stack)
        self._sites.install(stack)
        for check in self.checks.values():
            check.install(stack)
        optimizer, pre, post = self._optimizer, self._on_step_pre, self._on_step_post
        # each removal before its hook: an interrupt in between leaves nothing (_hooks)
        stack.callback(remove_hook, optimizer._optimizer_step_pre_hooks, pre)
        optimizer.register_step_pre_hook(pre)
        stack.callback(remove_hook, optimizer._optimizer_step_post_hooks, post)
        optimizer.register_step_post_hook(post)

    @property
    def is_in_step(self) -> bool:
        """Whether a ``session.step()`` block is open."""
        return self._block is not None

    def begin_step(
        self,
        global_step: int | None,
        micro_batches: int | None,
        inputs: Any,
        loss_fn: Callable[..., Any] | None = None,
        forward_fn: Any = None,
    ) -> None:
        """Open a boundary-mode block (the caller checked its arguments and that none is open).

        Backwards before the block that no step used stay in the open group: the block's step
        uses them too unless its first backward starts from reset gradients.
        """
        kept = KeptBatch(inputs, micro_batches, loss_fn, forward_fn) if inputs is not None else None
        self._has_blocks = True
        self._block = _Block(global_step, micro_batches, kept, self._sites.backwards)
        if micro_batches is not None:
            self._ledger.declared_micro_batches = micro_batches

    def end_step(self) -> None:
        """``session.step()`` exit: settle the block's attempt exactly."""
        block = self._block
        if block is None:
            return
        self.close_in_flight()
        self._fold_pending()
        live_scale = self._observe_live_scale()
        attempt = block.attempt
        if (
            attempt is None
            and self._open.backward_count
            and self._skip_cause(self._open.scale, live_scale) == "scaler"
        ):
            attempt = self._close_open_as_skipped(live_scale)
        # A block that ran backwards but no step, and no scale decrement: the loop skipped the
        # attempt or accumulates across blocks (Lightning's manual optimization, a loop that
        # steps every k-th batch). The group stays open: the next step uses it (one attempt),
        # or the next backward from reset gradients, or detach(), closes it as skipped.
        if (
            attempt is not None
            and block.micro_batches is not None
            and attempt.backward_count != block.micro_batches
        ):
            fields = {"declared": block.micro_batches, "observed": attempt.backward_count}
            self._mismatches.add(attempt.index, block.global_step, fields)
        self._block = None
        self._on_progress()

    @property
    def is_enabled(self) -> bool:
        return self._sites.is_enabled

    def pause(self) -> None:
        """Stop observing; the open attempt's evidence is dropped, never judged half-seen."""
        self._sites.is_enabled = False
        self._sites.forget()
        self._evidence.discard()
        self._queued_losses = []
        self._open = Group()
        self._in_flight = None
        if self._sampler is not None:
            self._sampler.discard()
        for check in self.checks.values():
            check.on_pause()

    def resume(self) -> None:
        """Observe again from the next backward."""
        self._sites.is_enabled = True

    def settle(self) -> None:
        """Resolve queued backwards (one host read); in hook-only mode, close the open group
        when the live GradScaler scale shows the scaler skipped it."""
        self._fold_pending()
        if self._block is not None or not self._open.backward_count:
            return
        live_scale = self._observe_live_scale()
        if self._skip_cause(self._open.scale, live_scale) == "scaler":
            self._close_open_as_skipped(live_scale)

    def close_open_at_exit(self) -> None:
        """``detach()``: in boundary mode, backwards of a block that no step used are a skipped
        attempt (hook-only mode leaves them pending: nothing delimits its attempts)."""
        self._fold_pending()
        if self._open.backward_count and self._open.is_in_block:
            self._close_open_as_skipped(self._observe_live_scale())

    @shielded()
    def close_in_flight(self) -> None:
        """An attempt that passed S-B but never reached S-C: ``optimizer.step()`` failed."""
        if self._in_flight is not None:
            self._in_flight.status = "failed"
            self._close(self._in_flight)
            self._in_flight = None
            if self._sampler is not None:
                self._sampler.discard()

    def _release_snapshot(self) -> None:
        if self._sampler is not None:
            self._sampler.release()

    def record_loss(self, loss: torch.Tensor) -> None:
        """The open attempt's loss as the loop gives it (``session.record_loss``); kept on its
        device until the step site reads it."""
        self._open.recorded_losses.append(as_loss(loss))

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
        """Registered checks in registration order, the non-finite observer when one runs
        (``action="collect"``), the default invariants, then the watchdog."""
        observer = {self._observer.name: self._observer} if self._observer is not None else {}
        return {**self._checks, **observer, **self._defaults, self._watchdog.name: self._watchdog}

    @property
    def is_nonfinite_armed(self) -> bool:
        """Whether the caller registered the non-finite check (the pre-write raise, unless it
        chose another action)."""
        return NonfiniteGradCheck.name in self._checks

    @property
    def registered(self) -> int:
        """Checks registered by the caller (the default watchdog not counted)."""
        return len(self._checks) + self._is_watchdog_registered

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
        finding = self._mismatches.finding()
        return () if finding is None else (finding,)

    @property
    def sample_every(self) -> int | None:
        """Accepted steps between weight snapshots, None when nothing samples updates."""
        return self._sampler.every if self._sampler is not None else None

    @property
    def arrival_reads(self) -> ArrivalReads:
        """How arrival norms were read (at S-D, or in the step site's pass)."""
        return self._arrival

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
    def unobserved_backwards(self) -> int:
        return self._sites.unobserved_backwards

    @property
    def arrivals(self) -> int:
        return self._sites.arrivals

    @property
    def pending_backwards(self) -> int:
        """Backwards observed but not yet part of a closed or in-flight attempt."""
        return self._open.backward_count

    @property
    def host_reads(self) -> int:
        """Host reads of backward evidence so far (one per resolution point)."""
        return self._evidence.host_reads

    @property
    def site_ms(self) -> float:
        """Time spent in the S-B / S-C / S-D callbacks (the S-D norms included)."""
        return (self._site_ns + self._sites.norm_ns) / 1e6

    # ----- labels and attempts -------------------------------------------------------------------
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

    def _attempt(self, group: Group, index: int | None = None) -> Attempt:
        """The attempt of ``group``: a new attempt number, or ``index`` (a closure
        re-evaluation belongs to the attempt in flight)."""
        stage, provenance = self._labels(group.scale)
        block = self._block
        attempt = Attempt.from_group(
            group,
            index=self._ledger.next_attempt if index is None else index,
            provenance="explicit" if block else "inferred",
            stage=stage,
            scale_provenance=provenance,
            has_norms=self._sites.needs_norms,
            global_step=block.global_step if block else None,
            micro_batches=block.micro_batches if block else None,
            first_backward=block.first_backward if block else None,
        )
        if index is None:
            self._ledger.next_attempt += 1
        return attempt

    def _skip_cause(self, scale: float | None, later_scale: float | None) -> SkipCause:
        """Who skipped an attempt that ran at ``scale`` when the scale is ``later_scale`` now."""
        if self._scaler_kind == "undeclared":
            return "unknown"
        if scale is not None and later_scale is not None and later_scale < scale:
            return "scaler"
        return "loop"

    def _close_open_as_skipped(
        self, later_scale: float | None, *, is_next_started: bool = False
    ) -> Attempt:
        """Close the open group as a skipped attempt. ``is_next_started``: the backward that
        closes it already runs; its gradient snapshot stays, so the backward after it can tell
        whether it starts from reset gradients (consecutive skips are one attempt each)."""
        attempt = self._attempt(self._open)
        self._open = Group()
        if not is_next_started:
            self._sites.forget()
        self._close_skipped(attempt, self._skip_cause(attempt.scale, later_scale))
        return attempt

    def _drop_outside_steps(self) -> None:
        """Boundary mode: the open group's backwards all ran outside any ``session.step()``
        block and their gradients were reset before a step used them (another optimizer's loss
        backpropagated through these parameters: a GAN generator's through its
        discriminator). They are no attempt; non-finite gradients among them are still
        reported (``Check.on_outside_steps``)."""
        group, self._open = self._open, Group()
        self._ledger.backwards_outside_steps += group.backward_count
        self._ledger.backwards_since_accepted -= group.backward_count
        attempt = self._attempt(group, index=self._ledger.next_attempt)
        for check in self.checks.values():
            check.on_outside_steps(attempt)

    def _close_skipped(self, attempt: Attempt, cause: SkipCause) -> None:
        attempt.status = "skipped"
        attempt.skip_cause = cause
        for check in self.checks.values():
            check.on_skipped(attempt)
        self._series.add_attempt(attempt)
        self._close(attempt)

    def _close(self, attempt: Attempt) -> None:
        self._ledger.close(attempt)
        self._series.set_status(attempt)
        self._last_attempt = attempt

    def _replay(self, attempt: Attempt) -> Replay | None:
        """The kept micro-batch of ``attempt``'s first non-finite backward (boundary mode with
        ``inputs=``), None when none was kept."""
        block = self._block
        if block is None or block.kept is None:
            return None
        micro = attempt.first_nonfinite_micro_batch
        if micro is None and not attempt.first_nonfinite and (block.micro_batches or 1) == 1:
            micro = 0  # non-finite only at the step site: the attempt's one batch
        kept = block.kept.micro_batch(micro) if micro is not None else None
        if kept is None:
            return None
        attempt.has_replay = True
        return Replay(
            self._roster.model_ref,
            kept[0],
            kept[1],
            attempt.global_step,
            attempt.index,
            micro if micro is not None else 0,
            block.micro_batches,
            block.kept.loss_fn,
            block.kept.forward_fn(micro if micro is not None else 0),
        )

    # ----- resolution ---------------------------------------------------------------------------
    def _fold_pending(
        self, group: Group | None = None, extra: list[torch.Tensor] | None = None
    ) -> list[float]:
        """Read queued backwards (and ``extra``) to the host in one read; fold the backwards
        into ``group`` (the open one by default) and observe their scales; return the extra
        values."""
        self._read_deferred()
        records, values = self._evidence.resolve(extra or ())
        self._fold(records, self._open if group is None else group)
        return values

    def _fold(
        self,
        records: list[BackwardRecord],
        group: Group,
        step_norms: dict[int, float] | None = None,
    ) -> None:
        """Observe the records' scales and fold them into ``group``, in order."""
        for record in records:
            if step_norms is not None:
                record = record.with_step_values(step_norms)
            self._scale_ledger.observe(record.scale, record.index)
            group.fold(record)

    def _read_deferred(
        self, step_grads: Mapping[int, torch.Tensor] | None = None, *, is_accumulated: bool = False
    ) -> None:
        """Read every queued backward whose S-D norm was deferred (``_arrival.py``): from
        ``step_grads`` (the step site's read, roster index -> the tensor it norms) where the
        gradient is still that tensor at its arrival version, else its own norm launched now
        (a gradient the loop replaced or reset still holds its arrival values); a gradient
        changed in place since has no arrival read (``unread``). ``is_accumulated``: the step
        site's attempt ran more than one backward."""
        for pending in self._evidence.pending:
            if not pending.defers or pending.snapshot is None:
                continue
            intact, changed = self._sites.still_as_left(pending.snapshot)
            shared = step_grads or {}
            from_step = tuple(i for i, g, is_grad in intact if is_grad and shared.get(i) is g)
            own = [(i, g) for i, g, is_grad in intact if not (is_grad and shared.get(i) is g)]
            norms = device_norms([g for _, g in own], [i for i, _ in own]) if own else ()
            read = replace(pending, defers=False, norms=norms, from_step=from_step, unread=changed)
            self._evidence.replace(pending, read)
            is_replaced = step_grads is not None and not all(is_grad for _, _, is_grad in intact)
            broken: Break | None = "changes_in_place" if changed or is_replaced else None
            if is_accumulated:
                broken = "accumulates"
            self._arrival.observe_deferred(
                self._ledger.next_attempt, broken, has_unread=bool(changed)
            )

    def _verify_arrival(self, group: Group, pending: PendingBackward | None) -> Break | None:
        """S-B of an attempt whose arrival was read at S-D: what its gradients' metadata shows
        about the loop (``_arrival.py``), before the read; the equality of the two norms is
        checked after it."""
        if group.backward_count != 1:
            return "accumulates"
        if pending is None or pending.snapshot is None:
            return None
        intact, changed = self._sites.still_as_left(pending.snapshot)
        if changed or not all(is_grad for _, _, is_grad in intact):
            return "changes_in_place"
        return None

    def _give_losses(self, values: list[float], attempt: Attempt, group: Group) -> None:
        """Set the read losses on the queued attempts and ``attempt``, oldest first, and hand
        each to the checks (``Check.on_loss``)."""
        cursor = 0
        owners = [(a, len(ts)) for a, ts in self._queued_losses if a is not None]
        owners.append((attempt, len(group.loss_tensors())))
        self._queued_losses = []
        for owner, count in owners:
            owner.loss = math.fsum(values[cursor : cursor + count])
            cursor += count
            for check in self.checks.values():
                check.on_loss(owner)

    def _observe_live_scale(self) -> float | None:
        """Read the scaler's current scale (one host read) into the skip ledger."""
        tensor = self._scale_tensor()
        if tensor is None:
            return None
        scale = float(tensor)
        backwards = self._sites.backwards
        self._scale_ledger.observe(scale, backwards - 1 if backwards else None)
        return scale

    def _judge_step_site(
        self, group: Group, index: int | None = None, found_inf: torch.Tensor | None = None
    ) -> tuple[Attempt, bool]:
        """Close ``group`` as the attempt the optimizer is about to apply: sync the roster, norm
        every gradient the optimizer is about to use as it is now, and read those norms, the
        queued backwards' and ``found_inf`` (the GradScaler's verdict on a fused step) when
        given, and the group's losses (``_loss.py``), in one host read per device. Returns the
        attempt and whether the scaler found a non-finite gradient (the optimizer will not
        write).

        Every gradient is read again, the ones unchanged since their backward included: a write
        through ``.data`` (``p.grad.data.div_(total_norm)``) changes the values without bumping
        ``_version``, so no metadata can tell an unchanged gradient from a rewritten one."""
        self._sites.watch(self._roster.sync(self._optimizer, self._ledger.next_attempt))
        self._sites.retry()
        present: list[tuple[int, torch.Tensor]] = []
        if self._sites.needs_norms:
            present = self._sites.step_site_grads(self._roster.optimized, group.fired)
        pendings = self._evidence.pending
        verifying = (
            self._sites.needs_norms
            and self._arrival.mode != "eager"
            and group.backward_count > 0
            and not any(p.defers for p in pendings)
        )
        if verifying:
            broken = self._verify_arrival(group, pendings[0] if len(pendings) == 1 else None)
        elif self._sites.needs_norms:
            self._read_deferred(dict(present), is_accumulated=group.backward_count > 1)
        step_read = self._step_plan([g for _, g in present], [i for i, _ in present])
        extra = [norms for _, norms in step_read]
        losses = group.loss_tensors()
        queued = self._queued_losses
        is_reading = bool(extra) or any(p.norms or p.scale is not None for p in pendings)
        if losses and (
            is_reading
            or len(queued) + 1 >= LOSS_READ_EVERY
            or all(t.device.type == "cpu" for t in losses)
        ):
            losses = [t for _, ts in queued for t in ts] + losses
        else:  # a loss-only read would be a sync of its own: wait for the next read
            losses, self._queued_losses = [], queued + ([(None, losses)] if losses else [])
        extra.extend(losses)
        if found_inf is not None:
            extra.append(found_inf.detach().reshape(-1)[:1].to(torch.float32))
        records, values = self._evidence.resolve(extra)
        is_scaler_skip = found_inf is not None and values.pop() != 0.0
        order = [i for positions, _ in step_read for i in positions]
        step_norms = dict(zip(order, values))
        self._fold(records, group, step_norms)
        attempt = self._attempt(group, index)
        attempt.step_norms = step_norms
        if self._queued_losses and self._queued_losses[-1][0] is None:
            self._queued_losses[-1] = (attempt, self._queued_losses[-1][1])
        elif losses:
            self._give_losses(values[len(values) - len(losses) :], attempt, group)
        if verifying:
            arrival = group.norms  # the last backward's norms: the attempt's one backward
            if broken is None and not all(
                _same(arrival.get(i, n), n) for i, n in step_norms.items()
            ):
                broken = "writes_through_data"
            self._arrival.observe_verified(attempt.index, broken)
        self._sites.defers_next = self._arrival.defers_next()
        self._sites.forget()  # the attempt is closed: its gradient snapshots pin nothing more
        return attempt, is_scaler_skip

    # ----- site handlers ------------------------------------------------------------------------
    def _on_backward(self, pending: PendingBackward) -> None:
        """S-D: close a group the loop abandoned, queue the backward's device numbers, run the
        counting-tier checks."""
        start = time.perf_counter_ns()
        self._ledger.backwards_since_accepted += 1
        if pending.is_fresh and self._open.backward_count and self._in_flight is None:
            later = [pending.scale.reshape(1)] if pending.scale is not None else []
            values = self._fold_pending(extra=later)
            if self._has_blocks and not self._open.is_in_block:
                self._drop_outside_steps()
            else:
                later_scale = values[0] if values else None
                self._close_open_as_skipped(later_scale, is_next_started=True)
        self._open.note(pending)
        self._open.is_in_block |= self._block is not None
        root = LOSS_ROOTS.current
        if root is not None:
            self._open.losses.append(root if pending.scale is None else root / pending.scale)
        self._ledger.open_backwards = self._open.backward_count
        if self._block is not None and self._block.kept is not None:
            self._block.kept.backward_done()
        if self._evidence.add(pending):
            self._fold_pending()
        violation = None
        for check in self.checks.values():
            violation = check.on_backward(self._ledger) or violation
        self._site_ns += time.perf_counter_ns() - start
        self._on_progress()
        if violation is not None:
            self._raise_violation(violation, None)

    def _on_step_pre(
        self, _optimizer: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
        """S-B: judge the attempt before the optimizer writes, snapshot if due. A closure step
        is evaluated here first, so its gradients are judged before ``step()`` runs."""
        if not self._sites.is_enabled:
            return None
        self.close_in_flight()
        closure = closure_of(args, kwargs)
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        return self._judge_before_write(closure, loss, args, kwargs)

    @shielded()
    def _judge_before_write(
        self,
        closure: Callable[[], Any] | None,
        loss: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
        """S-B after the closure's first evaluation (the user's code, left interruptible)."""
        start = time.perf_counter_ns()
        self._ledger.step_pre_fires += 1
        group, self._open = self._open, Group()
        attempt, is_scaler_skip = self._judge_step_site(
            group, found_inf=_fused_found_inf(self._optimizer)
        )
        if self._block is not None:
            self._block.attempt = attempt
        if is_scaler_skip:  # a fused step the GradScaler skips inside the optimizer's kernel
            self._close_skipped(attempt, "scaler")
            self._site_ns += time.perf_counter_ns() - start
            return None
        self._in_flight = attempt
        replay = self._replay(attempt)
        own = None
        if attempt.backward_count or attempt.step_norms:
            for check in self.checks.values():
                own = check.on_attempt(attempt) or own
        else:
            self._attempts_without_backward += 1
        violation = self._agree(own)
        self._series.add_attempt(attempt)
        self._site_ns += time.perf_counter_ns() - start
        if violation is not None:
            attempt.status = "raised"
            self._in_flight = None
            self._close(attempt)
            self._raise_violation(violation, replay if own is not None else None)
        if self._sampler is not None:
            self._sampler.before_write(attempt, self._ledger.accepted, self._optimizer)
        if closure is None:
            return None
        return with_closure(args, kwargs, EvaluatedClosure(closure, loss, self._on_reevaluated))

    @shielded()
    def _on_reevaluated(self) -> None:
        """A closure re-evaluation inside ``step()`` (LBFGS): judge its gradients before the
        optimizer uses them. Rank-local: no agreement runs inside a step."""
        attempt = self._in_flight
        if attempt is None or not self._sites.is_enabled:
            return
        group, self._open = self._open, Group()
        evaluation, _ = self._judge_step_site(group, attempt.index)
        evaluation.is_mid_step = True
        attempt.backward_count += evaluation.backward_count
        replay = self._replay(evaluation)
        violation = None
        for check in self.checks.values():
            violation = check.on_reevaluated(evaluation) or violation
        if violation is not None:
            attempt.status = "raised"
            self._in_flight = None
            self._close(attempt)
            self._raise_violation(violation, replay)

    @shielded()
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
        for check in self.checks.values():
            violation = check.on_written(attempt, sample) or violation
        self._close(attempt)
        self._site_ns += time.perf_counter_ns() - start
        self._on_progress()
        if violation is not None:
            self._raise_violation(violation, None)


def _same(a: float, b: float) -> bool:
    """Bit-for-bit equal norms (two NaNs are the same reading)."""
    return a == b or (math.isnan(a) and math.isnan(b))


def _mismatch_message(fields: Mapping[str, Any]) -> str:
    counts = ", ".join(f"{n} x {k}" for k, n in fields["observed_counts"].items())
    return (
        f"{fields['count']} step block(s) ran other than their declared "
        f"micro_batches={fields['declared']} backward(s) (backwards observed: {counts}); first "
        f"at global_step={fields['first_global_step']}, last at "
        f"global_step={fields['last_global_step']}."
    )


def _unchanged(violation: Finding | None) -> Finding | None:
    return violation


def _fused_found_inf(optimizer: Any) -> torch.Tensor | None:
    """The GradScaler's ``found_inf`` on an optimizer whose step applies the scaling itself.

    ``GradScaler.step`` does not skip ``step()`` of an optimizer with
    ``_step_supports_amp_scaling`` (fused Adam / AdamW / SGD / Adagrad: the Hugging Face
    Trainer's default ``adamw_torch_fused``): it sets ``optimizer.found_inf`` and
    ``optimizer.grad_scale`` and calls ``step()``, whose kernel skips the write when
    ``found_inf`` is set. S-B then sees the non-finite (and, unless ``unscale_`` ran, still
    scaled) gradients of an attempt the scaler skips: judging them would stop the mechanism
    working (``tests/integrations/test_transformers.py``, fp16 stand-in). None for every other
    step."""
    if not getattr(optimizer, "_step_supports_amp_scaling", False):
        return None
    found_inf = getattr(optimizer, "found_inf", None)
    return found_inf if isinstance(found_inf, torch.Tensor) else None
