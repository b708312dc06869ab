"""The update Adam is about to take, computed at the step site from its state and the gradient.

At S-B the optimizer has not written yet, so its next update is known exactly from what it will
read: for Adam / AdamW (``exp_avg``, ``exp_avg_sq``, ``step`` in its state, torch's
single-tensor formula) ``m' = b1 m + (1 - b1) g``, ``v' = b2 v + (1 - b2) g^2`` and
``u = lr * (m' / (1 - b1^t)) / (sqrt(v' / (1 - b2^t)) + eps)`` (decoupled weight decay and
amsgrad left out: they change the size by ``lr * wd`` of the weight, or bound ``v'`` from below).
Before the first step (no state) ``m' / sqrt(v')`` is ``sign(g)`` for every element with a
gradient: the first update moves each such element by ``lr``, whatever the gradient's size.
SGD moves by ``lr * g`` (``lr * (mu * buf + g)`` with momentum; dampening and Nesterov left
out).

The result is one update/weight ratio per parameter tensor (``||u|| / ||w||``), left on the
device, estimated on at most :data:`SAMPLE_ELEMENTS` evenly strided elements of each tensor (the
same elements of the weight, the gradient and both moments): the full formula over every
element costs 2.5x an AdamW step (278 ms against 111 ms on 12M parameters, one CPU thread),
which sampled 1 step in 50 would be about 5% of a GPT-2 small step; strided, the cost is that of
indexing a few thousand elements per tensor.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

ADAM_KEYS = ("exp_avg", "exp_avg_sq")

SAMPLE_ELEMENTS = 4096
"""Elements per tensor the update is estimated on (every element of a smaller tensor)."""


def _strided(tensor: torch.Tensor, stride: int) -> torch.Tensor:
    flat = tensor.detach().reshape(-1)
    return (flat[::stride] if stride > 1 else flat).float()


@dataclass
class Upcoming:
    """Per parameter with a gradient (in ``params``' order), device 1-element values."""

    positions: list[int] = field(default_factory=list)
    """Index of each parameter in ``params``."""
    moved: list[torch.Tensor] = field(default_factory=list)
    """``||u||`` of the update about to be applied."""
    weights: list[torch.Tensor] = field(default_factory=list)
    """``||w||``."""
    matrices: list[bool] = field(default_factory=list)
    """2-D or more: a weight, not a bias or a norm's gain."""
    surprise: list[torch.Tensor] = field(default_factory=list)
    """How far Adam's second moment lags the gradient (Adam with state; NaN otherwise): the RMS
    of ``g / sqrt(v_hat')``, ``v_hat'`` the bias-corrected second moment this step writes
    (Wortsman et al. 2023, Stable and low-precision training for large-scale vision-language
    models, section 3.4: loss spikes follow its spikes by 1-8 iterations; StableAdamW clips the
    update by it). About 1 in steady training; at most ``sqrt((1 - b2^t) / (1 - b2))`` (4.5 at
    b2 0.95), reached when this gradient dwarfs every earlier one, so a tensor's first steps
    cannot reach a high value. Against the second moment before the step instead, one element
    whose gradient was zero so far would dominate the mean (it reached 2.5e5 at attempt 10 of
    a healthy run, ``tests/stability``)."""


def upcoming_ratios(
    optimizer: torch.optim.Optimizer, params: list[torch.Tensor]
) -> Upcoming | None:
    """The update the optimizer is about to apply, per parameter with a gradient (see
    :class:`Upcoming`). None for an optimizer this does not model (not Adam-like and not SGD)."""
    groups = {id(p): g for g in optimizer.param_groups for p in g["params"]}
    upcoming = Upcoming()
    with torch.no_grad():
        for position, param in enumerate(params):
            group = groups.get(id(param))
            grad = param.grad
            if group is None or grad is None or grad.is_sparse:
                continue
            stride = max(1, param.numel() // SAMPLE_ELEMENTS)
            update = _update(optimizer, group, param, grad, stride)
            if update is None:
                return None
            upcoming.positions.append(position)
            upcoming.moved.append(torch.linalg.vector_norm(update).reshape(1))
            upcoming.weights.append(torch.linalg.vector_norm(_strided(param, stride)).reshape(1))
            upcoming.matrices.append(param.dim() >= 2)
            upcoming.surprise.append(_surprise(optimizer, group, param, grad, stride))
    return upcoming


def _surprise(
    optimizer: torch.optim.Optimizer,
    group: dict[str, Any],
    param: torch.Tensor,
    grad: torch.Tensor,
    stride: int,
) -> torch.Tensor:
    state = optimizer.state.get(param, {})
    betas = group.get("betas")
    if betas is None or not all(k in state for k in ADAM_KEYS):
        return torch.full((1,), math.nan, device=grad.device)
    b2 = float(betas[1])
    step = float(state.get("step", 0)) + 1
    g2 = _strided(grad, stride).square()
    v_hat = (_strided(state["exp_avg_sq"], stride) * b2 + g2 * (1 - b2)) / (1 - b2**step)
    eps = float(group["eps"])
    return (g2 / v_hat.clamp_min(eps * eps)).mean().sqrt().reshape(1)


def _update(
    optimizer: torch.optim.Optimizer,
    group: dict[str, Any],
    param: torch.Tensor,
    grad: torch.Tensor,
    stride: int,
) -> torch.Tensor | None:
    lr = float(group["lr"])
    state = optimizer.state.get(param, {})
    betas = group.get("betas")
    if betas is not None and "eps" in group:
        b1, b2 = float(betas[0]), float(betas[1])
        g = _strided(grad, stride)
        if not all(k in state for k in ADAM_KEYS):
            return lr * torch.sign(g)
        m = _strided(state["exp_avg"], stride) * b1 + g * (1 - b1)
        v = _strided(state["exp_avg_sq"], stride) * b2 + g.square() * (1 - b2)
        return adam_step(m, v, float(state.get("step", 0)) + 1, group)
    if "momentum" in group:
        g = _strided(grad, stride)
        buffer = state.get("momentum_buffer")
        if buffer is None or not float(group["momentum"]):
            return g * lr
        return (_strided(buffer, stride) * float(group["momentum"]) + g) * lr
    return None


def adam_step(m: torch.Tensor, v: torch.Tensor, step: float, group: dict[str, Any]) -> torch.Tensor:
    """Adam's update from its moments after ``step`` steps: ``lr * m_hat / (sqrt(v_hat) +
    eps)`` with the bias corrections (Kingma & Ba 2015), out of place (``m`` and ``v`` may be
    the optimizer's own state)."""
    b1, b2 = (float(b) for b in group["betas"])
    denom = (v / (1 - b2**step)).sqrt() + float(group["eps"])
    return m / denom * (float(group["lr"]) / (1 - b1**step))


def ratio(moved: float, weight: float) -> float | None:
    """``moved / weight``, None when the weight's norm is zero or either is not finite."""
    if weight == 0 or not (math.isfinite(moved) and math.isfinite(weight)):
        return None
    return moved / weight
