"""The step-size verdict of ``tl.recipes.triage``: what a short run at your lr does, against a
smaller (or larger) one.

The update-to-weight ratio's 1e-3 target is a rule of thumb: Adam moves every element by about
lr whatever its gradient, so at Adam's default 1e-3 a layer of small weights sits a decade
above the target and trains fine. A ratio off the target is therefore a hint; the verdict comes
from training deep copies for :data:`PROBE_STEPS` steps with your optimizer rebuilt
(``_optimizer_spec``) at your lr and at lr / 10 (then lr / 100):

* ``diverges``: your run's loss turns non-finite, spikes above :data:`SPIKE` times its start or
  ends above where it started, while a smaller
  lr trains: a critical ``lr_too_high`` whose remedy is the factor that run measured;
* ``stalls``: your run's loss moves less than :data:`STALL_DROP` while lr x 10 trains
  :data:`STALL_RATIO` times faster: a warning ``lr_too_low``;
* ``trains`` (or no lr tried does better): the ratio findings stay as info hints.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import nn

from ...debug import preserved_rng_state
from ...report import Finding, Table
from ...report._recipes_data import recipe_status, worst_finding
from ...report._recipes_training import UpdateRatioReport
from .._batches import (
    call_model,
    first_batch,
    loss_input,
    loss_value,
    model_device,
    split_batch,
    to_device,
    trainable_copy,
)
from ..training._planned import StepPlan, planned_steps
from ._optimizer_spec import OptimizerSpec

PROBE_STEPS = 20
"""Steps of each probe run. Measured on the zoo: Adam at 1000x the working lr ends the MLP's
20 steps above its initial loss, SGD at 100x turns it non-finite, and every twin's loss falls."""
SPIKE = 1.5
"""A run whose loss rises above 1.5x its first value on any step diverges, even when it falls
back later (measured, 20 steps on the zoo MLP: Adam at 0.3 jumps 2.31 -> 10.4 then memorises the
batch to 0.31; SGD-momentum at 5.0 jumps to 11.3; every twin's curve falls monotonically)."""
TRAIN_DROP = 0.01
"""A run trains when its final loss is at least 1% below its first."""
STALL_DROP = 0.01
"""A run whose loss moves less than 1% over the probe stalls."""
STALL_RATIO = 5.0
"""lr x 10 must drop the loss 5x more than your lr before a stall is blamed on the step size."""
RATIO_CODES = frozenset({"update_ratio_too_high", "update_ratio_too_low"})
"""The rules of thumb that stay hints unless the probe shows the step size matters."""

Outcome = Literal["trains", "diverges", "stalls"]


@dataclass(frozen=True)
class ProbeRun:
    """One probe run: the lr scale and the losses (stopped at the first non-finite one)."""

    scale: float
    losses: tuple[float, ...]

    @property
    def outcome(self) -> Outcome:
        first, last = self.losses[0], self.losses[-1]
        if not all(math.isfinite(v) for v in self.losses) or last > first:
            return "diverges"
        if max(self.losses[1:], default=first) > SPIKE * first:
            return "diverges"
        return "trains" if last < first * (1 - TRAIN_DROP) else "stalls"

    @property
    def drop(self) -> float:
        """Relative fall of the loss (NaN when it diverged)."""
        first, last = self.losses[0], self.losses[-1]
        if self.outcome == "diverges" or first == 0:
            return math.nan
        return (first - last) / abs(first)

    def text(self, lr: float | None) -> str:
        at = f"lr={lr * self.scale:g}" if lr is not None else f"lr x {self.scale:g}"
        peak = max(self.losses)
        rise = f" (peak {peak:.3g})" if peak > self.losses[0] or not math.isfinite(peak) else ""
        return f"at {at} the loss went {self.losses[0]:.3g} -> {self.losses[-1]:.3g}{rise}"


def _probe(
    model: nn.Module,
    batch: Any,
    loss_fn: Any,
    spec: OptimizerSpec,
    scale: float,
    steps: int,
    plan: StepPlan | None = None,
) -> ProbeRun:
    inputs, targets = split_batch(first_batch(batch))
    clone = trainable_copy(model, "triage")
    device = model_device(clone)
    inputs, targets = to_device(inputs, device), to_device(targets, device)
    groups = [{"params": [p]} for p in clone.parameters() if p.requires_grad]
    optimizer = spec.build(groups, lr_scale=scale)
    losses: list[float] = []
    with preserved_rng_state():
        clone.train()
        for _ in planned_steps(steps, plan):
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(loss_input(call_model(clone, inputs)), targets)
            losses.append(loss_value(loss))
            if not math.isfinite(losses[-1]) or loss.grad_fn is None:
                break
            loss.backward()
            optimizer.step()
    return ProbeRun(scale, tuple(losses))


def probe_step_size(
    model: nn.Module,
    batch: Any,
    loss_fn: Any,
    spec: OptimizerSpec,
    steps: int | Callable[[], int] = PROBE_STEPS,
    *,
    yours: ProbeRun | None = None,
    plan: StepPlan | None = None,
    is_shortened: Callable[[], bool] = lambda: False,
) -> tuple[ProbeRun, ...]:
    """Your lr first, then lr / 10 and lr / 100 while the smaller ones do not train, or lr x 10
    when yours stalls. Cost: 1 to 3 runs of ``steps`` steps on a deep copy each.

    ``yours``: a run at your lr already made (triage's budget reuses overfit_one_batch's, which
    trained your optimizer at your lr on the same batch), so only the other lrs are run.
    ``steps`` may be a callable read before each run (a budget measured by the first);
    ``plan`` (:func:`planned_steps`) may cut the first run once it has timed a step; once
    ``is_shortened()``, a stall is not followed by lr x 10 (too few steps to judge a stall)."""

    def length() -> int:
        return steps() if callable(steps) else steps

    runs = [
        yours if yours is not None else _probe(model, batch, loss_fn, spec, 1.0, length(), plan)
    ]
    if runs[0].outcome == "diverges":
        for scale in (0.1, 0.01):
            runs.append(_probe(model, batch, loss_fn, spec, scale, length()))
            if runs[-1].outcome == "trains":
                break
    elif runs[0].outcome == "stalls" and not is_shortened():
        runs.append(_probe(model, batch, loss_fn, spec, 10.0, length()))
    return tuple(runs)


def _verdict(runs: tuple[ProbeRun, ...], lr: float | None, family: str) -> Finding | None:
    yours, others = runs[0], runs[1:]
    if yours.outcome == "diverges":
        better = next((r for r in others if r.outcome == "trains"), None)
        if better is None:  # none trains in the probe: the first that at least holds steady
            better = next((r for r in others if r.outcome == "stalls"), None)
        if better is None:
            return None
        factor = round(1 / better.scale)
        return Finding(
            "lr_too_high",
            "critical",
            f"the step size diverges: {yours.text(lr)} with {family}, while {better.text(lr)}.",
            remedy=f"lower the learning rate by {factor}x (measured: the run at lr / {factor} "
            f"{'trains' if better.outcome == 'trains' else 'no longer diverges'}), or clip "
            "gradients.",
            fields={"factor": factor, "family": family, "losses": list(yours.losses)},
        )
    if yours.outcome == "stalls" and others and others[0].outcome == "trains":
        faster = others[0]
        if faster.drop > STALL_RATIO * max(yours.drop, 0.0):
            return Finding(
                "lr_too_low",
                "warning",
                f"the step size stalls: {yours.text(lr)} with {family}, while {faster.text(lr)}.",
                remedy="raise the learning rate (measured: 10x trains), or check that the "
                "optimizer holds the layers that should train.",
                fields={"factor": 10, "family": family},
            )
    return None


def _as_hint(finding: Finding, runs: tuple[ProbeRun, ...], lr: float | None) -> Finding:
    return dataclasses.replace(
        finding,
        severity="info",
        message=f"{finding.message} A hint only: {runs[0].text(lr)} (the short run decides).",
    )


def _frozen_update(report: UpdateRatioReport) -> Finding | None:
    """A critical finding when no layer moved at all (every median log10 ratio is -inf: the
    optimizer's steps leave every weight as it was)."""
    medians = [layer.median for layer in report.layers]
    if not medians or not all(m == -math.inf for m in medians):
        return None
    return Finding(
        "no_update",
        "critical",
        f"none of the {len(medians)} layers moved over the run: the update-to-weight ratio is "
        "0 (log10 -inf) everywhere, so your optimizer at this lr changes nothing.",
        remedy="check the lr (0 before a warmup's first step?), that the optimizer holds the "
        "parameters, and that gradients reach them.",
        fields={"layers": len(medians)},
    )


def judge_step_size(
    report: UpdateRatioReport,
    runs: tuple[ProbeRun, ...],
    spec: OptimizerSpec,
    fits_at_your_lr: bool = False,
    shortened: bool = False,
) -> UpdateRatioReport:
    """``report`` (update_ratio's) with its ratio findings judged by the probe ``runs``: the
    verdict finding when the runs show one, the ratio rules of thumb as info hints.

    ``fits_at_your_lr``: overfit_one_batch memorised the batch (or was still falling) with your
    optimizer at your lr over its longer run; a short probe that stalls then does not make the
    lr too low (faster is not the same as wrong: a healthy SGD 0.01 MLP memorises in 200 steps
    while 10x moves the loss more in 20). ``shortened``: the runs were cut by triage's time
    budget, too short to call a stall slow (the zoo MLP's Adam 3e-4 moves its loss 0.5% in 2
    steps, 10x 5%, and memorises in 200): a stall is then not judged; a divergence is."""
    verdict = _verdict(runs, spec.lr, spec.family)
    stall_unjudged = shortened and runs[0].outcome == "stalls"
    if verdict is not None and verdict.code == "lr_too_low" and (fits_at_your_lr or shortened):
        verdict = None
    frozen = _frozen_update(report)
    if frozen is not None and verdict is None:
        verdict = frozen
    hints = RATIO_CODES | ({"loss_nonfinite"} if verdict is not None else set())
    findings = [_as_hint(f, runs, spec.lr) if f.code in hints else f for f in report.findings]
    if verdict is not None:
        findings.insert(0, verdict)
    status = recipe_status(findings)
    if verdict is not None:
        lead = verdict.message
    elif status == "pass" and runs[0].outcome == "trains":
        lead = f"the step size trains: {runs[0].text(spec.lr)} with {spec.label}."
    elif status == "pass" and stall_unjudged:
        status = "inconclusive"
        lead = (
            f"not judged: {runs[0].text(spec.lr)} with {spec.label} in a run of "
            f"{len(runs[0].losses)} steps, too few to tell a slow step size from a healthy one."
        )
    elif status == "pass" and fits_at_your_lr:
        lead = (
            f"the short probe stalls ({runs[0].text(spec.lr)} with {spec.label}), but the "
            "longer overfit run at your lr fits the batch: the step size is not what stops it."
        )
    elif status == "pass":
        status = "inconclusive"
        lead = (
            f"no lr tried trains: {'; '.join(r.text(spec.lr) for r in runs)} with "
            f"{spec.label}; the step size is not shown to be the cause."
        )
    else:
        lead = worst_finding(findings).message
    table = Table.from_dicts(
        "step_size_probe",
        [
            {
                "lr_scale": r.scale,
                "outcome": r.outcome,
                "first_loss": r.losses[0],
                "last_loss": r.losses[-1],
                "steps": len(r.losses),
            }
            for r in runs
        ],
        ("lr_scale", "outcome", "first_loss", "last_loss", "steps"),
        {"probe_steps": max(len(r.losses) for r in runs)},
    )
    return dataclasses.replace(
        report,
        status=status,
        lead=lead,
        findings=tuple(findings),
        tables=(*report.tables, table),
        exits=() if verdict is not None else report.exits,
        disclosures=(
            *report.disclosures,
            f"the step-size verdict comes from {max(len(r.losses) for r in runs)}-step runs of "
            f"{spec.label} rebuilt "
            "on copies, at your lr and at lr / 10 (lr / 100, or lr x 10 when yours stalls); "
            "the ratio's 1e-3 target is a hint",
        ),
    )


def probe_and_judge(
    model: nn.Module,
    batch: Any,
    loss_fn: Any,
    spec: OptimizerSpec,
    ratio: Callable[[], UpdateRatioReport],
    steps: int | Callable[[], int] = PROBE_STEPS,
    *,
    yours: ProbeRun | None = None,
    plan: StepPlan | None = None,
    fits_at_your_lr: bool = False,
    is_shortened: Callable[[], bool] = lambda: False,
) -> UpdateRatioReport:
    """:func:`probe_step_size` (its first run may time a step for ``plan``), then ``ratio()``
    (update_ratio's report, whose length may depend on that timing), then
    :func:`judge_step_size` (``shortened=is_shortened()``), with grad mode on. ``yours`` is
    disclosed as reused."""
    with torch.enable_grad():
        runs = probe_step_size(
            model, batch, loss_fn, spec, steps, yours=yours, plan=plan, is_shortened=is_shortened
        )
        report = ratio()
    judged = judge_step_size(report, runs, spec, fits_at_your_lr, shortened=is_shortened())
    if yours is None:
        return judged
    note = (
        f"the probe's run at your lr is overfit_one_batch's ({len(yours.losses)} steps of the "
        "same optimizer, lr and batch, dropout off), reused to fit the time budget"
    )
    return dataclasses.replace(judged, disclosures=(*judged.disclosures, note))
