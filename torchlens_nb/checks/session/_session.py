"""``tl.debug.ChecksSession``: training sanity checks that run inside the user's loop.

Two modes, both first-class:

* hook-only (zero loop edits): ``with session:`` around the loop; attempts are grouped from the
  hooks (``step_provenance="inferred"``);
* boundary: ``with session.step(global_step=..., micro_batches=..., inputs=...):`` around each
  optimizer attempt for exact accepted / skipped attribution, the caller's step ids, and the
  batch kept for ``CheckViolationError.investigate()``.

The four sites: S-A gradient arrival (post-accumulate-grad hooks: pre-clip, scaled under a
GradScaler; counting only), S-B optimizer step pre-hook (post-clip, unscaled: the last point
before the weights are written; checks raise here), S-C optimizer step post-hook (weights
written: update ratios, movement), S-D backward completion / the ``step()`` boundary.
"""

from __future__ import annotations

import contextlib
import functools
import numbers
import time
from collections.abc import Callable, Iterator
from typing import Any, Literal

import torch

from ..._interrupts import SigintHold, shielded
from ..._undo import Undo, UndoScope
from ..._validate import check_bool, check_int, is_number
from ...errors import CheckViolationError, DiagnosticArgumentError, ModelTypeError
from ...report import Finding, SpikeReport, Unavailable
from ...report._checks import Action, CheckReport, SessionOverhead
from ..dashboard._feed import DashboardFeed, LiveView
from ..dashboard._live import open_live_view
from ..distributed._distributed import RankContext
from ..distributed._grad_reduce import GradReduceWatch
from ..gradients._change import ChangeCheck
from ..gradients._magnitude import MagnitudeCheck
from ..gradients._nonfinite import NonfiniteGradCheck
from ..gradients._update_ratio import UpdateRatioCheck
from ..gradients._watchdog import NoAcceptedStepsCheck
from ..invariants._fresh_grads import FreshGradsCheck
from ..invariants._frozen import FrozenCheck
from ..invariants._invariant import Declared, declared_params
from ..invariants._replicas import ReplicaCheck
from ..invariants._roster import RosterCheck
from ..invariants._step_moves import StepMovesCheck
from ..invariants._writes import WritesCheck
from ..scans._param_scan import ParamScanCheck
from ..scans._scan import scan_tensors
from ..stability._spike import LossFn, spike_forensics
from ..stability._spike_keep import Keep
from ..stability._stability import StabilityCheck
from ._assemble import build_report, counters, live_state
from ._check import Check, validate_action
from ._engine import Engine
from ._ledger import ScalerKind
from ._optimizer import ATTACHED, unwrap_optimizer, watch_wrapper_writes, wrapper_scaler
from ._params import Roster
from ._replay import Replay


class _Undeclared:
    def __repr__(self) -> str:
        return "<scaler undeclared>"


UNDECLARED: Any = _Undeclared()
"""Default of ``scaler=``: nothing was declared, so the loss scale is unknown."""


class ChecksSession:
    """Training checks on a model and its optimizer; capture-free, ``torch.compile``-safe.

    Construction is silent and device-free: it reads parameter metadata only (no hook, no sync,
    no output). Hooks are installed by ``attach()`` / ``with session:`` and all removed on exit,
    exceptions included. Register checks with the ``register_*`` methods (the death-spiral
    watchdog runs by default); read the result with :meth:`report`. One attached session per
    optimizer.

    Args:
        model: the trained module (a ``torch.compile``'d module is fine).
        optimizer: its optimizer (S-B / S-C are its step hooks), or a wrapper exposing it as
            ``.optimizer`` (accelerate's ``AcceleratedOptimizer``, a Hugging Face Trainer's
            ``trainer.optimizer``) or ``.base_optimizer`` (SAM; ``_base_optimizer``: timm's
            Lookahead): the real one is hooked and its param groups are read, and a SAM-style
            wrapper's own writes (``first_step`` / ``second_step``) are followed.
        scaler: the GradScaler, or ``None`` to DECLARE that no scaler runs. A disabled one
            (``GradScaler(enabled=False)``, AMP off) is a session without a scaler, and the
            skip ledger says so. Left out, a wrapper's ``.scaler`` is the declaration; otherwise
            the loss scale is unknown: magnitude verdicts become unknown and the skip ledger
            unavailable.
        loss_scale: a constant the loss is multiplied by before backward (manual loss scaling);
            gradient magnitudes are divided by it (``scale_provenance="explicit"``).
        distributed: ``None`` (default) runs the per-step S-B agreement when ``model`` is a
            ``DistributedDataParallel`` module or an FSDP2 (``fully_shard``) module in an
            initialized group of more than one rank; ``True`` forces it, ``False`` keeps the
            session rank-local. See ``torchlens_nb/checks/distributed/_distributed.py``,
            ``torchlens_nb/checks/distributed/_sharded.py`` and ``docs/distributed.md``.
        detach_on_raise: remove every hook and finalize the report when a check raises, before
            the error propagates: for loops the caller does not own (a trainer's ``train()``
            cannot be wrapped in ``with session:``; ``torchlens_nb.integrations`` sets it). By
            default the session stays attached and the loop may catch the error and go on.
        expect_frozen: parameters (a module, a tensor, or an iterable of them) that must not
            change: see :meth:`expect_frozen`.
        invariants: run the per-step invariants (default True; ``docs/training_checks.md``,
            "Silent bugs"): the optimizer holds something to train, gradients are fresh, an
            accepted step moves what it was given a gradient for, nothing else writes the
            weights between steps, and under DDP the replicas agree. They read host metadata
            (version counters) and warn once each; :meth:`register_invariant_checks` changes
            their action.
        stability: run the stability check (default True; ``docs/training_checks.md``,
            "Stability"): loss spikes and divergence warned before they happen, with the
            mechanism (attention logit growth, output logit divergence, a gradient surge, an
            oversized Adam update, a first step without warmup). Its forward probe and update
            sample run on one attempt in 10 and in 50; :meth:`register_stability_check`
            changes them.

    Example:
        >>> model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
        >>> optimizer = torch.optim.AdamW(model.parameters())
        >>> session = tl.debug.ChecksSession(model, optimizer, scaler=None)
        >>> session.register_nonfinite_grad_check()
        >>> with session:
        ...     for _ in range(3):
        ...         optimizer.zero_grad()
        ...         model(torch.randn(4, 8)).square().mean().backward()
        ...         optimizer.step()
        >>> session.report().counters["accepted"], session.report().status
        (3, 'clean')
    """

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        scaler: Any = UNDECLARED,
        *,
        loss_scale: float | None = None,
        distributed: bool | None = None,
        detach_on_raise: bool = False,
        expect_frozen: Any = None,
        invariants: bool = True,
        stability: bool = True,
    ) -> None:
        check_bool("detach_on_raise", detach_on_raise)
        check_bool("invariants", invariants)
        check_bool("stability", stability)
        if not isinstance(model, torch.nn.Module):
            raise ModelTypeError(
                f"ChecksSession needs an nn.Module as model, got {type(model).__name__}; "
                "pass the module you train (a torch.compile'd module is fine)."
            )
        real = unwrap_optimizer(optimizer)
        self._wrapper = optimizer
        """What the caller passed (a wrapper's own writes are followed: ``_optimizer.py``)."""
        is_declared, wrapped_scaler = wrapper_scaler(optimizer, real)
        if scaler is UNDECLARED and is_declared:
            scaler = wrapped_scaler
        roster = Roster(model, real)
        kind = _scaler_kind(scaler)
        if loss_scale is not None and (
            kind == "gradscaler" or not is_number(loss_scale) or not 0 < loss_scale < float("inf")
        ):
            raise DiagnosticArgumentError(
                f"loss_scale must be a positive finite number and cannot be combined with a "
                f"GradScaler, got loss_scale={loss_scale!r} with scaler={scaler!r}."
            )
        self._ranks = RankContext.detect(model, distributed)
        self._optimizer = real
        self._engine = Engine(
            roster,
            real,
            scaler,
            kind,
            loss_scale,
            raise_violation=self._raise,
            on_progress=self._progress,
            agree=self._ranks.agree
            if self._ranks.is_active or self._ranks.watches_grad_reduce
            else None,
        )
        self._ranks.read_counters = functools.partial(counters, self._engine)
        self._grad_reduce: GradReduceWatch | None = None
        """Watches for the loop's own gradient all_reduce (``_grad_reduce.py``), if it may."""
        self._subject = (
            f"{type(model).__name__} with {type(real).__name__} "
            f"({len(roster.optimized)} parameters)"
            + (f" on rank {self._ranks.rank}" if self._ranks.is_active else "")
        )
        self._hooks: contextlib.ExitStack | None = None
        self._sigint = SigintHold()
        """Opened by attach() (Ctrl-C held in the session's own code), closed by detach()."""
        self._final: CheckReport | None = None
        self._feed: DashboardFeed | None = None
        self._paused_spans = 0
        self._raised_replay: Replay | None = None
        """The kept batch of the last raised attempt: the report's "Find where it was born"."""
        self._detach_on_raise = detach_on_raise
        self._declared = Declared()
        if invariants:
            self.register_invariant_checks()
        if stability:
            self.register_stability_check()
        if expect_frozen is not None:
            self.expect_frozen(expect_frozen)

    # ----- registration -----------------------------------------------------------------------
    def register_change_check(
        self,
        *,
        window: int = 8,
        min_hits: int = 6,
        action: Action = "warn",
        movement_every: int = 50,
    ) -> None:
        """Flag parameters whose gradient is None or zero on ``min_hits`` of ``window`` attempts.

        Uses the gradient fact, not parameter movement: under default AdamW, weight decay moves
        every parameter whose gradient stopped (``tests/checks/test_change_check.py``). Movement
        sampled every ``movement_every`` accepted steps is attached as corroboration with its
        lag. Finding: ``param_received_no_gradient``. Warns once per episode by default.
        """
        self._register(
            ChangeCheck(self._engine.roster, window=window, min_hits=min_hits, action=action),
            sample_every=movement_every,
        )

    def register_nonfinite_grad_check(
        self, *, action: Action = "raise", smear_min_params: int = 2
    ) -> None:
        """Collect non-finite pre-clip gradients at S-A; raise at S-B before the write.

        Raises ``CheckViolationError`` (``code="nonfinite_grad"``) from ``optimizer.step()``
        before it writes: weights and optimizer state stay bitwise unchanged. The finding names
        the culprit (or ``attribution="smeared"`` when ``smear_min_params`` or more parameters
        are non-finite) and the clipping collateral count.
        """
        self._register(
            NonfiniteGradCheck(
                self._engine.roster, action=action, smear_min_params=smear_min_params
            )
        )

    def register_update_ratio_check(
        self,
        *,
        every: int = 50,
        band: tuple[float, float] | None = None,
        window: int = 8,
        min_hits: int = 6,
        action: Action = "collect",
    ) -> None:
        """Record ``||dw|| / ||w||`` (raw and lr-normalised) every ``every`` accepted steps.

        Each sampled step copies the parameters at S-B (``estimated_snapshot_bytes``; on the CPU
        into a copy kept until the session detaches) and reads three batched norms at S-C: on
        GPT-2 small (1x32 tokens, CPU, one thread) a sampled step took 1.08-1.32x a bare one
        (``benchmarks/bench_checks.py``; 2.08x with a fresh copy each time), so the default
        samples 1 step in 50 (under +0.5% amortised); pass ``every=1`` for a ratio at every
        step. With ``band`` declared, sustained out-of-band ratios yield
        ``update_ratio_out_of_band``.
        """
        self._register(
            UpdateRatioCheck(
                self._engine.roster,
                every=every,
                band=band,
                window=window,
                min_hits=min_hits,
                action=action,
            ),
            sample_every=every,
        )

    def register_magnitude_check(
        self,
        *,
        high: float = 1e4,
        low: float = 1e-7,
        window: int = 8,
        min_hits: int = 6,
        site: Literal["S-A", "S-B"] = "S-A",
        action: Action = "warn",
    ) -> None:
        """Judge pre-clip gradient norms (off by default; S-A is the only uncensored site).

        ``site="S-B"`` reads the step-site total norm each attempt; where clipping lowered it the
        attempt is reported as a typed unavailable entry (``censored_by_clipping``).
        """
        self._register(
            MagnitudeCheck(
                self._engine.roster,
                high=high,
                low=low,
                window=window,
                min_hits=min_hits,
                site=site,
                loss_scale=self._engine.loss_scale,
                action=action,
            )
        )

    def register_no_accepted_steps_check(
        self, *, threshold_attempts: int = 20, action: Action = "warn"
    ) -> None:
        """The death-spiral watchdog: warn (``check_no_accepted_steps``) when
        ``K x threshold_attempts`` backwards pass without an accepted step (counting tier, no
        tensor read). It runs by default with these arguments; call this to change them."""
        self._register(
            NoAcceptedStepsCheck(
                self._engine.roster, threshold_attempts=threshold_attempts, action=action
            )
        )

    def register_param_scan(
        self,
        *,
        every: int = 100,
        max_fraction: float = 0.9,
        subnormal_fraction_threshold: float = 0.1,
        action: Action = "collect",
    ) -> None:
        """Run ``param_health``'s scan and rules on the parameters at S-C every ``every``
        accepted steps (first on the first)."""
        check_int("every", every, low=1, expect=">= 1 accepted steps")
        self._register(
            ParamScanCheck(
                self._engine.roster,
                every=every,
                max_fraction=max_fraction,
                subnormal_fraction_threshold=subnormal_fraction_threshold,
                action=action,
            )
        )

    def register_invariant_checks(self, *, action: Action = "warn", replica_every: int = 1) -> None:
        """The per-step invariants (on by default): ``optimizer_roster``, ``fresh_grads``,
        ``step_moves``, ``outside_writes``, and ``replicas`` every ``replica_every`` steps under
        DDP or once the loop is seen all-reducing a gradient itself (``_grad_reduce.py``). Call
        it to change their action (``"raise"`` stops the step before it writes where the site
        allows). Each module of ``torchlens_nb/checks`` (``_roster.py``, ``_fresh_grads.py``,
        ``_step_moves.py``, ``_writes.py``, ``_replicas.py``) says what its check costs and
        cannot see. FSDP2 shards get the roster and fresh-gradients checks; what cannot run on
        the set-up (``step_moves`` and ``outside_writes`` on shards, ``replicas`` in a multi-rank
        group without DDP whose loop never all-reduced a gradient) is an ``unavailable``
        entry."""
        self._check_open()
        check_int("replica_every", replica_every, low=1, expect=">= 1 steps")
        engine, declared = self._engine, self._declared
        roster = engine.roster
        roster_check = RosterCheck(roster, action=action, declared=declared)
        checks: list[Check] = [roster_check]
        fresh = FreshGradsCheck(roster, action=action, declared=declared)
        engine.observe_backward_open(fresh.on_open, before_reduce=fresh.before_reduce)
        checks.append(fresh)
        if not roster.is_sharded:
            checks += [
                StepMovesCheck(
                    roster,
                    action=action,
                    declared=declared,
                    learning_rates=functools.partial(_learning_rates, self._optimizer),
                    state_of=functools.partial(_param_state, self._optimizer),
                ),
                WritesCheck(roster, action=action, declared=declared),
            ]
        ranks, self._grad_reduce = self._ranks, None
        if (ranks.is_active and ranks.wrapper == "ddp") or ranks.watches_grad_reduce:
            replicas = ReplicaCheck(
                roster,
                every=replica_every,
                action=action,
                declared=declared,
                waiting=None if ranks.wrapper == "ddp" else _waiting_for_grad_reduce(ranks),
            )
            ranks.payload = replicas.payload
            ranks.on_payloads = replicas.compare
            checks.append(replicas)
            if ranks.watches_grad_reduce:
                self._grad_reduce = GradReduceWatch(
                    roster,
                    lambda: engine.backwards,
                    functools.partial(_arm_on_grad_reduce, ranks, replicas),
                )
        roster_check.not_running = _invariants_not_running(
            roster.is_sharded, ranks, has_replicas=ReplicaCheck.name in {c.name for c in checks}
        )
        for check in checks:
            engine.add_default(check)

    def register_stability_check(
        self,
        *,
        probe_every: int = 10,
        adam_every: int = 50,
        action: Action = "warn",
        keep: Keep = "spikes",
    ) -> None:
        """The stability check (on by default; ``torchlens_nb/checks/stability``): call it to
        change how often it probes the forward (attention logits, log Z: ``probe_every``
        attempts) and samples the upcoming update (``adam_every``), or its action. Call it
        before ``attach()``: its forward probe is installed there. Not run on FSDP2 shards.

        ``keep`` chooses the steps :meth:`spike_forensics` can explain: ``"spikes"`` (default:
        a host copy of the weights and the batch only when the loss spikes) or
        ``"every_step"`` (that copy at every step site, replacing the last; its cost is
        measured in ``benchmarks/bench_stability.py``)."""
        self._check_open()
        check_int("probe_every", probe_every, low=1, expect=">= 1 attempts")
        check_int("adam_every", adam_every, low=1, expect=">= 1 attempts")
        validate_action(action)
        if keep not in ("spikes", "every_step"):
            raise DiagnosticArgumentError(f"keep must be 'spikes' or 'every_step', got {keep!r}.")
        if self._engine.roster.is_sharded:
            return
        self._engine.add_default(
            StabilityCheck(
                self._engine.roster,
                self._optimizer,
                probe_every=probe_every,
                adam_every=adam_every,
                action=action,
                keep=keep,
            )
        )

    def expect_frozen(self, params: Any) -> None:
        """Declare parameters that must not change (a module, a tensor or an iterable of
        tensors). One written by a step is the critical finding ``frozen_param_changed``
        (``_frozen.py``); declared parameters that receive a gradient outside the optimizer are
        not reported as trained by no optimizer."""
        self._check_open()
        names = {id(p): n for n, p in self._model_params()}
        declared = declared_params(params, "expect_frozen")
        outside = [p for p in declared if id(p) not in names]
        if outside:
            raise DiagnosticArgumentError(
                f"expect_frozen got {len(outside)} tensor(s) that are not parameters of this "
                f"session's model (first: shape {tuple(outside[0].shape)}); declare the frozen "
                "part of the model the session watches, e.g. expect_frozen(model.backbone)."
            )
        for param in declared:
            self._declared.frozen[id(param)] = (names[id(param)], param)
        check = self._engine.checks.get(FrozenCheck.name)
        if isinstance(check, FrozenCheck):
            check.declare()
        else:
            self._engine.add_default(
                FrozenCheck(self._engine.roster, action="warn", declared=self._declared)
            )

    def expect_unmoved(self, params: Any) -> None:
        """Declare parameters an accepted step may leave bitwise unchanged although they have
        a gradient (masked or conditional updates): ``step_moves`` skips them."""
        self._check_open()
        self._declared.unmoved.update(map(id, declared_params(params, "expect_unmoved")))

    def expect_grads_carried_over(self) -> None:
        """Declare that the loop keeps gradients across optimizer steps on purpose:
        ``fresh_grads`` does not report them."""
        self._check_open()
        self._declared.carries_grads = True

    def _model_params(self) -> list[tuple[str, torch.Tensor]]:
        model = self._engine.roster.model_ref()
        if model is None:
            return []
        return [(n.replace("_orig_mod.", ""), p) for n, p in model.named_parameters()]

    def _check_open(self) -> None:
        if self._final is not None:
            raise DiagnosticArgumentError(
                "this session is finalized; create a new ChecksSession to register checks."
            )

    def _register(self, check: Check, sample_every: int | None = None) -> None:
        if self._final is not None:
            raise DiagnosticArgumentError(
                "this session is finalized; create a new ChecksSession to register checks."
            )
        self._engine.register(check, sample_every=sample_every)

    # ----- scope ------------------------------------------------------------------------------
    @shielded(on_interrupt=lambda self: self._roll_back())
    def attach(self) -> ChecksSession:
        """Install the hooks (S-A per parameter, S-B and S-C on the optimizer).

        A Ctrl-C while it runs (or while :meth:`detach` and the ``with`` statement's enter and
        exit run) is held until it has finished, then raised as ``KeyboardInterrupt`` with no
        hook left behind (``_interrupts.py``).

        Raises:
            DiagnosticArgumentError: the session is finalized or attached, or another attached
                session watches the same optimizer (it would stop on evidence this one never
                sees).
        """
        if self._final is not None:
            raise DiagnosticArgumentError(
                "this session is finalized (its scope exited); create a new ChecksSession."
            )
        if self._hooks is not None:
            raise DiagnosticArgumentError("this session is already attached.")
        stack = contextlib.ExitStack()
        self._hooks = stack  # first: an interrupt at any later instant is rolled back below
        self._sigint.open()
        try:
            ATTACHED.claim(self._optimizer, self._subject, stack)
            self._engine.install(stack)
            watch_wrapper_writes(self._wrapper, self._optimizer, self._wrapper_wrote, stack)
            fresh = self._engine.checks.get(FreshGradsCheck.name)
            if isinstance(fresh, FreshGradsCheck):
                fresh.install(stack)
            if self._grad_reduce is not None:
                self._grad_reduce.install(stack)
        except BaseException:
            self._roll_back()
            raise
        return self

    def _wrapper_wrote(self) -> None:
        """A wrapper's method that writes the weights returned: its writes are not outside
        the step."""
        writes = self._engine.checks.get(WritesCheck.name)
        if isinstance(writes, WritesCheck):
            writes.rebase()

    def _roll_back(self) -> None:
        """Undo an attach that is not going to be used (it raised, or Ctrl-C came during it)."""
        stack, self._hooks = self._hooks, None
        if stack is not None:
            stack.close()
        self._sigint.close()

    @shielded()
    def detach(self, exit_reason: str = "completed") -> CheckReport:
        """Remove every hook and finalize the report (idempotent); returns the final report."""
        if self._final is not None:
            return self._final
        if self._hooks is not None:
            self._hooks.close()
            self._hooks = None
        try:
            self._engine.end_step()  # a step block still open (detached from inside it)
            self._engine.close_in_flight()
            self._engine.close_open_at_exit()
            self._settle()
            self._final = self._build(is_final=True, exit_reason=exit_reason)
            if self._feed is not None:
                self._feed.finish(self._final)
        finally:
            self._sigint.close()
        return self._final

    @shielded(on_interrupt=lambda self: self._roll_back())
    def __enter__(self) -> ChecksSession:
        return self.attach()

    @shielded()
    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        reason = (
            "completed"
            if exc_type is None
            else (
                f"raised {exc_type.__name__}"
                if issubclass(exc_type, CheckViolationError)
                else f"exception {exc_type.__name__}"
            )
        )
        self.detach(reason)

    @contextlib.contextmanager
    def step(
        self,
        *,
        global_step: int | None = None,
        micro_batches: int | None = None,
        inputs: Any = None,
        loss_fn: Callable[..., Any] | None = None,
        forward_fn: Any = None,
    ) -> Iterator[None]:
        """One optimizer attempt (boundary mode): exact accepted/skipped and the caller's ids.

        Args:
            global_step: the caller's step id, carried by every record of this attempt.
            micro_batches: declared accumulation factor K (backwards in this block).
            inputs: the attempt's batch, kept so a raise can be replayed
                (``CheckViolationError.investigate()``): any object ``tl.trace`` accepts as
                inputs. With ``micro_batches=K > 1``, the list (or tuple) of the K micro-batches
                in the order their backwards run; the one whose backward first produced the
                non-finite gradient is kept on the error. The session holds a reference (no
                copy) and the RNG states at each micro-batch's start for this attempt only,
                released when the block exits (``torchlens_nb/checks/session/_replay.py``).
            loss_fn: how the replay makes the loss from the model's output:
                ``loss_fn(output)`` or ``loss_fn(output, inputs)`` (see
                ``tl.debug.investigate``); kept with ``inputs``, so ``err.investigate()`` and
                the dashboard's "Find where it was born" button need no argument.
            forward_fn: how the replay calls the model on a kept batch,
                ``forward_fn(model, batch)`` returning the output or the loss (a trainer's own
                training step; see ``tl.debug.investigate``); with ``micro_batches=K > 1`` one
                callable for all micro-batches or the list of K, one per micro-batch. None for
                ``model(*batch)`` / ``model(**batch)``.

        Example:
            >>> with session:
            ...     for i, batch in enumerate(loader):
            ...         with session.step(global_step=i, inputs=batch):
            ...             optimizer.zero_grad()
            ...             loss_fn(model(batch)).backward()
            ...             optimizer.step()
        """
        if self._hooks is None:
            raise DiagnosticArgumentError(
                "session.step() needs an attached session: use it inside `with session:`."
            )
        if global_step is not None:
            global_step = check_int(
                "global_step",
                int(global_step) if _is_integral(global_step) else global_step,
                low=0,
                expect="an int >= 0",
                hint="pass the loop's step counter (trainer.global_step), or leave it out",
            )
        if micro_batches is not None:
            check_int(
                "micro_batches",
                micro_batches,
                low=1,
                expect=">= 1",
                hint="pass the int number of backwards in this step",
            )
        if (
            micro_batches is not None
            and micro_batches > 1
            and inputs is not None
            and not (isinstance(inputs, (list, tuple)) and len(inputs) == micro_batches)
        ):
            seen = (
                f"a {type(inputs).__name__} of {len(inputs)}"
                if isinstance(inputs, (list, tuple))
                else f"a {type(inputs).__name__}"
            )
            raise DiagnosticArgumentError(
                f"with micro_batches={micro_batches}, inputs= must be the list of the "
                f"{micro_batches} micro-batches (one per backward, in order), got {seen}; pass "
                "inputs=[mb_0, ..., mb_K-1], or leave inputs out to keep no batch."
            )
        if self._engine.is_in_step:
            raise DiagnosticArgumentError("session.step() blocks do not nest.")
        if loss_fn is not None and (inputs is None or not callable(loss_fn)):
            raise DiagnosticArgumentError(
                "session.step(loss_fn=...) needs inputs= (the batch it replays) and a callable "
                f"loss_fn(output) or loss_fn(output, inputs), got {type(loss_fn).__name__}."
            )
        if forward_fn is not None and (
            inputs is None or not _is_forward_fn(forward_fn, micro_batches)
        ):
            raise DiagnosticArgumentError(
                "session.step(forward_fn=...) needs inputs= (the batch it replays) and a callable "
                "forward_fn(model, batch), or with micro_batches=K a list of K of them; got "
                f"{type(forward_fn).__name__}."
            )
        self._engine.begin_step(global_step, micro_batches, inputs, loss_fn, forward_fn)
        try:
            yield
        finally:
            self._engine.end_step()

    def record_loss(self, loss: torch.Tensor) -> None:
        """Give the open attempt's loss explicitly (it replaces the backward roots the session
        sees itself): for a loop whose backward does not go through ``torch.autograd.backward``
        or whose root is not the loss. A one-element tensor, kept on its device and read with the
        step's existing host read (no sync here).

        Raises:
            DiagnosticArgumentError: the session is not attached, or ``loss`` is not a
                one-element tensor.
        """
        if self._hooks is None:
            raise DiagnosticArgumentError(
                "session.record_loss() needs an attached session: use it inside `with session:`."
            )
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            shape = tuple(loss.shape) if isinstance(loss, torch.Tensor) else type(loss).__name__
            raise DiagnosticArgumentError(
                f"session.record_loss() needs the one-element loss tensor, got {shape}; pass "
                "the reduced loss (e.g. loss.mean())."
            )
        self._engine.record_loss(loss)

    def disable(self) -> None:
        """Stop observing: hooks stay installed but return at once; the open attempt's
        evidence is dropped, never judged half-seen."""
        if self._engine.is_enabled:
            self._paused_spans += 1
        self._engine.pause()

    def enable(self) -> None:
        """Resume observing from the next backward."""
        self._engine.resume()

    def paused(self) -> UndoScope[None]:
        """``disable()`` for the block (e.g. an evaluation pass), ``enable()`` after, also
        after a Ctrl-C at any instant (``_undo.UndoScope``; a generator context manager left
        the session disabled while a notebook kept the interrupt's traceback)."""
        return UndoScope(self._pause_until)

    def _pause_until(self, undo: Undo) -> None:
        undo.add(self.enable)
        self.disable()

    # ----- results ----------------------------------------------------------------------------
    def report(self, *, gather: bool = False) -> CheckReport:
        """The report now (final once the scope exited). One host read while attached.

        ``gather=True`` (distributed sessions; EVERY rank must call it): one ``gather_object``
        to rank 0, which returns the merged report (findings carry ``fields["rank"]``,
        attempts and skips summed, per-rank counters in the ``ranks`` table); other ranks
        return their own report.
        """
        if gather:
            if not self._ranks.is_active:
                raise DiagnosticArgumentError(
                    "report(gather=True) needs a distributed session (a DDP model in an "
                    "initialized process group, or distributed=True)."
                )
            return self._ranks.gather(self.report())
        if self._final is not None:
            return self._final
        self._settle()
        report = self._build(is_final=False, exit_reason=None)
        if self._feed is not None:
            self._feed.flush_if_dirty()
        return report

    def spike_forensics(
        self, attempt: int | None = None, *, loss_fn: LossFn | None = None
    ) -> SpikeReport:
        """What changed at the kept step against the step before it: which layer's
        activations (RMS), gradients (norm) and update (ratio) jumped, ranked, and which samples
        carry the loss (``checks/stability/_spike.py``; a worked example in
        ``docs/training_checks.md``).

        The stability check keeps the last step whose loss spiked (or, with
        ``register_stability_check(keep="every_step")``, the last step). Re-runs the model's
        forward and backward on the kept host copies (two of each); the model, the optimizer
        and the RNG stream are left as they were.

        Args:
            attempt: the attempt to explain (None: the kept one; another raises).
            loss_fn: ``loss_fn(output, *inputs)`` returning one loss per sample, for a model
                whose per-sample loss the session cannot derive from its inputs.
        """
        check = self._engine.checks.get(StabilityCheck.name)
        keeper = check.spikes if isinstance(check, StabilityCheck) else None
        return spike_forensics(
            keeper,
            attempt=attempt,
            loss_fn=loss_fn,
            off_reason="the stability check is off (stability=False, or FSDP2 shards)",
        )

    @property
    def estimated_snapshot_bytes(self) -> int:
        """Bytes of one weight snapshot (numel x element size of the checked parameters)."""
        return self._engine.roster.snapshot_bytes

    def overhead(self, repeats: int = 3) -> SessionOverhead:
        """Measure now: the scan kernel over the parameters and gradients (min of ``repeats``),
        plus the time the session's sites spent so far.

        Raises:
            DiagnosticArgumentError: ``repeats`` is not an int >= 1.
        """
        repeats = check_int("repeats", repeats, low=1, hint="the default is 3")
        roster = self._engine.roster
        params = [roster.tensors[i] for i in roster.optimized]
        tensors = params + [t.grad for t in params if t.grad is not None]
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            scan_tensors(tensors, [None] * len(tensors))
            best = min(best, time.perf_counter() - start)
        attempts = self._engine.ledger.attempts
        site_ms = self._engine.site_ms
        return SessionOverhead(
            scan_ms=best * 1e3,
            scanned_tensors=len(tensors),
            scanned_bytes=sum(t.numel() * t.element_size() for t in tensors),
            snapshot_bytes=self.estimated_snapshot_bytes,
            site_ms=site_ms,
            attempts=attempts,
            site_ms_per_attempt=site_ms / attempts if attempts else None,
        )

    def dashboard(self) -> LiveView:
        """Open the live dashboard: a panel in a notebook, a printed summary elsewhere.

        The panel updates while the loop runs (at most 10 messages per second, the last state
        always delivered) and shows the final ``CheckReport`` when the scope exits. Under DDP
        every increment also carries ``ranks``: each rank's counters from the last S-B
        agreement (they ride on that one collective: no extra communication).
        """
        if self._feed is None:
            view = open_live_view(self._build(is_final=False, exit_reason=None))
            self._engine.start_feeding()
            self._feed = DashboardFeed(view, self._live_state)
            if self._final is not None:
                self._feed.finish(self._final)
        return self._feed.view

    def _ipython_display_(self) -> None:
        """``display(session)`` in IPython: the dashboard shows itself as every panel does, with
        the card of the report beside it as an output of its own (kept current until the final
        report), so an executed notebook converted to HTML shows the card with no network;
        outside a kernel, the card."""
        view = self.dashboard()
        show = getattr(view, "_ipython_display_", None)
        if show is not None:
            show()
            return
        from IPython.display import display

        display({"text/plain": self.report().card()}, raw=True)

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        """The dashboard's bundle (front ends that do not call ``_ipython_display_``); the card
        of the report so far is the ``text/plain`` fallback."""
        view = self.dashboard()
        bundle = {"text/plain": self.report().card()}
        widget_bundle = getattr(view, "_repr_mimebundle_", None)
        if widget_bundle is not None:
            data = widget_bundle(**kwargs)
            data = data[0] if isinstance(data, tuple) else data
            bundle.update({k: v for k, v in data.items() if k != "text/plain"})
        return bundle

    def __repr__(self) -> str:
        state = (
            "final"
            if self._final is not None
            else "attached"
            if self._hooks is not None
            else "detached"
        )
        return f"<ChecksSession {self._subject}: {state}, checks={list(self._engine.checks)}>"

    # ----- internals --------------------------------------------------------------------------
    def _settle(self) -> None:
        self._engine.settle()

    def _build(self, *, is_final: bool, exit_reason: str | None) -> CheckReport:
        return self._ranks.annotate(
            build_report(
                self._engine,
                self._subject,
                is_final=is_final,
                exit_reason=exit_reason,
                paused_spans=self._paused_spans,
                replay=self._raised_replay,
            )
        )

    def _live_state(self) -> dict[str, Any]:
        state = live_state(self._engine)
        if self._ranks.live_rows:
            state["ranks"] = [dict(row) for row in self._ranks.live_rows]
        return state

    def _progress(self) -> None:
        if self._feed is not None:
            self._feed.offer()

    def _raise(self, finding: Finding, replay: Replay | None) -> None:
        """Raise ``finding``; the error's report is final (the raise is its exit reason). The
        session stays attached, so a loop that catches the error may go on, unless it was made
        with ``detach_on_raise=True``: then it detaches first."""
        reason = f"raised {CheckViolationError.__name__}"
        self._raised_replay = replay
        if self._detach_on_raise:
            report = self.detach(reason)
        else:
            report = self._build(is_final=True, exit_reason=reason)
            if self._feed is not None:
                self._feed.flush()
        raise CheckViolationError(
            f"{finding.code}: {finding.message} {finding.remedy or ''}", finding, report, replay
        )


def _is_forward_fn(forward_fn: Any, micro_batches: int | None) -> bool:
    """One callable, or a list/tuple of callables, one per declared micro-batch."""
    if isinstance(forward_fn, (list, tuple)):
        return len(forward_fn) == (micro_batches or 1) and all(callable(f) for f in forward_fn)
    return callable(forward_fn)


def _is_integral(value: Any) -> bool:
    """An integer (a numpy one included) that is not a ``bool``."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _invariants_not_running(
    is_sharded: bool, ranks: RankContext, *, has_replicas: bool
) -> list[Unavailable]:
    """The invariants that cannot run on this set-up, each named (issue 42: an FSDP2 loop and
    a hand-written all_reduce loop were reported clean without naming what did not run)."""
    missing = []
    if is_sharded:
        missing += [
            Unavailable(
                name,
                f"the parameters are FSDP2 shards (DTensor): {what} is not judged on them; "
                "run it on the unsharded model in one process to check the loop.",
                code="sharded_params",
            )
            for name, what in (
                (StepMovesCheck.name, "whether each step moves what it was given a gradient for"),
                (WritesCheck.name, "whether anything writes the weights between steps"),
            )
        ]
    if ranks.world_size > 1 and ranks.wrapper != "fsdp2" and not has_replicas:
        missing.append(
            Unavailable(
                ReplicaCheck.name,
                f"distributed=False keeps this session rank-local: whether the "
                f"{ranks.world_size} ranks' replicas stay equal is not compared; leave "
                "distributed unset (every rank running the session) to compare them.",
                code="replicas_not_compared",
            )
        )
    return missing


def _waiting_for_grad_reduce(ranks: RankContext) -> str:
    """The ``unavailable`` reason of a replica check that waits for the loop's own
    gradient all_reduce."""
    return (
        f"no torch.distributed.all_reduce of a parameter's gradient was seen in this "
        f"{ranks.world_size}-rank group, and the model is not a DistributedDataParallel "
        "module: the ranks may hold different weights on purpose (model or pipeline "
        "parallel), so whether replicas stay equal is not compared. A loop that averages "
        "the gradients itself is compared from its first all_reduce of a param.grad; one "
        "that all-reduces a flattened copy is not seen (wrap the model in "
        "DistributedDataParallel, or compare the weights across ranks yourself)."
    )


def _arm_on_grad_reduce(ranks: RankContext, replicas: ReplicaCheck, group: Any) -> None:
    """The loop all-reduced a gradient over ``group``: compare the replicas there."""
    if ranks.replicated(group):
        replicas.arm()


def _learning_rates(optimizer: torch.optim.Optimizer) -> list[Any]:
    return [group.get("lr") for group in optimizer.param_groups]


def _param_state(optimizer: torch.optim.Optimizer, param: torch.Tensor) -> Any:
    return optimizer.state.get(param, {})


def _scaler_kind(scaler: Any) -> ScalerKind:
    if scaler is UNDECLARED:
        return "undeclared"
    if scaler is None:
        return "declared_none"
    if not all(hasattr(scaler, name) for name in ("is_enabled", "get_backoff_factor", "update")):
        raise DiagnosticArgumentError(
            f"scaler must be a torch.amp.GradScaler or None, got {type(scaler).__name__}; pass "
            "scaler=None to declare that the loop runs no GradScaler."
        )
    # GradScaler(enabled=False) never creates its _scale nor its factors (get_backoff_factor
    # raises AttributeError on it): the usual GradScaler(enabled=use_amp) with AMP off.
    return "gradscaler" if scaler.is_enabled() else "disabled"
