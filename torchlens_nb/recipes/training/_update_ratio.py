"""``update_ratio``: log10(||update|| / ||weight||) per layer over steps, against -3.

The numbers are the checks kit's: a ``tl.debug.ChecksSession`` with
``register_update_ratio_check(every=1)`` measures ``||w_after - w_before|| / ||w_before||`` at
each optimizer step (the update the optimizer actually applied; for Adam that is not
``lr * grad``), per param group. Given a model, the recipe trains a deep copy whose optimizer
holds ONE PARAMETER PER GROUP, so the session's per-group series is a per-layer series. Given a
finished session's report, it reads that report's series as recorded (per param group).

Karpathy's std ratio ``std(lr * grad) / std(w)`` is the same quantity for zero-mean tensors
(norm = sqrt(numel) * rms); the target is about 1e-3.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from typing import Any, cast

import torch
from torch import nn

from ..._validate import MAX_REPEATS, check_int, check_number
from ...debug import ChecksSession, preserved_rng_state
from ...debug._isolation import keeps_torch_switches
from ...errors import DiagnosticArgumentError, ModelTypeError
from ...report import Exit, Finding, Report, Table, Unavailable
from ...report._recipes_data import recipe_status, worst_finding
from ...report._recipes_training import LayerRatio, RatioVerdict, UpdateRatioReport
from .._batches import (
    call_model,
    check_loss_fn,
    check_loss_follows_outputs,
    check_model,
    first_batch,
    loss_value,
    model_device,
    primary_output,
    split_batch,
    to_device,
    trainable_copy,
)

TARGET_LOG10 = -3.0
"""log10 of the update-to-weight ratio to aim for (1e-3)."""
TOLERANCE_DECADES = 1.0
"""A layer whose median ratio is more than one decade off the target is flagged."""


def _median(values: list[float]) -> float:
    finite = [v for v in values if not math.isnan(v)]
    return statistics.median(finite) if finite else float("nan")


def _verdict(median: float) -> RatioVerdict:
    if math.isnan(median):
        return "unknown"
    if median > TARGET_LOG10 + TOLERANCE_DECADES:
        return "too_high"
    return "too_low" if median < TARGET_LOG10 - TOLERANCE_DECADES else "ok"


def _train_copy(
    model: nn.Module,
    batch: Any,
    loss_fn: Any,
    steps: int,
    lr: float,
    optimizer: Callable[..., torch.optim.Optimizer] | torch.optim.Optimizer | None,
) -> tuple[Report, dict[int, str], tuple[int, float] | None]:
    """Train a deep copy inside a ChecksSession; return its report, group -> name, and the
    (step, value) of the first non-finite loss (training stops there), if any."""
    inputs, targets = split_batch(first_batch(batch))
    clone = trainable_copy(model, "update_ratio")
    device = model_device(clone)
    inputs, targets = to_device(inputs, device), to_device(targets, device)
    named = [(n, p) for n, p in clone.named_parameters() if p.requires_grad]
    if not any(p.dim() >= 2 for _, p in named):
        raise DiagnosticArgumentError(
            "the model has no trainable weight matrix (parameters with 2+ dimensions); the "
            "update ratio is judged on weights, not biases."
        )
    groups = [{"params": [p]} for _, p in named]  # every parameter trains, in its own group
    opt: torch.optim.Optimizer
    if optimizer is None:
        opt = torch.optim.Adam(groups, lr=lr)
    elif isinstance(optimizer, type) and issubclass(optimizer, torch.optim.Optimizer):
        opt = cast(Any, optimizer)(groups, lr=lr)  # an optimizer class gets the recipe's lr
    elif isinstance(optimizer, torch.optim.Optimizer):
        # an instance holds the caller's parameters: the copy gets a twin with its settings
        opt = cast(Any, type(optimizer))(groups, **optimizer.defaults)
    else:  # a factory sets its own lr
        opt = cast(Callable[..., torch.optim.Optimizer], optimizer)(groups)
    session = ratio_session(clone, opt)
    nonfinite = None
    with preserved_rng_state(), session:
        clone.train()
        for step in range(steps):
            opt.zero_grad(set_to_none=True)
            output = primary_output(call_model(clone, inputs))
            loss = loss_fn(output, targets)
            value = loss_value(loss)  # one host sync per step: the recipe runs a few steps
            check_loss_follows_outputs(loss, output)
            if not math.isfinite(value):
                nonfinite = (step, value)
                break
            loss.backward()
            opt.step()
    return session.report(), weight_groups(named), nonfinite


def ratio_session(model: nn.Module, optimizer: torch.optim.Optimizer) -> ChecksSession:
    """The ChecksSession that measures every step's update ratio of ``optimizer`` (one
    parameter per group) on ``model``, a copy the recipe trains: the per-step invariants would
    judge the recipe's own loop, and their warnings would reach the user's cell (issue 45), so
    only the update ratio is asked for."""
    session = ChecksSession(model, optimizer, scaler=None, invariants=False)
    session.register_update_ratio_check(every=1)
    return session


def weight_groups(named: Sequence[tuple[str, torch.Tensor]]) -> dict[int, str]:
    """group -> name of the weight matrices among ``named`` (the trainable parameters, one per
    group, in order): the judged and charted layers (a bias starting at 0 has no defined
    ratio)."""
    return {i: name for i, (name, p) in enumerate(named) if p.dim() >= 2}


def recorded_update_ratio(
    checks: Report, names: dict[int, str], subject: str, nonfinite: tuple[int, float] | None
) -> UpdateRatioReport:
    """update_ratio's report from a run another recipe made inside :func:`ratio_session`
    (``names`` from :func:`weight_groups`; ``nonfinite``: the (step, value) of the loss that
    stopped it, before its backward), judged as update_ratio judges its own run."""
    return _report(checks, names, subject, nonfinite)


@keeps_torch_switches
def update_ratio(
    model_or_report: Any,
    batch: Any = None,
    loss_fn: Any = None,
    *,
    steps: int = 50,
    lr: float = 1e-3,
    optimizer: Callable[..., torch.optim.Optimizer] | torch.optim.Optimizer | None = None,
) -> UpdateRatioReport:
    """Per-layer log10(update / weight) over steps, judged against the -3 target.

    Verdicts per layer on the median over the steps after the first: more than
    ``TOLERANCE_DECADES`` above -3 is ``too_high`` (reduce the learning rate or clip; warning),
    more than that below is ``too_low`` (the layer barely updates: dead, frozen or lr too small;
    warning).

    Args:
        model_or_report: a model (a deep copy is trained on ``batch`` for ``steps`` steps; the
            caller's model, grads and RNG are untouched) or the ``CheckReport`` of a session that
            ran ``register_update_ratio_check(every=1)`` (its param groups are the layers).
        batch: ``(inputs, targets)`` or a dict batch (model form).
        loss_fn: ``loss_fn(outputs, targets)`` (model form).
        steps: optimizer steps (model form).
        lr: learning rate (model form) of Adam, or of ``optimizer`` when it is an optimizer
            class such as ``torch.optim.SGD``; a factory function sets its own.
        optimizer: ``optimizer(param_groups) -> Optimizer`` to judge another optimizer, e.g.
            ``lambda groups: torch.optim.SGD(groups, lr=0.1)`` (one group per parameter; the
            weight matrices, 2+ dimensions, are judged), an optimizer class, or an optimizer
            instance: the copy then trains with a new one of its class and its ``defaults``
            (the instance, bound to the caller's parameters, is not touched).

    Returns:
        An :class:`UpdateRatioReport` with table ``layers``, a line chart with the target line,
        and the session's report as the action ``checks``.
    """
    if isinstance(model_or_report, nn.Module):
        check_model(model_or_report)
        check_loss_fn(loss_fn)
        check_int("steps", steps, low=1, high=MAX_REPEATS, hint="the default is 50")
        check_number("lr", lr, low=0, low_open=True)
        if not (
            optimizer is None or callable(optimizer) or isinstance(optimizer, torch.optim.Optimizer)
        ):
            raise DiagnosticArgumentError(
                "optimizer must be None, an optimizer class (torch.optim.SGD), an instance "
                "or a factory lambda groups: torch.optim.SGD(groups, lr=0.1), got "
                f"{type(optimizer).__name__}."
            )
        if batch is None:
            raise DiagnosticArgumentError(
                "update_ratio(model, batch, loss_fn): pass the batch the copy trains on."
            )
        checks, names, nonfinite = _train_copy(
            model_or_report, batch, loss_fn, steps, lr, optimizer
        )
        subject = f"{type(model_or_report).__name__}, {steps} steps"
    elif isinstance(model_or_report, Report) and model_or_report.report_type == "checks":
        checks, names, nonfinite = model_or_report, _group_names(model_or_report), None
        subject = checks.subject
    else:
        raise ModelTypeError(
            f"update_ratio reads an nn.Module (with batch and loss_fn) or a ChecksSession "
            f"report, got {type(model_or_report).__name__}."
        )
    return _report(checks, names, subject, nonfinite)


def _group_names(checks: Report) -> dict[int, str]:
    members: dict[int, list[str]] = {}
    for row in checks.table("params").dicts():
        members.setdefault(row["group"], []).append(row["param"])
    return {
        g: names[0]
        if len(names) == 1
        else f"group {g} ({', '.join(names[:3])}" + (" ...)" if len(names) > 3 else ")")
        for g, names in members.items()
    }


def _report(
    checks: Report, names: dict[int, str], subject: str, nonfinite: tuple[int, float] | None
) -> UpdateRatioReport:
    rows = [
        r
        for r in checks.table("series").dicts()
        if r["update_ratio"] is not None or r["lr"] is not None
    ]
    steps = tuple(sorted({r["attempt"] for r in rows}))
    index = {step: i for i, step in enumerate(steps)}
    series: dict[int, list[float]] = {g: [math.nan] * len(steps) for g in names}
    for row in rows:
        ratio = row["update_ratio"]
        if row["group"] in series and ratio is not None:
            series[row["group"]][index[row["attempt"]]] = (
                math.log10(ratio) if ratio > 0 else -math.inf
            )
    layers = []
    for group, values in series.items():
        median = _median(values[1:] if len(values) > 1 else values)
        layers.append(LayerRatio(names[group], tuple(values), median, _verdict(median)))
    findings = _findings(layers)
    if nonfinite is not None:
        step, value = nonfinite
        findings.insert(
            0,
            Finding(
                "loss_nonfinite",
                "critical",
                f"the loss was {value} at step {step}: the copy stopped training there, and the "
                "update ratios after it would be NaN.",
                remedy="find where the value is born with tl.debug.nonfinite_origin(model, inputs); "
                "tl.recipes.init_loss shows the loss at initialisation.",
                fields={"step": step, "loss": value},
            ),
        )
    unknown = [layer.name for layer in layers if layer.verdict == "unknown"]
    status = recipe_status(findings)
    if status == "pass" and unknown:
        status = "inconclusive"
    if nonfinite is not None:
        lead = f"the loss was {nonfinite[1]} at step {nonfinite[0]}: no update ratio can be judged."
    elif status == "pass":
        lead = f"all {len(layers)} layers update at about 1e-3 of their weight per step."
    elif status == "inconclusive":
        lead = f"{len(unknown)} of {len(layers)} layers had no defined ratio on any sampled step."
    else:
        lead = worst_finding(findings).message
    table = Table.from_dicts(
        "layers",
        [
            {
                "layer": layer.name,
                "median_log10": layer.median,
                "last_log10": layer.log10_ratios[-1] if layer.log10_ratios else None,
                "verdict": layer.verdict,
            }
            for layer in layers
        ],
        ("layer", "median_log10", "last_log10", "verdict"),
        {"target_log10": TARGET_LOG10, "tolerance_decades": TOLERANCE_DECADES},
    )
    return UpdateRatioReport(
        subject=subject,
        status=status,
        lead=lead,
        findings=tuple(findings),
        unavailable=tuple(
            Unavailable(
                f"update ratio of {name}",
                "no sampled step had a defined ratio (a zero weight, or no update recorded)",
                "undefined_ratio",
            )
            for name in unknown
        ),
        tables=(table,),
        layers=tuple(layers),
        target_log10=TARGET_LOG10,
        tolerance_decades=TOLERANCE_DECADES,
        steps=steps,
        exits=(Exit("Checks session report", "session.report()", "checks"),),
        actions={"checks": lambda: checks},
        disclosures=(
            "ratio = ||w_after - w_before|| / ||w_before|| per optimizer step, as the "
            "ChecksSession update-ratio check measures it; the first step is not judged",
        ),
    )


def _findings(layers: list[LayerRatio]) -> list[Finding]:
    findings = []
    for verdict, code, what, remedy in (
        (
            "too_high",
            "update_ratio_too_high",
            "much above 1e-3",
            "reduce the learning rate (or this group's), or clip gradients.",
        ),
        (
            "too_low",
            "update_ratio_too_low",
            "much below 1e-3: barely updating",
            "a dead or frozen layer, or a learning rate too small for it; check its gradient "
            "with tl.recipes.gradient_flow.",
        ),
    ):
        hit = [layer for layer in layers if layer.verdict == verdict]
        if hit:
            findings.append(
                Finding(
                    code,
                    "warning",
                    f"{len(hit)} layer(s) update {what}: "
                    + ", ".join(
                        f"{layer.name} (median log10 {layer.median:.2f})" for layer in hit[:5]
                    )
                    + (" ..." if len(hit) > 5 else "")
                    + ".",
                    remedy=remedy,
                    fields={"layers": [layer.name for layer in hit], "target_log10": TARGET_LOG10},
                )
            )
    return findings
