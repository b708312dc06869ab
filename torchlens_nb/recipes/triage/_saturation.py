"""A vanishing gradient judged on the stack of saturating activations the forward runs.

gradient_flow judges vanishing from the weight gradients, layer by layer
(``recipes/training/_gradients.py``: 3+ decades from the last weight matrix to the first). That
reading needs one weight per depth: a layer repeated by ``[nn.Linear(48, 48)] * 4`` shares one
weight across the stack, whose gradient sums every depth's, and a stack that only shrinks 2.5
decades at its weights is passed. The activations themselves show the fault either way: every
sigmoid multiplies the gradient by its derivative (at most 0.25), so through a stack of them
the gradient reaching each activation's output shrinks depth by depth toward the input.

:func:`saturating_stack` runs one forward and backward of triage's working copy (train mode, RNG
and modes restored) with the outputs of every ``sigmoid`` / ``tanh`` call kept, and reads the
RMS of the gradient at each, in call order. It is a vanishing gradient when there are
``MIN_SATURATING`` or more, the RMS shrinks toward the input at ``SHRINKING_SHARE`` of the steps
between consecutive ones, and falls ``STACK_DECADES`` or more from the last to the first.
Measured on the development half's sigmoid stacks (``tests/triage_public/development.py``):
4 to 6 sigmoids, 2.6 to 4.2 decades, every step shrinking; the ReLU fixes run no saturating
call; no set-up of the healthy population (``tests/corpus/triage_setups.py``) fires.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from functools import partial
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from ..._undo import Undo, undoing
from ...capture._installs import pop_mode, push_mode
from ...report import Finding
from ...report._recipes_data import recipe_status, worst_finding
from ...report._recipes_training import GradientFlowReport
from .._batches import call_model, loss_input, split_batch
from .._model_state import preserved

SATURATING = frozenset({torch.sigmoid, torch.tanh, torch.Tensor.sigmoid, torch.Tensor.tanh})
"""The calls whose derivative is at most 0.25 (sigmoid) or 1 falling to 0 (tanh)."""
MIN_SATURATING = 4
"""Fewer saturating calls than this are not a deep stack (an LSTM gate or one tanh head)."""
SHRINKING_SHARE = 0.75
"""The share of consecutive steps (toward the input) over which the gradient RMS must shrink."""
STACK_DECADES = 2.0
"""The fall, in decades of gradient RMS, from the last saturating output to the first: a
5-sigmoid MLP at default init falls about 3.4 (0.85 a layer), 4 shared sigmoid layers 2.6."""


class _Saturating(TorchFunctionMode):
    """Keeps every sigmoid / tanh output that requires grad, in call order."""

    def __init__(self) -> None:
        super().__init__()
        self.outputs: list[torch.Tensor] = []

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        if func in SATURATING and isinstance(out, torch.Tensor) and out.requires_grad:
            out.retain_grad()
            self.outputs.append(out)
        return out


def _rms(grads: list[torch.Tensor | None]) -> list[float]:
    return [
        float(g.detach().double().pow(2).mean().sqrt()) if g is not None else math.nan
        for g in grads
    ]


def saturating_stack(model: nn.Module, batch: Any, loss_fn: Any) -> Finding | None:
    """A ``grad_vanishing`` warning when the gradient vanishes through a stack of saturating
    activations (module docstring), else None. One forward of ``model`` (triage's working copy)
    in train mode, and the loss and a backward only when it ran ``MIN_SATURATING`` saturating
    calls or more; its modes, buffers, ``.grad`` and the RNG are restored."""
    inputs, targets = split_batch(batch)
    mode = _Saturating()

    def forward(undo: Undo) -> Any:
        # the mode pushed by a C call whose undo is registered first: `with mode:` is
        # TorchFunctionMode's Python __enter__, which an interrupt can leave pushed
        undo.add(partial(pop_mode, mode))
        push_mode(mode)
        return call_model(model, inputs)

    try:
        with preserved(model, mode="train"):  # modes, buffers, .grad and the RNG come back
            raw = undoing(forward)
            if len(mode.outputs) < MIN_SATURATING:
                return None  # the loss is not called: no stack to read
            loss = loss_fn(loss_input(raw), targets)
            if not isinstance(loss, torch.Tensor) or loss.grad_fn is None or loss.numel() != 1:
                return None
            loss.backward()
            rms = _rms([out.grad for out in mode.outputs])
    finally:
        mode.outputs.clear()
    if not all(math.isfinite(r) and r > 0 for r in rms):
        return None
    logs = [math.log10(r) for r in rms]
    steps = list(itertools.pairwise(logs))
    shrinking = sum(later > earlier for earlier, later in steps)
    decades = logs[-1] - logs[0]
    if decades < STACK_DECADES or shrinking < SHRINKING_SHARE * len(steps):
        return None
    return Finding(
        "grad_vanishing",
        "warning",
        f"the gradient vanishes through a stack of {len(logs)} sigmoid/tanh activations: its "
        f"RMS at their outputs falls {decades:.1f} decades from the last ({rms[-1]:.2g}) to the "
        f"first ({rms[0]:.2g}), shrinking at {shrinking} of {len(steps)} steps toward the "
        "input: the early layers barely train.",
        remedy="use ReLU/GELU instead of sigmoid/tanh between layers, add normalisation or "
        "residual connections, or a better-scaled init.",
        fields={"activations": len(logs), "decades": decades, "rms": rms},
    )


LARGE_MODEL_PARAMS = 20_000_000
"""Above 20M parameters the saturating stack is not run (its second forward and backward):
triage's gradient_flow comes before any training run has timed a step, so the time budget
(``_budget``) cannot decide yet; GPT-2 small (124M) took 273 s on 2 CPU threads with every
check at full length."""


def with_saturating_stack(
    report: GradientFlowReport, model: nn.Module, batch: Any, loss_fn: Any
) -> GradientFlowReport:
    """gradient_flow's ``report`` plus :func:`saturating_stack`'s finding when the weights did
    not show the vanishing gradient; a model above :data:`LARGE_MODEL_PARAMS` is not run
    again, which the report discloses."""
    if any(f.code == "grad_vanishing" for f in report.findings):
        return report
    if sum(p.numel() for p in model.parameters()) > LARGE_MODEL_PARAMS:
        note = (
            "a vanishing gradient through saturating activations was judged from the weights "
            "only (a large model: no second backward)"
        )
        return dataclasses.replace(report, disclosures=(*report.disclosures, note))
    finding = saturating_stack(model, batch, loss_fn)
    if finding is None:
        return report
    findings = [*report.findings, finding]
    return dataclasses.replace(
        report,
        findings=tuple(findings),
        status=recipe_status(findings),
        lead=worst_finding(findings).message,
    )
