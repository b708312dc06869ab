"""``overfit_one_batch``: can a copy of the model memorise one batch?

The recipe trains a deep copy with Adam (the caller's model, its ``.grad`` and the global RNG
streams are untouched: the run sits inside ``tl.debug.preserved_rng_state``), and streams
interim reports to a live chart at most ``1 / LIVE_INTERVAL_S`` times a second; the final
report is always pushed, so the chart ends on the exact final state.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

from ..._validate import MAX_REPEATS, check_int, check_number
from ...debug import preserved_rng_state
from ...debug._isolation import keeps_torch_switches
from ...errors import DiagnosticArgumentError
from ...report import Finding, Unavailable
from ...report._recipes_data import recipe_status
from ...report._recipes_training import OverfitReport, OverfitVerdict
from .._batches import (
    call_model,
    check_loss_fn,
    check_loss_follows_outputs,
    check_model,
    first_batch,
    loss_input,
    loss_value,
    model_device,
    primary_output,
    split_batch,
    to_device,
    trainable_copy,
)
from .._live import live_sink
from ._planned import StepPlan, planned_steps

ZERO_FRACTION = 0.05
"""The loss counts as "about zero" at 5% of its initial value. Measured (tests/recipes/
test_overfit.py): an 8-32-4 MLP on 16 examples reaches 0.3% of its initial cross-entropy in
200 Adam steps at lr=1e-2; a model whose hidden layer is frozen at zero stays above 90%."""
FALLING_FRACTION = 0.5
"""Below half the initial loss (but above ~zero) the loss is still falling: more steps needed."""
LIVE_INTERVAL_S = 0.1
"""Interim reports reach the live chart at most every 0.1 s (10 Hz): a traitlet push re-sends
the whole series, and a browser redraw faster than that only costs the kernel time."""


class _Throttle:
    """Sends a lazily built report to every sink at most once per ``LIVE_INTERVAL_S``."""

    def __init__(self, sinks: list[Callable[[OverfitReport], None]]) -> None:
        self._sinks = sinks
        self._last = -math.inf

    def offer(self, build: Callable[[], OverfitReport]) -> None:
        now = time.monotonic()
        if now - self._last >= LIVE_INTERVAL_S:
            self._last = now
            self.flush(build())

    def flush(self, report: OverfitReport) -> None:
        for sink in self._sinks:
            sink(report)


@keeps_torch_switches
def overfit_one_batch(
    model: nn.Module,
    batch: Any,
    loss_fn: Any,
    *,
    steps: int = 200,
    lr: float = 1e-3,
    live: bool | None = None,
    on_update: Callable[[OverfitReport], None] | None = None,
) -> OverfitReport:
    """Train a deep copy of ``model`` on one batch and say whether the loss approaches zero.

    A model that cannot memorise one batch has an architecture or gradient problem; no amount
    of data will fix it. Each step: ``zero_grad``, forward in train mode with dropout off (the
    question is capacity, not noise: a healthy 5-layer MLP with dropout 0.3 plateaus above ~0
    with it on), loss, backward, total gradient norm, Adam step. Verdicts: ``memorised`` (final loss <= ``ZERO_FRACTION`` x initial),
    ``decreasing`` (<= ``FALLING_FRACTION`` x initial: run more steps or raise ``lr``; warning),
    ``stuck`` (critical), ``diverged`` (non-finite, or final loss above initial; critical).
    A zero gradient norm at the first step is reported as critical on its own.

    Args:
        model: copied with ``copy.deepcopy``; the original, its ``.grad``, its train/eval flags
            and the global RNG state stay bitwise as they were.
        batch: ``(inputs, targets)``, a dict batch, or a loader (its first batch).
        loss_fn: ``loss_fn(outputs, targets)``.
        steps: optimizer steps (stops early on a non-finite loss).
        lr: Adam learning rate.
        live: draw a live loss / grad-norm chart in the notebook cell while training (None:
            when running inside a Jupyter kernel); it ends on the final report, which is the
            cell's one panel: the returned report displays as nothing in that cell (as its
            last expression too) and as usual in a later one.
        on_update: also called with each interim report (status ``running``) and the final one.

    Returns:
        An :class:`OverfitReport` with per-step ``losses`` and ``grad_norms`` and a ``figure()``.

    Cost: ``steps`` forward+backward passes of the model on the batch, one host sync per step.
    """
    if on_update is not None and not callable(on_update):
        raise DiagnosticArgumentError(
            f"on_update must be a callable taking each interim report, or None, got "
            f"{type(on_update).__name__}."
        )
    sinks = [s for s in (on_update, live_sink(live)) if s is not None]
    report, _ = memorise_batch(model, batch, loss_fn, steps=steps, lr=lr, sinks=sinks)
    return report


def memorise_batch(
    model: nn.Module,
    batch: Any,
    loss_fn: Any,
    *,
    steps: int,
    lr: float,
    sinks: list[Callable[[OverfitReport], None]],
    make_optimizer: Callable[[list[torch.Tensor]], torch.optim.Optimizer] | None = None,
    floor: float | None = 0.0,
    label: str | None = None,
    plan: StepPlan | None = None,
    watch: Callable[[nn.Module, torch.optim.Optimizer], contextlib.AbstractContextManager[Any]]
    | None = None,
) -> tuple[OverfitReport, nn.Module]:
    """:func:`overfit_one_batch` (validation included) returning the trained copy too, for
    checks that need a model that has learnt the batch (``tl.recipes.triage`` runs
    random_input_test on it: an untrained model scores chance on real data and noise alike).

    ``make_optimizer(params)`` replaces Adam at ``lr`` (triage trains with the caller's own
    optimizer first; ``label`` names it in the report). ``floor`` is the lowest value the loss
    can take (label smoothing's entropy; 0 for a plain loss): the fractions of
    :func:`_verdict` are measured above it. None: the floor is unknown (a custom loss), so a
    loss that keeps falling without reaching 5% of its start is not judged (info). ``plan``
    may cut ``steps`` once the second step is timed (:func:`planned_steps`). ``watch(copy,
    optimizer)``: a context the training loop runs in (triage records update ratios there)."""
    check_model(model)
    check_loss_fn(loss_fn)
    check_int("steps", steps, low=1, high=MAX_REPEATS, hint="the default is 200")
    check_number("lr", lr, low=0, low_open=True)
    inputs, targets = split_batch(first_batch(batch))
    if not any(p.requires_grad for p in model.parameters()):
        raise DiagnosticArgumentError(
            "the model has no parameter with requires_grad=True; there is nothing to train."
        )
    clone = trainable_copy(model, "overfit_one_batch")
    throttle = _Throttle(sinks) if sinks else None
    device = model_device(clone)
    inputs, targets = to_device(inputs, device), to_device(targets, device)
    losses: list[float] = []
    norms: list[float] = []
    started = time.monotonic()
    with preserved_rng_state(), _final_on_raise(throttle, model, losses, norms, steps, lr, started):
        clone.train()
        for module in clone.modules():  # memorising asks about capacity, not dropout noise
            if isinstance(module, nn.modules.dropout._DropoutNd):
                module.eval()
        params: list[torch.Tensor] = [p for p in clone.parameters() if p.requires_grad]
        optimizer = make_optimizer(params) if make_optimizer else torch.optim.Adam(params, lr=lr)
        watching = watch(clone, optimizer) if watch is not None else contextlib.nullcontext()
        with watching:
            for _ in planned_steps(steps, plan):
                optimizer.zero_grad(set_to_none=True)
                raw = call_model(clone, inputs)
                output = primary_output(raw)
                loss = loss_fn(loss_input(raw), targets)
                value = loss_value(loss)
                check_loss_follows_outputs(loss, output)
                losses.append(value)
                if not math.isfinite(value):
                    norms.append(float("nan"))
                    break
                if loss.grad_fn is None:  # nothing trainable reaches the loss
                    norms.append(0.0)
                    break
                loss.backward()
                grads = [p.grad for p in params if p.grad is not None]
                norms.append(float(torch.nn.utils.get_total_norm(grads)) if grads else 0.0)
                optimizer.step()
                if throttle is not None:
                    throttle.offer(
                        lambda: _report(model, losses, norms, steps, lr, started, running=True)
                    )
    report = _report(
        model, losses, norms, steps, lr, started, running=False, floor=floor, label=label
    )
    if throttle is not None:
        throttle.flush(report)
    return report, clone


@contextlib.contextmanager
def _final_on_raise(
    throttle: _Throttle | None,
    model: nn.Module,
    losses: list[float],
    norms: list[float],
    steps: int,
    lr: float,
    started: float,
) -> Iterator[None]:
    """On any exception (``loss_fn`` raising, Ctrl-C) push a ``stopped`` final report to the
    sinks, so a live panel ends in a final state instead of "running", then re-raise."""
    try:
        yield
    except BaseException as error:
        if throttle is not None:
            throttle.flush(_stopped_report(model, losses, norms, steps, lr, started, error))
        raise


def _stopped_report(
    model: nn.Module,
    losses: list[float],
    norms: list[float],
    steps: int,
    lr: float,
    started: float,
    error: BaseException,
) -> OverfitReport:
    """The final report of a run that an exception ended at step ``len(losses) + 1``."""
    how = (
        "was interrupted (KeyboardInterrupt)"
        if isinstance(error, KeyboardInterrupt)
        else f"raised {type(error).__name__}: {error}"
    )
    step = len(losses) + (0 if len(norms) < len(losses) else 1)
    loss = f"; the last loss was {losses[-1]:.4g} (from {losses[0]:.4g})" if losses else ""
    return OverfitReport(
        subject=f"{type(model).__name__} on one batch",
        status="inconclusive",
        lead=f"stopped at step {step}/{steps}: the step {how}{loss}.",
        unavailable=(
            Unavailable(
                "overfit verdict",
                f"training stopped at step {step} of {steps} before a verdict; fix the error "
                "and re-run the cell.",
                code="stopped",
            ),
        ),
        verdict="stopped",
        steps=steps,
        lr=lr,
        losses=tuple(losses),
        grad_norms=tuple(norms),
        target_loss=ZERO_FRACTION * losses[0] if losses else math.nan,
        elapsed_s=time.monotonic() - started,
        disclosures=(
            "trained a deep copy with Adam in train mode; the caller's model is untouched",
        ),
    )


UNKNOWN_FLOOR_FALL = 0.98
"""With an unknown floor, a loss at or below 98% of its start has moved: "decreasing" (a
pytorch/examples VAE's summed BCE + KLD can fall only to its targets' entropy, ~72% of its
start, and fell 6% in 200 steps)."""
STILL_FALLING = 0.05
"""A decreasing loss whose last fifth of the run still took 5% of the way to its floor is
still falling (more steps would go on): a hint, not a warning."""


def _verdict(losses: list[float], floor: float | None = 0.0) -> OverfitVerdict:
    """Memorised at ``ZERO_FRACTION`` of the start above ``floor``, decreasing at
    ``FALLING_FRACTION`` (``UNKNOWN_FLOOR_FALL`` of the start when the floor is unknown)."""
    initial, final = losses[0], losses[-1]
    if not all(math.isfinite(v) for v in losses) or final > initial:
        return "diverged"
    base = floor or 0.0
    if final - base <= ZERO_FRACTION * (initial - base):
        return "memorised"
    if floor is None:
        return "decreasing" if final <= UNKNOWN_FLOOR_FALL * initial else "stuck"
    return "decreasing" if final - base <= FALLING_FRACTION * (initial - base) else "stuck"


def _report(
    model: nn.Module,
    losses: list[float],
    norms: list[float],
    steps: int,
    lr: float,
    started: float,
    *,
    running: bool,
    floor: float | None = 0.0,
    label: str | None = None,
) -> OverfitReport:
    initial, final = losses[0], losses[-1]
    verdict: OverfitVerdict = "running" if running else _verdict(losses, floor)
    facts = {
        "initial_loss": initial,
        "final_loss": final,
        "steps_run": len(losses),
        "zero_fraction": ZERO_FRACTION,
        "floor": floor,
        "optimizer": label or f"Adam lr={lr:g}",
    }
    falling = _falling(losses, floor)
    findings = (
        []
        if running
        else _findings(verdict, initial, final, len(losses), lr, facts, floor, falling)
    )
    if norms and norms[0] == 0.0:
        findings.append(
            Finding(
                "no_gradient",
                "critical",
                "the gradient norm is exactly 0 at the first step: no gradient reaches the "
                "parameters.",
                remedy="run tl.recipes.gradient_flow(model, batch, loss_fn) to find "
                "where the gradient stops (a detach, an integer cast, a dead ReLU layer).",
                fields={"grad_norm": 0.0},
            )
        )
    status = "running" if running else recipe_status(findings)
    lead = (
        f"step {len(losses)}/{steps}: loss {final:.4g} (from {initial:.4g})"
        if running
        else f"{_lead_word(verdict, findings)}: loss {initial:.4g} -> {final:.4g} in "
        f"{len(losses)} steps."
    )
    return OverfitReport(
        subject=f"{type(model).__name__} on one batch",
        status=status,
        lead=lead,
        findings=tuple(findings),
        verdict=verdict,
        steps=steps,
        lr=lr,
        losses=tuple(losses),
        grad_norms=tuple(norms),
        target_loss=ZERO_FRACTION * initial,
        elapsed_s=time.monotonic() - started,
        disclosures=(
            f"trained a deep copy with {label or 'Adam'} in train mode; the caller's model is "
            "untouched",
        ),
    )


def _lead_word(verdict: OverfitVerdict, findings: list[Finding]) -> str:
    """The verdict, or what a hint says instead of it (a loss still falling is no warning)."""
    if any(f.code == "loss_still_falling" for f in findings):
        return "still falling"
    if any(f.code == "loss_floor_unknown" for f in findings):
        return "falling toward an unknown floor"
    return verdict


def _falling(losses: list[float], floor: float | None) -> bool:
    """Whether the last fifth of the run still moved the loss ``STILL_FALLING`` of the way
    from its start to its floor."""
    if len(losses) < 5:
        return False
    base = floor or 0.0
    earlier = losses[-max(2, len(losses) // 5)]
    return earlier - losses[-1] >= STILL_FALLING * (losses[0] - base)


def _findings(
    verdict: OverfitVerdict,
    initial: float,
    final: float,
    steps_run: int,
    lr: float,
    facts: dict[str, Any],
    floor: float | None = 0.0,
    falling: bool = False,
) -> list[Finding]:
    if verdict == "decreasing" and floor is None:
        return [
            Finding(
                "loss_floor_unknown",
                "info",
                f"the loss fell from {initial:.4g} to {final:.4g} in {steps_run} steps; the "
                "lowest value this loss can reach is unknown (a custom loss), so whether that "
                "is memorising the batch cannot be told.",
                fields=facts,
            )
        ]
    if verdict == "memorised":
        return [
            Finding(
                "memorised",
                "info",
                f"the loss fell to {100 * final / initial:.2g}% of its initial value"
                + (f" (its floor is {floor:.4g})" if floor else "")
                + ": the model can memorise one batch.",
                fields=facts,
            )
        ]
    if verdict == "decreasing" and falling:
        return [
            Finding(
                "loss_still_falling",
                "info",
                f"the loss fell from {initial:.4g} to {final:.4g} in {steps_run} steps and was "
                "still falling at the end: more steps (or a larger lr) would take it further; "
                "not a sign of a bug by itself.",
                fields=facts,
            )
        ]
    if verdict == "decreasing":
        return [
            Finding(
                "loss_not_near_zero",
                "warning",
                f"the loss fell from {initial:.4g} to {final:.4g} but not to about its floor "
                f"{floor or 0.0:.4g} (<= {(floor or 0.0) + ZERO_FRACTION * (initial - (floor or 0.0)):.3g}) "
                f"in {steps_run} steps.",
                remedy=f"run more steps or raise lr (now {lr:g}); if it plateaus, the model lacks "
                "capacity or a layer blocks the gradient.",
                fields=facts,
            )
        ]
    if verdict == "stuck":
        return [
            Finding(
                "cannot_overfit",
                "critical",
                f"the loss stayed at {final:.4g} (from {initial:.4g}) over {steps_run} steps: the "
                "model cannot even memorise one batch.",
                remedy="an architecture or gradient problem: run tl.recipes.gradient_flow, check "
                "that the output layer is connected and the loss matches the outputs.",
                fields=facts,
            )
        ]
    return [
        Finding(
            "loss_diverged",
            "critical",
            f"the loss went from {initial:.4g} to {final:.4g} over {steps_run} steps.",
            remedy=f"lower lr (now {lr:g}), check for log(0) / division by zero in the loss, and "
            "clip gradients with clip_grad_norm_(..., error_if_nonfinite=True).",
            fields=facts,
        )
    ]
