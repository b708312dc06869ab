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

from ...report import Finding, Unavailable
from ...report._recipes_data import LossKind, recipe_status, worst_finding
from ...report._triage import OutputForm, OutputLossReport
from .._batches import (
    call_model,
    check_loss_fn,
    check_model,
    first_batch,
    model_device,
    primary_output,
    split_batch,
    to_device,
)
from .._model_state import preserved
from ..loss._loss import loss_kind_of, probe_broken_form
from ._targets_vs_loss import clamp_finding, target_findings

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
    "normalised_over_batch": "normalise over the class dimension, e.g. log_softmax(dim=-1) (or "
    "dim=1 for (N, C, ...)), never dim=0.",
    "labels_not_shifted": "shift once: cross_entropy(logits[:, :-1].flatten(0, 1), "
    "labels[:, 1:].flatten()) (a Hugging Face model given labels= shifts them itself).",
    "labels_shifted_twice": "shift once: either the labels (labels = input_ids[:, 1:]) or the "
    "loss (logits[:, :-1] against labels[:, 1:]), not both.",
}
ONE_HOT_LOGIT = 30.0
"""The logit of the chosen token in the probe outputs of the label-shift check (the others 0):
a loss that rewards the probe is ~0, one that does not is ~30."""


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


def _batch_normalised(output: torch.Tensor, form: OutputForm) -> OutputForm | None:
    """The form the outputs have along dim 0 when they are normalised over the batch instead
    of over the classes (None otherwise)."""
    if form != "scores" or output.dim() < 2 or output.shape[0] < 2:
        return None
    over_batch, _ = _form(output, 0)
    return over_batch if over_batch != "scores" else None


def _token_ids(inputs: Any, targets: Any) -> torch.Tensor | None:
    """The integer input of the targets' (B, T) shape (``input_ids``), if the batch has one."""
    if not isinstance(targets, torch.Tensor) or targets.dim() != 2 or targets.is_floating_point():
        return None
    candidates = inputs.values() if isinstance(inputs, dict) else [inputs]
    return next(
        (
            t
            for t in candidates
            if isinstance(t, torch.Tensor)
            and not t.is_floating_point()
            and t.shape == targets.shape
            and bool((t >= 0).all())
        ),
        None,
    )


def label_shift(
    loss_fn: Any, output: torch.Tensor, ids: torch.Tensor, targets: torch.Tensor
) -> tuple[int, dict[int, float]] | None:
    """Which shift of the input tokens the loss rewards: the losses of probe outputs that
    predict token t + k at position t (k = 0, 1, 2) as one-hot logits, and the best k. None when
    the outputs are not (B, T, V) over the ids' vocabulary or the loss cannot score them."""
    if output.dim() != 3 or output.shape[:2] != ids.shape or int(ids.max()) >= output.shape[-1]:
        return None
    losses = {}
    for k in (0, 1, 2):
        probe = torch.nn.functional.one_hot(ids.roll(-k, dims=1), output.shape[-1])
        try:
            value = loss_fn(probe.to(output.dtype) * ONE_HOT_LOGIT, targets)
        except Exception:  # a loss that cannot read (B, T, V) logits: nothing to probe
            return None
        if not isinstance(value, torch.Tensor) or value.numel() != 1:
            return None
        losses[k] = float(value)
    best = min(losses, key=lambda k: losses[k])
    return (
        (best, losses) if losses[best] < 0.5 * min(losses[k] for k in losses if k != best) else None
    )


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
    inputs, targets = split_batch(first_batch(batch))
    device = model_device(model)
    inputs, targets = to_device(inputs, device), to_device(targets, device)
    with preserved(model, mode="eval"), torch.no_grad():
        raw = call_model(model, inputs)
        output = primary_output(raw).detach()
    # a tuple output goes to the loss whole: the one-hot probes below cannot stand in for it
    ids = None if isinstance(raw, (tuple, list)) else _token_ids(inputs, targets)
    with torch.no_grad():
        shift = label_shift(loss_fn, output, ids, targets) if ids is not None else None
    form: OutputForm = "unknown"
    class_dim, row_error = None, None
    for dim in _class_dims(output) if output.is_floating_point() else []:
        form, row_error = _form(output, dim)
        class_dim = dim
        if form != "scores":
            break
    over_batch = _batch_normalised(output, form) if output.is_floating_point() else None
    findings = _findings(kind, form, output, class_dim)
    if over_batch is not None:
        findings = [_batch_finding(over_batch, kind)]
    if shift is not None and shift[0] != 1:
        findings.insert(0, _shift_finding(*shift))
    findings += target_findings(loss_fn, kind, targets)
    if kind == "unknown":
        findings += _broken_form_finding(loss_fn)
    findings += clamp_finding(loss_fn, raw, output, targets)
    judged = kind in ("cross_entropy", "nll", "bce_logits") or shift is not None
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
        disclosures=(
            "one batch, eval mode: the outputs of the untrained model",
            *(
                (
                    "label alignment: probe outputs predicting token t, t+1 and t+2 at position "
                    f"t scored {', '.join(f'{v:.3g}' for v in shift[1].values())}: the loss "
                    f"rewards t+{shift[0]}",
                )
                if shift is not None
                else ()
            ),
        ),
    )


def _broken_form_finding(loss_fn: Any) -> list[Finding]:
    code = probe_broken_form(loss_fn)
    if code is None:
        return []
    what = {
        "nll_on_probabilities": "takes nll_loss of softmax probabilities (the log is missing)",
        "double_softmax": "applies softmax before cross_entropy, which applies it again",
    }[code]
    return [
        Finding(
            code,
            "critical",
            f"your loss function {what}: probed on fixed scores and labels it reproduces that "
            "value exactly, so the loss can barely fall.",
            remedy=_REMEDY[code],
            fields={"probed": True},
        )
    ]


def _batch_finding(over_batch: OutputForm, kind: LossKind) -> Finding:
    what = over_batch.replace("_", " ")
    return Finding(
        "normalised_over_batch",
        "critical",
        f"the outputs are {what} over dim 0, the batch axis, not over the classes: a "
        "softmax / log_softmax over dim 0 mixes the examples of the batch, so each output "
        "depends on the others (batch_independence's batch leak follows from it).",
        remedy=_REMEDY["normalised_over_batch"],
        fields={"loss_kind": kind, "output_form": over_batch, "class_dim": 0},
    )


def _shift_finding(best: int, losses: dict[int, float]) -> Finding:
    code = "labels_not_shifted" if best == 0 else "labels_shifted_twice"
    what = (
        "the loss scores position t on token t, its own input: an output that copies its input "
        if best == 0
        else "the labels are shifted twice: position t is scored on token t+2, so an output that "
        "skips a token "
    )
    return Finding(
        code,
        "critical",
        f"{what}scores {losses[best]:.3g} while a next-token predictor scores {losses[1]:.3g}; "
        "the model learns that, not to predict the next token.",
        remedy=_REMEDY[code],
        fields={"rewarded_shift": best, "probe_losses": [losses[k] for k in sorted(losses)]},
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


LOG_FLOOR = 1e-30
"""Probabilities are clamped here before their log (a softmax row underflows to 0 in float32)."""


def loss_as_fixed(report: OutputLossReport, loss_fn: Any) -> Any | None:
    """A loss that hands ``loss_fn`` what the accepted fix's model would output, for the checks
    that judge the step size, or None when ``report`` names no output-form bug it can undo.

    Outputs that are softmax probabilities fed to cross-entropy become their log:
    ``log_softmax(log p) = log p``, so cross-entropy then sees exactly the logits' loss and
    gradient (up to the float32 rounding of the round trip). Sigmoid outputs fed to
    BCEWithLogitsLoss become ``logit(p)``. Measured on the development half: SGD at lr 5 on a
    softmax MLP trains the probe (2.26 -> 1.92) because the softmax squashes every gradient,
    while the fixed model diverges at that lr; the lr is judged on what the fix will train.
    """
    codes = {f.code for f in report.findings if not f.fields.get("probed")}
    if "double_softmax" in codes:

        def undo(out: Any) -> Any:
            return out.clamp_min(LOG_FLOOR).log()

    elif "double_sigmoid" in codes:

        def undo(out: Any) -> Any:
            return torch.logit(out, eps=1e-7)

    else:
        return None

    def fixed(output: Any, targets: Any) -> Any:
        return loss_fn(undo(output) if isinstance(output, torch.Tensor) else output, targets)

    return fixed
