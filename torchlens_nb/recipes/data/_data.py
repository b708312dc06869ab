"""Data recipes: ``data_sanity`` (what one batch looks like) and ``class_balance`` (label counts).

Neither touches a model. Both read at most the batches they are told to, and never modify them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from ..._validate import check_int
from ...debug import preserved_rng_state
from ...errors import DiagnosticArgumentError, InputFormError
from ...report import Finding, Table, Unavailable
from ...report._base import Severity
from ...report._recipes_data import (
    ClassBalanceReport,
    ClassCount,
    DataSanityReport,
    FieldRole,
    FieldSummary,
    recipe_status,
)
from .._batches import (
    TARGET_KEYS,
    is_single_batch,
    iter_batches,
    read_batches,
    target_tensor,
)
from .._stats import flat_values, histogram, tensor_stats

MEAN_ABS_MAX = 1.0
"""An input whose |mean| exceeds this is an order of magnitude off zero-centred (unit-std) data."""
STD_RANGE = (0.1, 10.0)
"""An input whose std falls outside this range is an order of magnitude off unit scale."""
RAW_FACTOR = 10.0
"""Off unit scale by more than this factor again (|mean| > 10, std > 10 or < 0.01: raw pixel
values, unscaled features) is a warning; within it, a hint (info): L2-normalised TF-IDF rows
have std ~0.06 and ImageNet-normalised images mean ~-0.4, both as their recipes intend."""
IGNORE_INDEX = -100
MAX_CLASS_INDEX = 2**24
"""Class indices (and ``num_classes``) stay below this: a count per class is 8 bytes, so the
largest table is 128 MiB (ImageNet-21k has 21,841 classes, the largest vocabularies ~256k)."""
"""``nn.CrossEntropyLoss``'s default ``ignore_index``: a legitimate negative label."""
HISTOGRAM_BINS = 30


def _fields(batch: Any) -> list[tuple[str, FieldRole, Any]]:
    if isinstance(batch, torch.Tensor):
        return [("input", "input", batch)]
    if isinstance(batch, Mapping):
        target = next((k for k in TARGET_KEYS if k in batch), None)
        return [(str(k), "target" if k == target else "input", v) for k, v in batch.items()]
    if isinstance(batch, (tuple, list)) and len(batch) == 2 and isinstance(batch[0], Mapping):
        inputs: list[tuple[str, FieldRole, Any]] = [
            (str(k), "input", v) for k, v in batch[0].items()
        ]  # (dict inputs, targets): the dict's entries are the inputs
        return [*inputs, ("1", "target", batch[1])]
    if isinstance(batch, (tuple, list)):
        last = len(batch) - 1 if len(batch) == 2 else -1
        return [(str(i), "target" if i == last else "input", v) for i, v in enumerate(batch)]
    return [("batch", "input", batch)]


def data_sanity(
    batch_or_loader: Any, *, num_batches: int = 1, num_classes: int | None = None
) -> DataSanityReport:
    """Per-field shape, dtype, range, mean, std and NaN/Inf counts of a batch (or loader).

    Flags non-finite values (critical), float inputs an order of magnitude from zero-mean /
    unit-std (``MEAN_ABS_MAX``, ``STD_RANGE``; warning), constant inputs (no signal; warning),
    fields that disagree on the batch size (critical), negative labels other than -100 and labels
    ``>= num_classes`` (critical), and a target that takes one value across the whole sample (an
    unshuffled, sorted loader; warning). In a 2-tuple batch the second item is the target; in a
    dict the first of ``target``/``targets``/``label``/``labels``/``y``. Fields that are numpy
    arrays (anything with ``__array__``) are converted and analysed; a field that is neither
    tensor nor array (a list of strings) is listed in ``unavailable`` and keeps the status from
    ``pass`` (``inconclusive``): no verdict is given on values that were not read. Reading a
    shuffling DataLoader draws from the global RNG; its state is restored.

    Args:
        batch_or_loader: a batch (tensor, array, dict, tuple) or a DataLoader / iterable of
            batches (a list of Python numbers is refused: pass a tensor).
        num_batches: how many batches of a loader to pool into the statistics.
        num_classes: when given, integer targets must lie in ``[0, num_classes)``.

    Returns:
        A :class:`DataSanityReport` with table ``fields`` and a histogram ``figure()``.

    Raises:
        InputFormError: not a batch or loader. DiagnosticArgumentError: bad ``num_batches``,
            or a field with no values (an empty tensor: a verdict on nothing is no verdict).

    Example:
        >>> import torch, torchlens_nb as tl
        >>> r = tl.recipes.data_sanity((torch.zeros(4, 3), torch.tensor([0, 1, 0, 1])))
        >>> [f.code for f in r.findings]
        ['constant_field']
    """
    check_int("num_batches", num_batches, low=1)
    if num_classes is not None:
        check_int("num_classes", num_classes, low=1)
    batches = read_batches(batch_or_loader, num_batches)
    if not batches:
        raise DiagnosticArgumentError("batch_or_loader yielded no batch; pass a non-empty loader.")
    first = _fields(batches[0])
    pooled: dict[str, list[torch.Tensor]] = {name: [] for name, _, _ in first}
    for batch in batches:
        for name, _, value in _fields(batch):
            tensor = _as_tensor(value)
            if name in pooled and tensor is not None:
                pooled[name].append(flat_values(tensor))
    empty = [name for name, values in pooled.items() if values and not sum(map(len, values))]
    if empty:
        raise DiagnosticArgumentError(
            f"{', '.join(map(repr, empty))} hold{'s' if len(empty) == 1 else ''} no values (0 "
            "elements), so there is nothing to check; pass a batch with at least one sample."
        )
    summaries = []
    for name, role, value in first:
        tensor = _as_tensor(value)
        if tensor is None:
            summaries.append(
                FieldSummary(name, role, type(value).__name__, None, None, None, None, None)
            )
            continue
        values = torch.cat(pooled[name])
        integral = not (values.is_floating_point() or values.is_complex())
        summaries.append(
            FieldSummary(
                name,
                role,
                type(value).__name__,
                tuple(tensor.shape),
                str(tensor.dtype).replace("torch.", ""),
                tensor_stats(values),
                int(values.unique().numel()) if integral else None,
                histogram(values, HISTOGRAM_BINS),
            )
        )
    findings = _sanity_findings(summaries, num_classes)
    unread = [s for s in summaries if s.stats is None]
    rows = [
        {
            "field": s.name,
            "role": s.role,
            "shape": s.shape,
            "dtype": s.dtype or s.type_name,
            "min": s.stats.min if s.stats else None,
            "max": s.stats.max if s.stats else None,
            "mean": s.stats.mean if s.stats else None,
            "std": s.stats.std if s.stats else None,
            "nan": s.stats.nan_count if s.stats else None,
            "inf": s.stats.inf_count if s.stats else None,
            "distinct": s.distinct,
        }
        for s in summaries
    ]
    table = Table.from_dicts(
        "fields",
        rows,
        ("field", "role", "shape", "dtype", "min", "max", "mean", "std", "nan", "inf", "distinct"),
        {"mean_abs_max": MEAN_ABS_MAX, "std_range": STD_RANGE, "num_batches": len(batches)},
    )
    status = recipe_status(findings)
    if status == "pass" and unread:
        status = "inconclusive"
    return DataSanityReport(
        subject=f"{len(summaries)} fields over {len(batches)} batch(es)",
        status=status,
        lead=_sanity_lead(status, findings, summaries, unread),
        findings=tuple(findings),
        tables=(table,),
        fields=tuple(summaries),
        num_batches=len(batches),
        unavailable=tuple(
            Unavailable(
                f"field {s.name!r}",
                f"a {s.type_name} is not a tensor or array: its values were not analysed "
                "(pass tensors, or numpy arrays, to check it)",
                "not_analysed",
            )
            for s in unread
        ),
        disclosures=(
            "statistics pool every element of a field (not per channel)",
            "the model is not run: shapes are not checked against it",
        ),
    )


def _as_tensor(value: Any) -> torch.Tensor | None:
    """``value`` as a tensor: itself, or a numpy-like array converted (None for anything
    else, e.g. a list of strings: such a field is disclosed as not analysed)."""
    if isinstance(value, torch.Tensor):
        return value
    if not hasattr(value, "__array__") or isinstance(value, (str, bytes)):
        return None
    try:
        return torch.as_tensor(np.asarray(value))
    except (TypeError, ValueError, RuntimeError):  # object / string arrays have no tensor form
        return None


def _sanity_lead(
    status: str, findings: list[Finding], summaries: list[FieldSummary], unread: list[Any]
) -> str:
    if status == "pass":
        return "every field is finite, inputs near zero-mean / unit-std, labels look valid."
    if status == "inconclusive":
        names = ", ".join(f"field {s.name!r} ({s.type_name})" for s in unread)
        was = "were" if len(unread) > 1 else "was"
        return f"{len(summaries) - len(unread)} field(s) look fine; {names} {was} not analysed."
    flagged = sorted({str(f.fields.get("field", "")) for f in findings} - {""})
    if flagged:
        return f"{len(findings)} finding(s) in field(s) {', '.join(map(repr, flagged))}."
    return f"{len(findings)} finding(s)."


def _sanity_findings(fields: list[FieldSummary], num_classes: int | None) -> list[Finding]:
    findings: list[Finding] = []
    sizes = {f.name: f.shape[0] for f in fields if f.shape}
    if len(set(sizes.values())) > 1:
        findings.append(
            Finding(
                "batch_size_mismatch",
                "critical",
                f"fields disagree on the batch size (dim 0): {sizes}.",
                remedy="check the collate function and that inputs and targets come from the same "
                "examples.",
                fields={"sizes": sizes},
            )
        )
    for f in fields:
        stats = f.stats
        if stats is None:
            continue
        if stats.nan_count or stats.inf_count:
            findings.append(
                Finding(
                    "nonfinite_values",
                    "critical",
                    f"field {f.name!r} has {stats.nan_count} NaN and {stats.inf_count} Inf of "
                    f"{stats.numel} values.",
                    remedy="fix the dataset or transform (divisions by zero, log of 0, missing "
                    "values) before training; NaN inputs make every loss NaN.",
                    fields={"field": f.name, "nan": stats.nan_count, "inf": stats.inf_count},
                )
            )
        if f.role == "input" and f.distinct is None:
            findings.extend(_scale_findings(f, stats))
        if f.role == "target" and f.distinct is not None:
            findings.extend(_label_findings(f, stats, num_classes))
    return findings


def _scale_findings(f: FieldSummary, stats: Any) -> list[Finding]:
    if stats.numel > 1 and stats.std == 0:
        return [
            Finding(
                "constant_field",
                "warning",
                f"input {f.name!r} is constant ({stats.mean:.4g} everywhere): it carries no signal.",
                remedy="check the transforms (a multiply by 0, a wrong normalisation, a crop outside "
                "the image); tl.recipes.random_input_test confirms it.",
                fields={"field": f.name, "value": stats.mean},
            )
        ]
    low, high = STD_RANGE
    if abs(stats.mean) > MEAN_ABS_MAX or not (low <= stats.std <= high):
        raw = abs(stats.mean) > RAW_FACTOR * MEAN_ABS_MAX or not (
            low / RAW_FACTOR <= stats.std <= high
        )
        return [
            Finding(
                "input_not_standardized",
                "warning" if raw else "info",
                f"input {f.name!r} has mean {stats.mean:.4g} and std {stats.std:.4g}; expected about "
                f"mean 0, std 1 (|mean| <= {MEAN_ABS_MAX}, std in [{low}, {high}]).",
                remedy="standardise it: (x - mean) / std with statistics of the TRAINING split "
                "(e.g. images: ToTensor() then Normalize(mean, std)).",
                fields={"field": f.name, "mean": stats.mean, "std": stats.std},
            )
        ]
    return []


def _label_findings(f: FieldSummary, stats: Any, num_classes: int | None) -> list[Finding]:
    findings = []
    if stats.min < 0 and stats.min != IGNORE_INDEX:
        findings.append(
            Finding(
                "negative_labels",
                "critical",
                f"target {f.name!r} has labels down to {stats.min:g}; class labels start at 0 "
                f"(only {IGNORE_INDEX}, the ignore_index, may be negative).",
                remedy="map labels to 0..C-1 (e.g. labels - labels.min() or a label encoder).",
                fields={"field": f.name, "min": stats.min},
            )
        )
    if num_classes is not None and stats.max >= num_classes:
        findings.append(
            Finding(
                "labels_out_of_range",
                "critical",
                f"target {f.name!r} reaches {stats.max:g} but num_classes is {num_classes}; labels "
                f"must lie in [0, {num_classes - 1}].",
                remedy="fix the label encoding or the model's number of outputs.",
                fields={"field": f.name, "max": stats.max, "num_classes": num_classes},
            )
        )
    if f.distinct == 1 and stats.numel > 1:
        findings.append(
            Finding(
                "single_target_value",
                "warning",
                f"every target in {f.name!r} equals {stats.min:g}: is the loader shuffled?",
                remedy="pass shuffle=True to the training DataLoader (a dataset sorted by class "
                "yields one-class batches).",
                fields={"field": f.name, "value": stats.min},
            )
        )
    return findings


# ----- class_balance -------------------------------------------------------------------------
WARN_RATIO = 10.0
"""Majority:minority above 10:1: a weighted loss or resampling is likely needed."""
CRITICAL_RATIO = 100.0
"""Above 100:1 a model can predict the majority class and still look accurate."""


def _labels(source: Any) -> torch.Tensor:
    if isinstance(source, torch.Tensor):
        return source.detach().cpu()
    if hasattr(source, "__array__") or (
        isinstance(source, (list, tuple))
        and source
        and all(isinstance(v, (int, bool)) for v in source)
    ):
        return torch.as_tensor(source).cpu()
    parts = []
    with preserved_rng_state():  # a shuffling DataLoader draws its seed from the global RNG
        for batch in iter_batches(source, what="loader_or_labels"):
            labels = target_tensor(batch) if is_single_batch(batch) else batch
            if not isinstance(labels, torch.Tensor):
                raise InputFormError(
                    f"a batch yielded targets of type {type(labels).__name__}; class_balance "
                    "needs tensor labels (pass (inputs, labels) batches or the label tensor "
                    "itself)."
                )
            parts.append(labels.detach().cpu())
    if not parts:
        raise DiagnosticArgumentError("loader_or_labels yielded no batch; pass a non-empty one.")
    return torch.cat(
        [p.reshape(-1) if p.dim() < 2 or not p.is_floating_point() else p for p in parts]
    )


def _class_counts(labels: torch.Tensor, num_classes: int | None) -> tuple[torch.Tensor, bool, int]:
    """(counts per class, is_multilabel, ignored count)."""
    if labels.dim() == 2 and (labels.is_floating_point() or labels.dtype == torch.bool):
        if not bool(((labels == 0) | (labels == 1)).all()):
            raise DiagnosticArgumentError(
                "2-D float labels must be one-hot or multi-label 0/1 targets; got other values. "
                "Pass class indices for single-label data."
            )
        counts = labels.to(torch.int64).sum(dim=0)
        if num_classes is not None and counts.numel() != num_classes:
            raise DiagnosticArgumentError(
                f"the 0/1 targets have {counts.numel()} columns but num_classes is {num_classes}."
            )
        return counts, True, 0
    if labels.is_floating_point():
        if not bool((labels == labels.round()).all()):
            raise DiagnosticArgumentError(
                "labels look continuous (float values that are not whole numbers); class_balance "
                "needs class indices. For regression targets use tl.recipes.data_sanity."
            )
        labels = labels.to(torch.int64)
    flat = labels.reshape(-1).to(torch.int64)
    ignored = int((flat == IGNORE_INDEX).sum())
    flat = flat[flat != IGNORE_INDEX]
    if flat.numel() and int(flat.min()) < 0:
        raise DiagnosticArgumentError(
            f"labels include {int(flat.min())}; class indices start at 0 (only {IGNORE_INDEX} is "
            "skipped as ignore_index). Map labels to 0..C-1 first."
        )
    top = int(flat.max()) if flat.numel() else -1
    if num_classes is not None and top >= num_classes:
        raise DiagnosticArgumentError(
            f"labels reach {top} but num_classes is {num_classes}; fix the labels or num_classes."
        )
    if top >= MAX_CLASS_INDEX:
        raise DiagnosticArgumentError(
            f"labels reach {top}: class indices must be below {MAX_CLASS_INDEX} (a count per "
            f"class up to {top} would take {8 * (top + 1):,} bytes); map the labels to 0..C-1 "
            "first (e.g. torch.unique(labels, return_inverse=True)[1])."
        )
    counts = torch.bincount(flat, minlength=num_classes or 0)
    return counts, False, ignored


def class_balance(loader_or_labels: Any, *, num_classes: int | None = None) -> ClassBalanceReport:
    """Class counts and the majority:minority ratio, with the usual thresholds as findings.

    Labels are class indices (any shape; ``-100`` entries are skipped as ignore_index) or 2-D
    one-hot / multi-label 0/1 targets (counted per column). Without ``num_classes`` the classes
    are those that occur; with it, a class that never occurs makes the ratio infinite.
    Thresholds: ratio > ``WARN_RATIO`` (10:1) warning, > ``CRITICAL_RATIO`` (100:1) critical.

    Args:
        loader_or_labels: a label tensor, list or array, or a DataLoader / iterable of batches
            (the target of each ``(inputs, targets)`` or dict batch is read; the whole loader is
            iterated once).
        num_classes: the number of classes the model predicts.

    Returns:
        A :class:`ClassBalanceReport` with table ``classes`` (count, fraction, the
        inverse-frequency weight ``total / (C * count)``) and a bar-chart ``figure()``.

    Example:
        >>> import torch, torchlens_nb as tl
        >>> r = tl.recipes.class_balance(torch.tensor([0] * 100 + [1] * 1))
        >>> r.ratio, [f.code for f in r.findings]
        (100.0, ['class_imbalance'])
    """
    if num_classes is not None:
        check_int("num_classes", num_classes, low=1, high=MAX_CLASS_INDEX)
    counts, multilabel, ignored = _class_counts(_labels(loader_or_labels), num_classes)
    present = counts if num_classes is not None or multilabel else counts[counts > 0]
    labels = (
        range(counts.numel())
        if num_classes is not None or multilabel
        else [int(i) for i in torch.nonzero(counts).reshape(-1)]
    )
    total = int(counts.sum())
    if total == 0:
        raise DiagnosticArgumentError("no labels to count (empty, or every label is -100).")
    pairs = sorted(zip(labels, present.tolist()), key=lambda lc: (-lc[1], lc[0]))
    rows = [ClassCount(int(label), int(n), n / total) for label, n in pairs]
    high, low = rows[0].count, rows[-1].count
    ratio = float("inf") if low == 0 else high / low
    findings = _balance_findings(rows, ratio, total)
    weights = {r.label: (total / (len(rows) * r.count) if r.count else None) for r in rows}
    table = Table.from_dicts(
        "classes",
        [
            {"class": r.label, "count": r.count, "fraction": r.fraction, "weight": weights[r.label]}
            for r in rows
        ],
        ("class", "count", "fraction", "weight"),
        {
            "ratio": ratio,
            "warn_ratio": WARN_RATIO,
            "critical_ratio": CRITICAL_RATIO,
            "ignored": ignored,
        },
    )
    status = recipe_status(findings)
    return ClassBalanceReport(
        subject=f"{total} labels, {len(rows)} classes",
        status=status,
        lead=(
            f"majority:minority is {ratio:.3g}:1"
            + (" (balanced enough)." if status == "pass" else ".")
        ),
        findings=tuple(findings),
        tables=(table,),
        counts=tuple(rows),
        total=total,
        ratio=ratio,
        warn_ratio=WARN_RATIO,
        critical_ratio=CRITICAL_RATIO,
        is_multilabel=multilabel,
        disclosures=(f"{ignored} labels equal to {IGNORE_INDEX} were skipped",) if ignored else (),
    )


def _balance_findings(rows: list[ClassCount], ratio: float, total: int) -> list[Finding]:
    if len(rows) == 1:
        return [
            Finding(
                "single_class",
                "critical",
                f"only class {rows[0].label} occurs in {total} labels.",
                remedy="check the label column and the split; pass num_classes= to "
                "count classes that never occur.",
            )
        ]
    missing = [r.label for r in rows if r.count == 0]
    if missing:
        return [
            Finding(
                "missing_classes",
                "critical",
                f"classes {missing} never occur in {total} labels.",
                remedy="check the split (stratify it) or the label mapping.",
                fields={"classes": missing},
            )
        ]
    if ratio <= WARN_RATIO:
        return []
    major = rows[0]
    severity: Severity = "critical" if ratio > CRITICAL_RATIO else "warning"
    weights = ", ".join(
        f"{total / (len(rows) * r.count):.3g}" for r in sorted(rows, key=lambda r: r.label)
    )
    return [
        Finding(
            "class_imbalance",
            severity,
            f"majority:minority is {ratio:.3g}:1 (warning above {WARN_RATIO:g}:1, critical above "
            f"{CRITICAL_RATIO:g}:1); always predicting class {major.label} scores "
            f"{100 * major.fraction:.1f}% accuracy.",
            remedy=f"use a weighted loss, e.g. nn.CrossEntropyLoss(weight=torch.tensor([{weights}])), "
            "or a WeightedRandomSampler; report per-class recall, not accuracy.",
            fields={"ratio": ratio, "majority": major.label, "majority_fraction": major.fraction},
        )
    ]
