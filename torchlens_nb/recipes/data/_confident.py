"""``confident_errors``: the model's most confident wrong predictions over a loader.

Runs the caller's model in eval mode under no_grad (flags restored). Memory is bounded by ``k``:
a heap keeps the top errors while the loader streams.
"""

from __future__ import annotations

import heapq
from collections import Counter
from typing import Any

import torch
from torch import nn

from ..._validate import check_int
from ...debug._isolation import keeps_torch_switches
from ...errors import DiagnosticArgumentError, InputFormError
from ...report import Finding, Table
from ...report._recipes_data import ConfidentError, ConfidentErrorsReport, recipe_status
from .._batches import (
    call_model,
    check_model,
    iter_batches,
    model_device,
    primary_output,
    split_batch,
    to_device,
)
from .._model_state import preserved

SYSTEMATIC_SHARE = 0.5
"""One (predicted, true) pair behind at least half of the top errors (and at least 3 of them) is
a pattern, not noise."""


def _probabilities(logits: torch.Tensor) -> torch.Tensor:
    """(N, C) class probabilities: softmax of (N, C) logits, sigmoid of (N,) / (N, 1) logits."""
    if logits.dim() == 2 and logits.shape[1] > 1:
        return logits.float().softmax(dim=-1)
    if logits.dim() == 1 or (logits.dim() == 2 and logits.shape[1] == 1):
        p = logits.float().reshape(-1).sigmoid()
        return torch.stack([1 - p, p], dim=1)
    raise InputFormError(
        f"confident_errors needs (N, C) class logits or (N,) binary logits, got shape "
        f"{tuple(logits.shape)}; flatten sequence outputs to (N*T, C) first."
    )


def _labels(targets: Any, n: int) -> torch.Tensor:
    if not isinstance(targets, torch.Tensor):
        raise InputFormError(f"targets must be a tensor, got {type(targets).__name__}.")
    if targets.dim() == 2 and targets.shape[1] > 1:
        return targets.argmax(dim=1)  # one-hot
    labels = targets.reshape(-1).round().long()
    if labels.numel() != n:
        raise InputFormError(
            f"{labels.numel()} targets for {n} predictions; pass one class index per example."
        )
    return labels


@keeps_torch_switches
def confident_errors(model: nn.Module, loader: Any, *, k: int = 10) -> ConfidentErrorsReport:
    """The ``k`` wrong predictions the model was most confident about, with their indices.

    These reveal systematic bugs (a crop that cuts off the feature, swapped label ids): inspect
    the inputs at those indices. Findings: accuracy (info) and a systematic confusion when one
    (predicted, true) pair makes up >= ``SYSTEMATIC_SHARE`` of the top errors (warning).

    Args:
        model: a classifier returning (N, C) logits or (N,) / (N, 1) binary logits; runs in eval
            mode under no_grad (flags restored).
        loader: a DataLoader or iterable of ``(inputs, targets)`` / dict batches, or one batch.
            Targets are class indices or one-hot rows.
        k: how many errors to keep.

    Returns:
        A :class:`ConfidentErrorsReport` with table ``errors`` and a bar-chart ``figure()``.
        ``index`` counts examples in iteration order; with a shuffling loader it does not map
        back to dataset indices (the report says so).
    """
    check_model(model)
    check_int("k", k, low=1)
    device = model_device(model)
    heap: list[tuple[float, int, int, int, float]] = []
    pairs: Counter[tuple[int, int]] = Counter()
    seen = errors = 0
    with preserved(model, mode="eval"), torch.no_grad():
        for batch in iter_batches(loader, what="loader"):
            inputs, targets = split_batch(batch)
            probs = _probabilities(primary_output(call_model(model, to_device(inputs, device))))
            labels = _labels(targets, probs.shape[0]).to(probs.device)
            confidence, predicted = probs.max(dim=1)
            target_prob = probs.gather(1, labels.clamp(0, probs.shape[1] - 1)[:, None])[:, 0]
            wrong = torch.nonzero(predicted != labels).reshape(-1).tolist()
            conf, pred, true, tprob = (
                t.tolist() for t in (confidence, predicted, labels, target_prob)
            )
            for i in wrong:
                pairs[(pred[i], true[i])] += 1
                item = (conf[i], -(seen + i), pred[i], true[i], tprob[i])
                if len(heap) < k:
                    heapq.heappush(heap, item)
                else:
                    heapq.heappushpop(heap, item)
            errors += len(wrong)
            seen += probs.shape[0]
    if seen == 0:
        raise DiagnosticArgumentError(
            "loader yielded no example; pass a non-empty loader or a batch."
        )
    top = sorted(heap, reverse=True)
    rows = tuple(
        ConfidentError(rank, -neg, pred, true, conf, tprob)
        for rank, (conf, neg, pred, true, tprob) in enumerate(top, start=1)
    )
    findings = _findings(rows, seen, errors)
    table = Table.from_dicts(
        "errors",
        [
            {
                "rank": e.rank,
                "index": e.index,
                "predicted": e.predicted,
                "target": e.target,
                "confidence": e.confidence,
                "target_prob": e.target_prob,
            }
            for e in rows
        ],
        ("rank", "index", "predicted", "target", "confidence", "target_prob"),
        {
            "num_examples": seen,
            "num_errors": errors,
            "top_pairs": [[p, t, n] for (p, t), n in pairs.most_common(5)],
        },
    )
    shuffled = type(getattr(loader, "sampler", None)).__name__ == "RandomSampler"
    disclosures = ["index counts examples in iteration order"]
    if shuffled:
        disclosures.append(
            "this DataLoader shuffles: the indices do not map back to dataset "
            "indices; rerun with shuffle=False to look them up"
        )
    return ConfidentErrorsReport(
        subject=f"{type(model).__name__} on {seen} examples",
        status=recipe_status(findings),
        lead=(
            f"{errors} errors in {seen} examples; most confident: "
            f"{rows[0].confidence:.3f} on #{rows[0].index}."
            if rows
            else f"no errors in {seen} examples."
        ),
        findings=tuple(findings),
        tables=(table,),
        errors=rows,
        num_examples=seen,
        num_errors=errors,
        disclosures=tuple(disclosures),
    )


def _findings(rows: tuple[ConfidentError, ...], seen: int, errors: int) -> list[Finding]:
    findings = [
        Finding(
            "accuracy",
            "info",
            f"accuracy {100 * (1 - errors / seen):.1f}% ({errors} errors in {seen} examples).",
            fields={"num_errors": errors, "num_examples": seen},
        )
    ]
    if not rows:
        return findings
    (pred, true), count = Counter((e.predicted, e.target) for e in rows).most_common(1)[0]
    if count >= 3 and count >= SYSTEMATIC_SHARE * len(rows):
        findings.append(
            Finding(
                "systematic_confusion",
                "warning",
                f"{count} of the {len(rows)} most confident errors predict {pred} where the label is "
                f"{true}: a pattern, not noise.",
                remedy=f"inspect those examples: swapped or wrong label ids for class {true}, or a "
                "transform that removes what tells the classes apart.",
                fields={
                    "predicted": pred,
                    "target": true,
                    "count": count,
                    "indices": [e.index for e in rows if (e.predicted, e.target) == (pred, true)],
                },
            )
        )
    return findings
