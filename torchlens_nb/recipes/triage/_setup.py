"""``training_setup``: read the model and optimizer triage was handed, before anything runs.

Triage trains copies in train mode with rebuilt optimizers, so what the caller's own objects
say would otherwise be invisible: a model left in ``eval()`` (dropout off, BatchNorm on running
statistics), a layer frozen with ``requires_grad=False`` that the optimizer still holds, a
trainable layer no param group holds, and weight decay on normalisation weights and biases
(the usual no-decay grouping keeps them at 0). Reads attributes only: no forward, no step.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ...report import Finding, Table, Unavailable
from ...report._recipes_data import recipe_status, worst_finding
from ...report._triage import SetupReport
from ._optimizer_spec import OptimizerSpec

MODE_DEPENDENT = (nn.modules.dropout._DropoutNd, nn.modules.batchnorm._BatchNorm)
"""Modules whose forward differs between train and eval mode."""
NORMS = (
    nn.modules.batchnorm._BatchNorm,
    nn.LayerNorm,
    nn.GroupNorm,
    nn.modules.instancenorm._InstanceNorm,
    nn.RMSNorm,
)
"""Normalisation layers whose weights and biases are conventionally not decayed."""


DECAY_PULL_WARN = 2e-5
"""Weight decay on normalisation parameters is a warning when it pulls them toward 0 by at
least 2e-5 of their value per step (18% over 10,000 steps): AdamW 0.1 at lr 5e-4 (5e-5), Adam's
coupled L2 at 0.5 (the step itself, ~lr). AdamW's decoupled 0.01 at 5e-4 (5e-6, 0.5% over
1,000 steps) and torchvision's SGD 1e-4 at lr 0.1 (1e-5) are notes."""
SGD_PULL_SCALE = 0.1
"""SGD's own step on a normalisation gain is ~10x its decay step at published recipes' decay
(1e-4 to 5e-4: torchvision, kuangliu/pytorch-cifar's ResNets at lr 0.1 and 5e-4 reach 95% on
CIFAR-10 with BatchNorm decayed), unlike AdamW whose step is ~lr whatever the gradient: SGD's
pull counts a tenth (lr 0.1 x 5e-4 -> 5e-6, a note; x 5e-3 -> 5e-5, a warning)."""
ADAPTIVE = (
    torch.optim.Adam,
    torch.optim.Adamax,
    torch.optim.NAdam,
    torch.optim.RAdam,
    torch.optim.RMSprop,
    torch.optim.Adagrad,
    torch.optim.Adadelta,
)
"""Optimizers that divide the gradient (L2 term included) by its running scale."""


def decay_pull(optimizer: torch.optim.Optimizer, group: dict[str, Any]) -> float:
    """The fraction of a parameter's value weight decay removes per step at the group's peak
    lr (``initial_lr`` when a scheduler set one): ``lr * wd`` for SGD and decoupled decay
    (AdamW); for an adaptive optimizer's coupled L2, whose term is normalised with the gradient,
    ``lr * min(1, 10 * wd)`` (a decay term that dominates the gradient moves the weight by ~lr
    per step)."""
    lr = max(float(group.get("lr", 0) or 0), float(group.get("initial_lr", 0) or 0))
    wd = float(group.get("weight_decay", 0) or 0)
    decoupled = isinstance(optimizer, torch.optim.AdamW) or bool(
        group.get("decoupled_weight_decay", False)
    )
    if isinstance(optimizer, ADAPTIVE) and not decoupled:
        return lr * min(1.0, 10 * wd)
    if isinstance(optimizer, torch.optim.SGD):
        return SGD_PULL_SCALE * lr * wd
    return lr * wd


def _names(names: list[str]) -> str:
    return ", ".join(names[:5]) + (f" ... ({len(names)} in all)" if len(names) > 5 else "")


def _mode_findings(model: nn.Module) -> tuple[list[Finding], list[str]]:
    modal = [n or "(root)" for n, m in model.named_modules() if isinstance(m, MODE_DEPENDENT)]
    eval_modules = [
        n or "(root)"
        for n, m in model.named_modules()
        if isinstance(m, MODE_DEPENDENT) and not m.training
    ]
    findings = []
    if eval_modules:
        what = "the model is in eval mode" if not model.training else "modules are in eval mode"
        findings.append(
            Finding(
                "model_in_eval",
                "warning",
                f"{what}: {len(eval_modules)} of {len(modal)} dropout / BatchNorm modules would "
                f"train in eval mode ({_names(eval_modules)}): dropout is off and BatchNorm "
                "normalises with running statistics, not the batch's. Triage's copies ran in "
                "train mode.",
                remedy="call model.train() before the training steps (and model.eval() only "
                "around evaluation).",
                fields={"modules": eval_modules, "model_training": model.training},
            )
        )
    return findings, eval_modules


def _optimizer_findings(
    model: nn.Module, spec: OptimizerSpec
) -> tuple[list[Finding], list[str], list[str], list[str]]:
    optimizer = spec.instance
    assert optimizer is not None
    names = {id(p): n for n, p in model.named_parameters()}
    held = {id(p): g for g in optimizer.param_groups for p in g["params"]}
    frozen = [n for n, p in model.named_parameters() if not p.requires_grad and id(p) in held]
    missing = [n for n, p in model.named_parameters() if p.requires_grad and id(p) not in held]
    norm_params = {
        id(p): m
        for m in model.modules()
        if isinstance(m, NORMS)
        for p in m.parameters(recurse=False)
    }
    pulls = {
        names[i]: decay_pull(optimizer, g)
        for i, g in held.items()
        if i in norm_params and i in names and float(g.get("weight_decay", 0) or 0) > 0
    }
    decayed = list(pulls)
    findings = []
    if frozen:
        findings.append(
            Finding(
                "frozen_params_in_optimizer",
                "info",
                f"{len(frozen)} parameter(s) have requires_grad=False and the optimizer holds "
                f"them: they are frozen ({_names(frozen)}). Intended for a frozen backbone; a "
                "bug if these layers should learn (triage accuses it only when the model "
                "cannot fit the batch).",
                remedy="set requires_grad=True on layers that should learn; for layers you "
                "freeze on purpose, nothing to do (or leave them out of the param groups).",
                fields={"params": frozen},
            )
        )
    if missing:
        findings.append(
            Finding(
                "trainable_params_not_in_optimizer",
                "warning",
                f"{len(missing)} trainable parameter(s) are in no param group of the optimizer: "
                f"they never update ({_names(missing)}).",
                remedy="build the optimizer from model.parameters() (or add these to a group) "
                "after every layer has been created.",
                fields={"params": missing},
            )
        )
    if decayed:
        strongest = max(pulls.values())
        matters = strongest >= DECAY_PULL_WARN
        findings.append(
            Finding(
                "weight_decay_on_norm",
                "warning" if matters else "info",
                f"{len(decayed)} normalisation weight(s) and bias(es) are decayed "
                f"({_names(decayed)}): each step pulls them toward 0 by {strongest:.2g} of "
                "their value"
                + (
                    f", {1 - (1 - strongest) ** 1000:.0%} over 1,000 steps: enough to matter."
                    if matters
                    else f" ({1 - (1 - strongest) ** 1000:.1%} over 1,000 steps: what most "
                    "transformer code does, harmless at this size)."
                ),
                remedy="put normalisation weights and all biases in a group with "
                "weight_decay=0.0, e.g. [{'params': decay, 'weight_decay': 0.01}, "
                "{'params': no_decay, 'weight_decay': 0.0}].",
                fields={"params": decayed, "pull_per_step": strongest},
            )
        )
    return findings, frozen, missing, decayed


def training_setup(model: nn.Module, spec: OptimizerSpec | None) -> SetupReport:
    """The modes of ``model`` and, with an optimizer instance, its roster and param groups."""
    findings, eval_modules = _mode_findings(model)
    frozen: list[str] = []
    missing: list[str] = []
    decayed: list[str] = []
    unavailable: tuple[Unavailable, ...] = ()
    if spec is not None and spec.instance is not None:
        more, frozen, missing, decayed = _optimizer_findings(model, spec)
        findings += more
        groups = [
            {
                "group": i,
                "params": len(g["params"]),
                "lr": float(g["lr"]),
                "weight_decay": float(g.get("weight_decay", 0) or 0),
            }
            for i, g in enumerate(spec.instance.param_groups)
        ]
    else:
        groups = []
        unavailable = (
            Unavailable(
                "optimizer param groups",
                "no optimizer instance given: frozen layers it holds, layers it misses and "
                "per-group weight decay are not read",
                "no_optimizer",
            ),
        )
    status = recipe_status(findings)
    if status == "pass" and unavailable:
        status = "inconclusive"  # what was not read keeps the row from passing
    if findings:
        lead = worst_finding(findings).message
    elif groups:
        lead = (
            f"the model trains in train mode and the optimizer's {len(groups)} group(s) hold "
            "every trainable parameter, none frozen, no decay on normalisation parameters."
        )
    else:
        lead = "the model is in train mode (no optimizer instance to read)."
    return SetupReport(
        subject=type(model).__name__,
        status=status,
        lead=lead,
        findings=tuple(findings),
        tables=(
            Table.from_dicts("param_groups", groups, ("group", "params", "lr", "weight_decay")),
        ),
        unavailable=unavailable,
        model_training=model.training,
        eval_modules=tuple(eval_modules),
        frozen_held=tuple(frozen),
        trainable_missing=tuple(missing),
        decayed_norm_params=tuple(decayed),
    )
