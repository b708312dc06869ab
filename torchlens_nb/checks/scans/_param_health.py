"""``tl.debug.param_health``: a one-shot audit of a module's tensors or any name -> tensor mapping.

Same door for every population: ``model`` (parameters, and buffers unless
``include_buffers=False``), a ``state_dict``, flattened optimizer state, EMA shadow weights, a
loaded checkpoint (nested mappings are flattened to dotted names), or a dict of gradients the
caller collected post-backward. There is no ``grads=`` / ``optimizer=``: a transient gradient's
verdict depends on WHEN it is read, so the caller labels that phase by building the mapping.

Every tensor goes through the one batched scan kernel (:func:`~._scan.scan_tensors`, one host
read per device). Rules, each a finding per tensor:

* ``param_nonfinite`` (critical): signed counts of NaN, +Inf and -Inf;
* ``param_out_of_bounds`` (warning): finite values outside caller-declared ``bounds``;
* ``dtype_headroom_low`` (warning): the largest finite magnitude is above ``max_fraction`` of the
  dtype's largest value (the fp16 overflow-next-step signature);
* ``subnormal_heavy`` (warning): more than ``subnormal_fraction_threshold`` of the values are
  subnormal (slow on many CPUs, flushed to zero under FTZ);
* ``suspicious_fill`` (warning): a tensor of two or more dimensions whose every element holds one
  value (all zero, or all the same). One-dimensional constant tensors (biases, norm scales,
  running statistics) are canonical initialisations and are recorded in the ``fill`` column
  without a finding.

Meta, sparse and quantized tensors, ``None`` values and non-tensors are rows with
``status="skipped"`` and a ``skip_reason``; coverage counts them honestly.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import torch

from ..._validate import check_bool, check_number
from ...errors import DiagnosticArgumentError
from ...report import Unavailable
from ...report._checks import ParamHealthKind, ParamHealthReport, ParamHealthRow
from ._health_rules import health_findings
from ._scan import scan_tensors

Bounds = tuple[float, float] | Mapping[str, tuple[float, float]] | None
Within = str | Sequence[str] | None


def param_health(
    target: torch.nn.Module | Mapping[str, Any],
    *,
    include_buffers: bool = True,
    within: Within = None,
    bounds: Bounds = None,
    max_fraction: float = 0.9,
    subnormal_fraction_threshold: float = 0.1,
) -> ParamHealthReport:
    """Scan every tensor of ``target`` and report non-finite values, bounds, headroom and fills.

    Args:
        target: an ``nn.Module`` or any mapping of names to tensors (nested mappings allowed).
        include_buffers: also scan a module's buffers (BatchNorm statistics, masks).
        within: only names matching this glob or module prefix (``"encoder"`` matches
            ``"encoder.layer.0.weight"``); a sequence of them matches any.
        bounds: ``(low, high)`` for every tensor, or ``{glob: (low, high)}`` (first match wins).
        max_fraction: headroom rule: flag ``absmax > max_fraction * dtype max``.
        subnormal_fraction_threshold: flag tensors with more subnormal values than this fraction.

    Returns:
        A ``ParamHealthReport``: ``rows`` (one per tensor), ``findings``, ``checks_run``,
        ``coverage`` and the ``param_health`` table.

    Raises:
        DiagnosticArgumentError: a target of another type or an invalid threshold; nothing is
            read before the arguments are validated.

    Cost: about a dozen elementwise passes per tensor on its device and one host read per device.

    Example:
        >>> audit = tl.debug.param_health(nn.Linear(2, 2))
        >>> audit.status, len(audit.rows), audit.findings
        ('clean', 2, ())
    """
    rows, attrs = param_health_rows(
        target,
        include_buffers=include_buffers,
        within=within,
        bounds=bounds,
        max_fraction=max_fraction,
        subnormal_fraction_threshold=subnormal_fraction_threshold,
    )
    findings = health_findings(rows, max_fraction, subnormal_fraction_threshold)
    skipped = [r for r in rows if r.status == "skipped"]
    unavailable = []
    for reason in sorted({r.skip_reason for r in skipped if r.skip_reason}):
        names = [r.name for r in skipped if r.skip_reason == reason]
        unavailable.append(
            Unavailable(
                "param_health",
                f"{len(names)} tensor(s) have no dense values to scan ({reason}): "
                + ", ".join(names[:3])
                + (" ..." if len(names) > 3 else ""),
                f"skipped_{reason}",
            )
        )
    coverage = {
        k: attrs[k]
        for k in (
            "tensors_scanned",
            "tensors_skipped",
            "elements_scanned",
            "elements_total",
            "fraction",
        )
    }
    status: Literal["found", "incomplete", "clean"] = (
        "found" if findings else "incomplete" if skipped else "clean"
    )
    lead = (
        f"{attrs['tensors_scanned']} tensor(s) scanned ({coverage['fraction']:.0%} of "
        f"{attrs['elements_total']} elements): "
        + (f"{len(findings)} finding(s)." if findings else "no findings.")
    )
    return ParamHealthReport(
        subject=_subject(target, len(rows)),
        status=status,
        lead=lead,
        findings=tuple(findings),
        disclosures=(
            "Values are read once, now: a checkpoint verdict does not depend on training phase; "
            "gradients are scanned only when passed in a mapping.",
            "suspicious_fill applies to tensors with 2+ dimensions; constant 1-D tensors are "
            "canonical initialisations (shown in the fill column only).",
        ),
        unavailable=tuple(unavailable),
        rows=tuple(rows),
        checks_run=attrs["checks_run"],
        coverage=coverage,
        thresholds={
            "max_fraction": max_fraction,
            "subnormal_fraction_threshold": subnormal_fraction_threshold,
        },
    )


def check_fractions(max_fraction: Any, subnormal_fraction_threshold: Any) -> None:
    """Refuse rule thresholds outside their ranges (or not numbers) before anything is scanned.

    Raises:
        DiagnosticArgumentError: ``max_fraction`` not in (0, 1] or
            ``subnormal_fraction_threshold`` not in [0, 1] (NaN and non-numbers included).
    """
    check_number(
        "max_fraction",
        max_fraction,
        low=0,
        high=1,
        low_open=True,
        expect="in (0, 1]",
        hint="0.9 flags absmax above 90% of the dtype's largest value",
    )
    check_number(
        "subnormal_fraction_threshold",
        subnormal_fraction_threshold,
        low=0,
        high=1,
        expect="in [0, 1]",
    )


def param_health_rows(
    target: torch.nn.Module | Mapping[str, Any],
    *,
    include_buffers: bool = True,
    within: Within = None,
    bounds: Bounds = None,
    max_fraction: float = 0.9,
    subnormal_fraction_threshold: float = 0.1,
) -> tuple[list[ParamHealthRow], dict[str, Any]]:
    """The pandas-free core of :func:`param_health`: ``(rows, attrs)``."""
    check_bool("include_buffers", include_buffers)
    check_fractions(max_fraction, subnormal_fraction_threshold)
    patterns = _patterns(within)
    _validate_bounds(bounds)
    entries = [
        e
        for e in named_entries(target, include_buffers)
        if not patterns or any(_matches(e[0], p) for p in patterns)
    ]
    rows = scan_rows(entries, lambda name: _bound_for(name, bounds))
    scanned = [r for r in rows if r.status == "scanned"]
    total = sum(r.numel for r in rows)
    done = sum(r.numel for r in scanned)
    checks_run = (
        "nonfinite",
        *(("bounds",) if bounds is not None else ()),
        "dtype_headroom",
        "subnormal",
        "fill",
    )
    return rows, {
        "tensors_scanned": len(scanned),
        "tensors_skipped": len(rows) - len(scanned),
        "elements_scanned": done,
        "elements_total": total,
        "fraction": done / total if total else 1.0,
        "checks_run": checks_run,
        "max_fraction": max_fraction,
        "subnormal_fraction_threshold": subnormal_fraction_threshold,
    }


def named_entries(
    target: Any, include_buffers: bool
) -> list[tuple[str, ParamHealthKind, torch.Tensor]]:
    """``(name, kind, value)`` for a module's tensors or a (nested) mapping's values."""
    if isinstance(target, torch.nn.Module):
        entries: list[tuple[str, ParamHealthKind, torch.Tensor]] = [
            (n.replace("_orig_mod.", ""), "parameter", p) for n, p in target.named_parameters()
        ]
        if include_buffers:
            entries += [
                (n.replace("_orig_mod.", ""), "buffer", b) for n, b in target.named_buffers()
            ]
        return entries
    if isinstance(target, Mapping):
        if not target:  # else a clean verdict over nothing: "0 tensor(s) scanned"
            raise DiagnosticArgumentError(
                "param_health got an empty mapping: there is no tensor to scan; pass the model, "
                "or a mapping of names to tensors such as dict(model.named_parameters())."
            )
        return list(_flatten(target, ""))
    raise DiagnosticArgumentError(
        f"param_health takes an nn.Module or a mapping of names to tensors, got "
        f"{type(target).__name__}; for a list of tensors pass dict(enumerate(tensors))."
    )


def _flatten(mapping: Mapping[Any, Any], prefix: str) -> Any:
    for key, value in mapping.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            yield from _flatten(value, name + ".")
        else:
            yield name, "tensor", value


def scan_rows(
    entries: Sequence[tuple[str, ParamHealthKind, Any]], bound_for: Any
) -> list[ParamHealthRow]:
    """Rows for ``(name, kind, value)`` entries: skipped ones with their reason, the rest
    scanned in one batched kernel call."""
    rows: list[ParamHealthRow | None] = []
    dense: list[tuple[int, str, ParamHealthKind, torch.Tensor, tuple[float, float] | None]] = []
    for name, kind, value in entries:
        reason = _skip_reason(value)
        if reason is not None:
            rows.append(_skipped_row(name, kind, value, reason))
            continue
        dense.append((len(rows), name, kind, value, bound_for(name)))
        rows.append(None)
    stats = scan_tensors([d[3] for d in dense], [d[4] for d in dense])
    for (position, name, kind, tensor, bound), stat in zip(dense, stats):
        dtype_max = _dtype_max(tensor.dtype)
        absmax = stat.absmax
        fill: Literal["all_zero", "all_same"] | None = None
        if stat.is_all_same and stat.numel >= 2:
            fill = "all_zero" if stat.zero_count == stat.numel else "all_same"
        rows[position] = ParamHealthRow(
            name=name,
            kind=kind,
            status="scanned",
            skip_reason=None,
            dtype=str(tensor.dtype).removeprefix("torch."),
            shape=tuple(tensor.shape),
            numel=stat.numel,
            device=str(tensor.device),
            coverage=1.0,
            nan_count=stat.nan_count,
            posinf_count=stat.posinf_count,
            neginf_count=stat.neginf_count,
            zero_count=stat.zero_count,
            subnormal_count=stat.subnormal_count,
            finite_min=stat.finite_min,
            finite_max=stat.finite_max,
            absmax=absmax,
            dtype_max=dtype_max,
            headroom_fraction=None if absmax is None else absmax / dtype_max,
            fill=fill,
            bounds=bound,
            out_of_bounds_count=stat.out_of_bounds_count,
        )
    return [r for r in rows if r is not None]


def _skip_reason(value: Any) -> str | None:
    if value is None:
        return "none"
    if not isinstance(value, torch.Tensor):
        return "not_a_tensor"
    if value.is_meta:
        return "meta"
    if value.layout != torch.strided:
        return "sparse"
    if value.is_quantized:
        return "quantized"
    return None


def _skipped_row(name: str, kind: ParamHealthKind, value: Any, reason: str) -> ParamHealthRow:
    is_tensor = isinstance(value, torch.Tensor)
    return ParamHealthRow(
        name=name,
        kind=kind,
        status="skipped",
        skip_reason=reason,
        dtype=str(value.dtype).removeprefix("torch.") if is_tensor else None,
        shape=tuple(value.shape) if is_tensor else None,
        numel=value.numel() if is_tensor else 0,
        device=str(value.device) if is_tensor else None,
        coverage=0.0,
    )


def _dtype_max(dtype: torch.dtype) -> float:
    if dtype.is_floating_point or dtype.is_complex:
        return float(torch.finfo(dtype).max)
    if dtype == torch.bool:
        return 1.0
    return float(torch.iinfo(dtype).max)


def _patterns(within: Within) -> tuple[str, ...]:
    if within is None:
        return ()
    if not isinstance(within, (str, list, tuple)):
        raise DiagnosticArgumentError(
            f"within must be a glob or module prefix, or a list of them, got "
            f"{type(within).__name__} {within!r}; e.g. within='encoder' or within='*.bias'."
        )
    patterns = (within,) if isinstance(within, str) else tuple(within)
    if not patterns or not all(isinstance(p, str) and p for p in patterns):
        raise DiagnosticArgumentError(
            f"within must be a non-empty glob or module prefix (or a list of them), got "
            f"{within!r}; e.g. within='encoder' or within='*.bias'."
        )
    return patterns


def _matches(name: str, pattern: str) -> bool:
    return name == pattern or name.startswith(pattern + ".") or fnmatch.fnmatchcase(name, pattern)


def _validate_bounds(bounds: Bounds) -> None:
    if isinstance(bounds, Mapping) and not bounds:  # it would list "bounds" as a check run
        raise DiagnosticArgumentError(
            "bounds={} bounds no tensor; pass None for no bounds check, or {glob: (low, high)}."
        )
    pairs = (
        []
        if bounds is None
        else (list(bounds.values()) if isinstance(bounds, Mapping) else [bounds])
    )
    for pair in pairs:
        if not isinstance(pair, tuple) or len(pair) != 2 or not float(pair[0]) < float(pair[1]):
            raise DiagnosticArgumentError(
                f"bounds must be (low, high) with low < high, or {{glob: (low, high)}}; got "
                f"{pair!r}."
            )


def _bound_for(name: str, bounds: Bounds) -> tuple[float, float] | None:
    if bounds is None:
        return None
    if not isinstance(bounds, Mapping):
        return (float(bounds[0]), float(bounds[1]))
    for pattern, pair in bounds.items():
        if _matches(name, pattern):
            return (float(pair[0]), float(pair[1]))
    return None


def _subject(target: Any, count: int) -> str:
    kind = type(target).__name__ if isinstance(target, torch.nn.Module) else "mapping"
    return f"{kind} ({count} tensors)"
