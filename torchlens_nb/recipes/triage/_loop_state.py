"""What the caller's training loop left on the objects handed to triage, and what it means.

Triage trains copies with fresh optimizers, so the loop's own state would otherwise be
invisible. Read (never changed) from the caller's model and optimizer before anything runs
(:func:`read_held`), then judged against one fresh gradient of the working copy
(:func:`loop_findings`):

* ``stale_grad``: the ``.grad`` the loop left is ``STALE_RATIO`` times or more the norm of one
  fresh gradient on the batch: gradients were summed over steps (no ``zero_grad()``).
* ``zero_grad_before_step``: every moment buffer the optimizer keeps (Adam's ``exp_avg``, SGD's
  ``momentum_buffer``) is exactly zero after steps were taken: each step saw zero gradients
  (``zero_grad()`` between ``backward()`` and ``step()``).
* ``lr_decayed``: a scheduler attached to the optimizer (its groups carry ``initial_lr``) has
  taken the lr to ``DECAYED_FRACTION`` of the one chosen or below after steps were taken (a
  StepLR stepped per batch, a warmup never stepped). Before any step a lower lr is a warmup's
  first value: a note.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ...report import Finding
from .._batches import call_model, loss_input, split_batch
from .._model_state import preserved
from ._optimizer_spec import OptimizerSpec

STALE_RATIO = 2.0
"""Held ``.grad`` norm over one fresh gradient's norm from which the gradients were summed over
steps. Measured on the public zoo's development half (tests/triage_public/development.py):
loops without ``zero_grad()`` handed over after 5 steps hold 3.0-3.3x; healthy loops' last
gradient (taken on another batch) 0.87-1.19x."""
DECAYED_FRACTION = 0.05
"""An lr at 5% or less of the scheduler's ``initial_lr`` after steps: decayed 20x or more (a
StepLR(30, 0.1) stepped per batch for 100 batches leaves 0.1%)."""


@dataclass(frozen=True)
class HeldState:
    """Numbers read from the caller's model and optimizer (no tensors kept)."""

    grad_norms: dict[str, float]
    """Parameter name -> norm of the ``.grad`` it holds (those holding one)."""
    steps_taken: bool
    """The optimizer holds per-parameter state (it has stepped)."""
    moments_all_zero: bool
    """Every moment buffer it holds is exactly zero (and there is at least one)."""
    groups: tuple[tuple[float, float | None], ...]
    """Per group: (lr, initial_lr or None)."""


def read_held(model: nn.Module, spec: OptimizerSpec | None) -> HeldState:
    """The loop state of ``model`` and the optimizer instance in ``spec`` (read only)."""
    grads = {
        name: float(p.grad.detach().float().norm())
        for name, p in model.named_parameters()
        if p.grad is not None
    }
    optimizer = spec.instance if spec is not None else None
    if optimizer is None:
        return HeldState(grads, False, False, ())
    moments = [
        value
        for state in optimizer.state.values()
        for key, value in state.items()
        if key in ("exp_avg", "momentum_buffer") and isinstance(value, torch.Tensor)
    ]
    groups = tuple(
        (
            float(g.get("lr", 0.0) or 0.0),
            float(g["initial_lr"]) if g.get("initial_lr") is not None else None,
        )
        for g in optimizer.param_groups
    )
    return HeldState(
        grads,
        bool(optimizer.state),
        bool(moments) and all(not bool(m.any()) for m in moments),
        groups,
    )


def _fresh_grad_norm(model: nn.Module, batch: Any, loss_fn: Any) -> float | None:
    """Norm of one gradient of ``model`` (the working copy) on ``batch``, via autograd.grad:
    no ``.grad`` is written; modes and buffers are restored."""
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        return None
    inputs, targets = split_batch(batch)
    with preserved(model, mode="train"):
        loss = loss_fn(loss_input(call_model(model, inputs)), targets)
        if not isinstance(loss, torch.Tensor) or loss.grad_fn is None:
            return None
        grads = torch.autograd.grad(loss, params, allow_unused=True)
    total = sum(float(g.detach().float().norm()) ** 2 for g in grads if g is not None)
    return math.sqrt(total)


def loop_findings(held: HeldState, model: nn.Module, batch: Any, loss_fn: Any) -> list[Finding]:
    """The findings the loop state supports; ``model`` is the working copy (one forward and
    backward on it when ``.grad`` was held)."""
    findings: list[Finding] = []
    total = math.sqrt(sum(v * v for v in held.grad_norms.values()))
    if held.steps_taken and held.moments_all_zero and total == 0.0 and held.grad_norms:
        findings.append(
            Finding(
                "zero_grad_before_step",
                "critical",
                "the optimizer has stepped, yet every moment buffer it keeps is exactly zero "
                "and every .grad is zero: each step saw zero gradients, so nothing trained "
                "(zero_grad() between backward() and step()?).",
                remedy="order the loop optimizer.zero_grad(); loss.backward(); optimizer.step().",
                fields={"grad_norm": 0.0},
            )
        )
    elif total > 0.0:
        fresh = _fresh_grad_norm(model, batch, loss_fn)
        if fresh is not None and fresh > 0 and total / fresh >= STALE_RATIO:
            findings.append(
                Finding(
                    "stale_grad",
                    "warning",
                    f"the .grad your loop left has norm {total:.3g}, {total / fresh:.1f}x one "
                    f"fresh gradient on this batch ({fresh:.3g}): gradients are being summed "
                    "over steps (optimizer.zero_grad() is not called each step).",
                    remedy="call optimizer.zero_grad() before each loss.backward() (or "
                    "divide the loss when you accumulate on purpose).",
                    fields={"held_norm": total, "fresh_norm": fresh, "ratio": total / fresh},
                )
            )
    findings += _lr_findings(held)
    return findings


def _lr_findings(held: HeldState) -> list[Finding]:
    decayed = [
        (i, lr, initial)
        for i, (lr, initial) in enumerate(held.groups)
        if initial is not None and initial > 0 and lr < initial
    ]
    if not decayed:
        return []
    i, lr, initial = min(decayed, key=lambda d: d[1] / d[2])
    share = lr / initial
    facts = {"group": i, "lr": lr, "initial_lr": initial, "fraction": share}
    if not held.steps_taken:
        return [
            Finding(
                "lr_below_initial",
                "info",
                f"group {i}'s lr is {lr:.3g}, below the {initial:.3g} its scheduler started "
                "from, before any step: a warmup's first value (it rises as the scheduler "
                "steps).",
                fields=facts,
            )
        ]
    if share > DECAYED_FRACTION:
        return [
            Finding(
                "lr_below_initial",
                "info",
                f"group {i}'s lr is {lr:.3g}, {share:.0%} of the {initial:.3g} its scheduler "
                "started from.",
                fields=facts,
            )
        ]
    return [
        Finding(
            "lr_decayed",
            "warning",
            f"group {i}'s lr is {lr:.3g}, {share:.2g}x the {initial:.3g} its scheduler started "
            "from, after steps were taken: at this lr the model barely moves (a per-epoch "
            "scheduler stepped per batch, or a warmup that is never stepped).",
            remedy="step epoch schedulers (StepLR, MultiStepLR, ExponentialLR) once per epoch, "
            "call scheduler.step() after optimizer.step() each step for per-step schedules, and "
            "check the lr you log.",
            fields=facts,
        )
    ]
