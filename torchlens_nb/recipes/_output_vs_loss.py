"""``output_vs_loss``: do the model's outputs have the form its loss expects?

A check no single recipe makes: it reads the model's outputs (a forward, as init_loss runs it)
together with the loss family (init_loss's ``loss_kind``). ``nn.CrossEntropyLoss`` applies
log-softmax itself, so outputs that are already probabilities (every row in [0, 1], summing to
1) are the double-softmax bug: the loss can fall only from ln(C) to about ln(1 + (C-1)/e)
(1.46 for 10 classes), and training stalls. The same holds for NLLLoss on probabilities or
raw scores (it expects log-probabilities) and BCEWithLogitsLoss on outputs in [0, 1] (a sigmoid
applied twice).

Runs the caller's model once in eval mode under no_grad; its flags, buffers and ``.grad`` are
restored (``_model_state.preserved``).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from ..report import Finding, Unavailable
from ..report._recipes_data import LossKind, recipe_status, worst_finding
from ..report._triage import OutputForm, OutputLossReport
from ._batches import (
    call_model,
    check_loss_fn,
    check_model,
    first_batch,
    model_device,
    primary_output,
    split_batch,
    to_device,
)
from ._loss import loss_kind_of
from ._model_state import preserved

ROW_SUM_TOLERANCE = 1e-3
"""Rows summing to 1 within 1e-3 are probabilities (float32 softmax rows are within 1e-6; a row
of raw scores summing to 1 by chance has probability zero)."""
MIN_SIGMOID_ELEMENTS = 16
"""BCEWithLogits outputs are read as sigmoid-ed only when at least 16 all lie in [0, 1] (a small
untrained head emits logits of both signs: 16 positive by chance is 1 in 65,536)."""
_REMEDY = {
    "double_softmax": "remove the final Softmax: nn.CrossEntropyLoss takes raw logits and applies "
    "log_softmax itself (or keep the probabilities and use NLLLoss on their log).",
    "nll_on_probabilities": "NLLLoss expects log-probabilities: end the model with "
    "nn.LogSoftmax(dim=1), or drop the Softmax and use nn.CrossEntropyLoss on the logits.",
    "nll_on_scores": "NLLLoss expects log-probabilities: add nn.LogSoftmax(dim=1), or use "
    "nn.CrossEntropyLoss on these logits.",
    "double_sigmoid": "remove the final Sigmoid: nn.BCEWithLogitsLoss applies it itself (or keep "
    "it and use nn.BCELoss).",
}


def _form(output: torch.Tensor, dim: int) -> tuple[OutputForm, float]:
    """The form along ``dim`` and the largest |row sum - 1| of the probabilities read there."""
    values = output.detach().double()
    in_unit = bool(((values >= 0) & (values <= 1)).all())
    row_error = float((values.sum(dim=dim) - 1).abs().max())
    if in_unit and row_error <= ROW_SUM_TOLERANCE:
        return "probabilities", row_error
    log_error = float((values.exp().sum(dim=dim) - 1).abs().max())
    if bool((values <= 0).all()) and log_error <= ROW_SUM_TOLERANCE:
        return "log_probabilities", log_error
    return "scores", row_error


def _class_dims(output: torch.Tensor) -> list[int]:
    """Candidate class dimensions: 1 for ``(N, C, ...)`` and the last for ``(..., C)``."""
    if output.dim() < 2:
        return []
    return [1] if output.dim() == 2 else [1, -1]


def output_vs_loss(
    model: nn.Module, batch: Any, loss_fn: Any, *, loss_kind: LossKind | None = None
) -> OutputLossReport:
    """Check that the model's outputs have the form ``loss_fn`` expects.

    Findings (critical): ``double_softmax`` (probabilities into cross-entropy),
    ``nll_on_probabilities`` / ``nll_on_scores`` (NLLLoss needs log-probabilities),
    ``double_sigmoid`` (outputs in [0, 1] into BCEWithLogitsLoss). Losses other than
    cross-entropy, NLL and BCE-with-logits are ``inconclusive`` (nothing to check).

    Args:
        model: runs once in eval mode under no_grad (restored afterwards).
        batch: ``(inputs, targets)``, a dict batch, or a loader (its first batch).
        loss_fn: the training loss; its family is recognised (or given as ``loss_kind``).
        loss_kind: the family of a custom loss callable.

    Returns:
        An :class:`~torchlens_nb.report.OutputLossReport`.
    """
    check_model(model)
    check_loss_fn(loss_fn)
    kind = loss_kind or loss_kind_of(loss_fn)
    inputs, _ = split_batch(first_batch(batch))
    inputs = to_device(inputs, model_device(model))
    with preserved(model, mode="eval"), torch.no_grad():
        output = primary_output(call_model(model, inputs)).detach()
    form: OutputForm = "unknown"
    class_dim, row_error = None, None
    for dim in _class_dims(output) if output.is_floating_point() else []:
        form, row_error = _form(output, dim)
        class_dim = dim
        if form != "scores":
            break
    findings = _findings(kind, form, output, class_dim)
    judged = kind in ("cross_entropy", "nll", "bce_logits")
    status = recipe_status(findings)
    unavailable: tuple[Unavailable, ...] = ()
    if status == "pass" and not judged:
        status = "inconclusive"
        unavailable = (
            Unavailable(
                "output form",
                f"a {kind} loss takes its outputs as they are; only cross-entropy, NLL and "
                "BCE-with-logits expect a form to check",
                "not_applicable",
            ),
        )
    values = output.double()
    finite = values[torch.isfinite(values)]
    low = float(finite.min()) if finite.numel() else math.nan
    high = float(finite.max()) if finite.numel() else math.nan
    lead = (
        f"the outputs are {form.replace('_', ' ')} and the {kind} loss expects them so."
        if status == "pass"
        else f"nothing to check for a {kind} loss (outputs are {form.replace('_', ' ')})."
        if status == "inconclusive"
        else worst_finding(findings).message
    )
    return OutputLossReport(
        subject=f"{type(model).__name__} outputs {tuple(output.shape)} into {kind}",
        status=status,
        lead=lead,
        findings=tuple(findings),
        unavailable=unavailable,
        loss_kind=kind,
        output_shape=tuple(output.shape),
        output_form=form,
        class_dim=class_dim,
        value_min=low,
        value_max=high,
        max_row_sum_error=row_error,
        disclosures=("one batch, eval mode: the outputs of the untrained model",),
    )


def _findings(
    kind: LossKind, form: OutputForm, output: torch.Tensor, class_dim: int | None
) -> list[Finding]:
    facts = {"loss_kind": kind, "output_form": form, "class_dim": class_dim}
    code = None
    if kind == "cross_entropy" and form == "probabilities":
        code = "double_softmax"
        message = (
            "the outputs are already probabilities (every row in [0, 1] sums to 1) and "
            "nn.CrossEntropyLoss applies softmax again: double softmax, the loss can barely fall."
        )
    elif kind == "nll" and form in ("probabilities", "scores"):
        code = "nll_on_probabilities" if form == "probabilities" else "nll_on_scores"
        message = (
            f"the outputs are {form} but NLLLoss expects log-probabilities: the loss is "
            "-mean(output[target]), unbounded below on scores."
        )
    elif kind == "bce_logits" and output.numel() >= MIN_SIGMOID_ELEMENTS:
        values = output.detach().double()
        if bool(((values >= 0) & (values <= 1)).all()):
            code = "double_sigmoid"
            message = (
                f"all {output.numel()} outputs lie in [0, 1] and BCEWithLogitsLoss applies "
                "sigmoid again: double sigmoid, the loss can barely fall."
            )
    if code is None:
        return []
    return [Finding(code, "critical", message, remedy=_REMEDY[code], fields=facts)]
