"""Targets and loss arguments against the loss: what ``output_vs_loss`` reads beside the outputs.

* ``multi_hot_targets``: float targets with several 1s per row handed to softmax cross-entropy
  (it reads them as a probability distribution over mutually exclusive classes; multi-label
  needs BCEWithLogitsLoss).
* ``class_weight_favours_majority``: ``CrossEntropyLoss(weight=...)`` whose largest weight goes
  to the class most of the batch's labels hold (class weights exist to lift the rare classes).
* ``loss_clamped``: most examples get an exactly zero gradient from the loss while it is not
  zero (a clamp or threshold inside the loss: "clipping the loss instead of the gradients").
"""

from __future__ import annotations

from typing import Any

import torch

from ...report import Finding
from ...report._recipes_data import LossKind
from .._batches import loss_input

MAJORITY_SHARE = 0.5
"""The batch's most frequent class holds at least half its labels to count as its majority."""
WEIGHT_SKEW = 2.0
"""The majority's weight is the largest and at least 2x the smallest."""
CLAMPED_SHARE = 0.5
"""At least half the examples receive an exactly zero gradient: the loss is clamped."""


def target_findings(loss_fn: Any, kind: LossKind, targets: Any) -> list[Finding]:
    """Multi-hot targets to cross-entropy; class weights that favour the batch's majority."""
    if kind != "cross_entropy" or not isinstance(targets, torch.Tensor) or targets.dim() == 0:
        return []
    findings = []
    if targets.is_floating_point() and targets.dim() >= 2:
        rows = targets.detach().double().movedim(1, -1).reshape(-1, targets.shape[1])
        binary = bool(((rows == 0) | (rows == 1)).all())
        sums = rows.sum(dim=1)
        multi = float((sums > 1).double().mean())
        if binary and multi > 0:
            findings.append(
                Finding(
                    "multi_hot_targets",
                    "critical",
                    f"the targets are multi-hot (0/1 with several 1s in {multi:.0%} of the "
                    f"rows) and cross-entropy reads them as one distribution over mutually "
                    "exclusive classes: the softmax cannot put probability 1 on two labels.",
                    remedy="for multi-label classification use nn.BCEWithLogitsLoss (one "
                    "sigmoid per label) on the same logits and targets.",
                    fields={"multi_hot_rows": multi},
                )
            )
    weight = getattr(loss_fn, "weight", None)
    if isinstance(weight, torch.Tensor) and weight.numel() > 1 and not targets.is_floating_point():
        labels = targets.detach().reshape(-1)
        ignore = getattr(loss_fn, "ignore_index", -100)
        labels = labels[(labels != ignore) & (labels >= 0) & (labels < weight.numel())]
        if labels.numel():
            counts = torch.bincount(labels, minlength=weight.numel())
            majority = int(counts.argmax())
            share = float(counts[majority]) / labels.numel()
            w = weight.detach().double()
            if (
                share >= MAJORITY_SHARE
                and int(w.argmax()) == majority
                and float(w.max()) >= WEIGHT_SKEW * float(w.min())
            ):
                findings.append(
                    Finding(
                        "class_weight_favours_majority",
                        "warning",
                        f"the class weights favour class {majority}, which holds {share:.0%} "
                        f"of the batch's labels (weight {float(w[majority]):.3g} vs "
                        f"{float(w.min()):.3g} for the rarest-weighted class): the weighting "
                        "pushes the model further toward the majority.",
                        remedy="weight classes by inverse frequency (e.g. max_count / count), so "
                        "the rare classes get the large weights.",
                        fields={"majority": majority, "share": share, "weights": w.tolist()},
                    )
                )
    return findings


def clamp_finding(loss_fn: Any, raw: Any, output: torch.Tensor, targets: Any) -> list[Finding]:
    """``loss_clamped`` when most examples get an exactly zero gradient from a non-zero loss
    (one loss and one autograd.grad with respect to a detached copy of the outputs)."""
    if isinstance(raw, (tuple, list)) or not output.is_floating_point() or output.dim() == 0:
        return []
    if output.shape[0] < 2:
        return []
    leaf = output.detach().clone().requires_grad_(True)
    with torch.enable_grad():
        try:
            loss = loss_fn(loss_input(leaf), targets)
        except Exception:  # the check cannot apply to this loss: no finding
            return []
        if not isinstance(loss, torch.Tensor) or loss.grad_fn is None or loss.numel() != 1:
            return []
        (grad,) = torch.autograd.grad(loss, leaf, allow_unused=True)
    if grad is None or float(loss.detach()) == 0.0:
        return []
    per_example = grad.detach().reshape(grad.shape[0], -1).abs().sum(dim=1)
    ignored = _ignored_examples(loss_fn, targets, grad.shape[0])
    judged = per_example[~ignored] if ignored is not None else per_example
    if judged.numel() == 0:
        return []
    share = float((judged == 0).double().mean())
    if share < CLAMPED_SHARE:
        return []
    return [
        Finding(
            "loss_clamped",
            "critical",
            f"{share:.0%} of the examples get an exactly zero gradient although the loss is "
            f"{float(loss.detach()):.4g}: something inside the loss (a clamp, a threshold) cuts "
            "their gradient, so they cannot be learnt.",
            remedy="clip gradients (torch.nn.utils.clip_grad_norm_) instead of clamping the "
            "loss; remove the clamp from the loss.",
            fields={"zero_gradient_share": share},
        )
    ]


def _ignored_examples(loss_fn: Any, targets: Any, n: int) -> torch.Tensor | None:
    """Examples whose every target is the loss's ``ignore_index`` (their gradient is zero by
    design), or None."""
    ignore = getattr(loss_fn, "ignore_index", None)
    if ignore is None or not isinstance(targets, torch.Tensor) or targets.is_floating_point():
        return None
    if targets.dim() == 0 or targets.shape[0] != n:
        return None
    return (targets.reshape(n, -1) == ignore).all(dim=1)
