"""Post-hoc value doors over saved traces: ``tl.dead`` (the dead-unit verdict) and
``tl.threshold`` (range forensics).

``tl.dead`` is the only place a unit is called dead, and it needs at least two traces: a unit
that is zero for one batch may fire for the next, so one batch can never prove a unit dead and the
verdict is worded as an upper bound over the samples seen. The live ``LivenessProbe`` only
counts.

``tl.threshold`` answers "which ops leave ``[low, high]``, and where does that start": it scans
every saved op in execution order and marks as *origin* each out-of-range op none of whose saved
parents is out of range (the point ``RangeProbe`` findings send you to).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from ..._validate import check_int, check_number
from ...capture import Op, Selector, Trace
from ...errors import DiagnosticArgumentError
from ...report import Finding, Table, Unavailable, Where
from ...report._activations import (
    DEAD_COLUMNS,
    MAX_LISTED_INDICES,
    THRESHOLD_COLUMNS,
    DeadReport,
    DeadStatus,
    DeadUnits,
    RangeViolation,
    ThresholdReport,
    ThresholdStatus,
    dead_rows,
    threshold_rows,
)
from .._blind_spots import blind_spot_disclosures, blind_spot_unavailable, unless_blind
from ._probes import check_bounds, check_selector, default_unit_dim

_SKIP_FUNCS = frozenset({"input"})
"""Model inputs are data, not units."""


def _saved_tensor(op: Op) -> torch.Tensor | None:
    value = op.out if op.has_saved else None
    if isinstance(value, tuple):
        value = value[0] if value else None
    # Integer outputs are ids, masks and positions, not activations: never scanned.
    if not isinstance(value, torch.Tensor) or not value.is_floating_point():
        return None
    if value.layout != torch.strided or value.device.type == "meta":
        return None  # sparse or meta: no dense values to scan
    return value


def _where(op: Op) -> Where:
    return Where(op=op.label, module=op.module or None, file=op.file, line=op.line, code=op.code)


def _check_traces(traces: Any) -> list[Trace]:
    if isinstance(traces, Trace) or not isinstance(traces, (list, tuple)):
        raise DiagnosticArgumentError(
            f"tl.dead takes a list of traces, got {type(traces).__name__}; e.g. "
            "tl.dead([t1, t2]) with t1, t2 = tl.trace(model, batch, save=tl.func('relu'))."
        )
    for item in traces:
        if not isinstance(item, Trace):
            raise DiagnosticArgumentError(
                f"tl.dead takes traces from tl.trace(...), got a {type(item).__name__} in the list."
            )
    if len(traces) < 2:
        raise DiagnosticArgumentError(
            f"tl.dead needs at least 2 traces (samples), got {len(traces)}: one batch can never "
            "prove a unit dead. Capture more batches with save=tl.func('relu') (or the sites you "
            "care about) and pass them all."
        )
    return list(traces)


def dead(
    traces: Sequence[Trace],
    *,
    selector: Selector | None = None,
    unit_dim: int | None = None,
    atol: float = 0.0,
) -> DeadReport:
    """Units that were zero in every sample seen: the multi-sample dead-unit verdict.

    A unit (an index along ``unit_dim``) is counted dead when ``|value| <= atol`` for every
    element of every trace. Only ops saved, with a floating-point output, in every trace are
    compared (matched by label, which is stable when the same model runs the same code path).

    Args:
        traces: two or more traces of the same model, e.g. ``tl.trace(model, batch,
            save=tl.func("relu"))`` on different batches.
        selector: restrict to matching ops (default: every common saved op except inputs).
        unit_dim: the unit axis; None applies ``default_unit_dim`` (features of 2-D and 3-D
            values, channels of 4-D ones).
        atol: values with ``|value| <= atol`` count as zero (0.0: exactly zero, as ReLU gives).

    Returns:
        A :class:`~torchlens_nb.report.DeadReport`: status ``found``, ``none_found`` or
        ``unavailable`` (no op saved in every trace). The verdict is an upper bound: a unit
        dead for these samples may fire on others.

    Raises:
        DiagnosticArgumentError: fewer than two traces, a non-trace in the list, a bad selector,
            ``unit_dim`` or ``atol``.

    Example:
        >>> import torch, torchlens_nb as tl
        >>> from torch import nn
        >>> _ = torch.manual_seed(0); model = nn.Sequential(nn.Linear(8, 16), nn.ReLU())
        >>> with torch.no_grad(): model[0].bias[:3] = -100.0   # units 0-2 never fire
        >>> runs = [tl.trace(model, torch.randn(4, 8), save=tl.func("relu")) for _ in range(2)]
        >>> tl.dead(runs).units[0].dead_indices
        (0, 1, 2)
    """
    runs = _check_traces(traces)
    if selector is not None:
        check_selector("tl.dead", selector)
    if unit_dim is not None:
        check_int("unit_dim", unit_dim, low=0, expect="a non-negative int or None")
    check_number("atol", atol, low=0, hint="an infinite atol would count every unit dead")
    if unit_dim is not None:
        _check_unit_dim_fits(runs[0], unit_dim)
    scanned: list[DeadUnits] = []
    not_common = 0
    with torch.no_grad():
        for op in runs[0]:
            if op.func in _SKIP_FUNCS or (
                selector and not selector.matches_op(op.func, op.module_stack)
            ):
                continue
            found_values = [
                _saved_tensor(run[op.label]) if op.label in run else None for run in runs
            ]
            values = [v for v in found_values if v is not None]
            dim = default_unit_dim(len(op.shape or ())) if unit_dim is None else unit_dim
            if len(values) < len(runs) or any(
                not 0 <= dim < v.dim() or v.shape[dim] != values[0].shape[dim] for v in values
            ):
                not_common += int(op.has_saved)
                continue
            alive = torch.zeros(values[0].shape[dim], dtype=torch.bool)
            for value in values:
                others = [d for d in range(value.dim()) if d != dim]
                hit = value.abs() > atol
                alive |= hit.any(dim=others) if others else hit
            indices = torch.nonzero(~alive).flatten().tolist()
            scanned.append(
                DeadUnits(
                    op.label,
                    op.module,
                    op.func,
                    dim,
                    len(alive),
                    len(indices),
                    tuple(indices[:MAX_LISTED_INDICES]),
                    op.file,
                    op.line,
                )
            )
    return _dead_report(runs, scanned, not_common)


def _check_unit_dim_fits(run: Trace, unit_dim: int) -> None:
    """Refuse a ``unit_dim`` that is an axis of no saved op (else every op is skipped and the
    report blames the saving)."""
    ranks = [len(op.shape or ()) for op in run if op.has_saved]
    if ranks and unit_dim >= max(ranks):
        raise DiagnosticArgumentError(
            f"unit_dim={unit_dim} is not an axis of any saved op (the largest has {max(ranks)} "
            f"dims); pass an axis below {max(ranks)}, or None for each op's default."
        )


def _batch_rows(run: Trace) -> int:
    first = run[run.input_layers[0]] if run.input_layers else None
    return first.shape[0] if first is not None and first.shape else 1


def _dead_report(runs: list[Trace], scanned: list[DeadUnits], not_common: int) -> DeadReport:
    samples, rows_seen = len(runs), sum(_batch_rows(r) for r in runs)
    seen = f"{samples} samples ({rows_seen} batch rows)"
    rows, attrs = dead_rows(scanned, samples)
    bound = "one batch can never prove a unit dead, so read this as an upper bound"
    found = [u for u in scanned if u.dead]
    findings = tuple(
        Finding(
            code="dead_units",
            severity="warning",
            message=(
                f"{u.label}: {u.dead} of {u.units} units (dim {u.unit_dim}) dead in every "
                f"sample seen: {seen}; {bound}."
            ),
            where=Where(op=u.label, module=u.module or None, file=u.file, line=u.line),
            remedy="check the bias and init of the layer feeding it, or its learning rate; confirm "
            "with more batches.",
            fields={
                "units": u.units,
                "dead": u.dead,
                "dead_indices": list(u.dead_indices),
                "unit_dim": u.unit_dim,
                "samples": samples,
                "batch_rows": rows_seen,
            },
        )
        for u in found
    )
    status: DeadStatus
    unavailable: tuple[Unavailable, ...]
    if not scanned:
        status, lead = (
            "unavailable",
            (f"no op was saved with a floating-point output in all {samples} traces."),
        )
        unavailable = (
            Unavailable(
                "dead",
                "no op was saved in every trace; capture each with "
                "save=tl.func('relu') (or True) and the same model.",
                "no_common_saved_ops",
            ),
        )
    else:
        unavailable = ()
        total = sum(u.dead for u in found)
        status = "found" if found else "none_found"
        lead = (
            (
                f"{total} units in {len(found)} of {len(scanned)} ops dead in every sample seen: "
                f"{seen}; {bound}."
            )
            if found
            else f"no unit zero in every sample seen ({len(scanned)} ops, {seen})."
        )
    # the runs share a model: the first one the capture could not see all of speaks for them
    blind = next((run for run in runs if run.blind_spots), runs[0])
    status, lead = unless_blind(status, lead, blind, "partial", clean="none_found")
    unavailable += blind_spot_unavailable(blind, "dead-unit count")
    disclosures = [
        f"a unit is dead here when every element along its index was 0 in all "
        f"{samples} samples; {bound}.",
        *blind_spot_disclosures(blind),
    ]
    if not_common:
        disclosures.append(
            f"{not_common} saved ops skipped: not saved (or not floating-point) in "
            "every trace, or their unit axis differs."
        )
    return DeadReport(
        subject=f"{runs[0].model_type} ({samples} samples)",
        status=status,
        lead=lead,
        findings=findings,
        samples=samples,
        batch_rows=rows_seen,
        units=tuple(scanned),
        ops_not_common=not_common,
        unavailable=unavailable,
        tables=(Table.from_dicts("ops", rows, DEAD_COLUMNS, attrs),),
        disclosures=tuple(disclosures),
    )


def threshold(
    trace: Trace, *, within: tuple[float, float], selector: Selector | None = None
) -> ThresholdReport:
    """Which saved ops hold values outside ``within``, where, and which op starts it.

    Scans every saved floating-point op output (matching ``selector`` if given) in execution
    order; integer outputs (ids, masks, positions) are not activations and are skipped.
    NaN counts as outside any range; infinities count as below/above. An op is an *origin* when
    it is out of range and none of its saved parents is: the place to look first.

    Args:
        trace: a trace from ``tl.trace`` (``save=True`` scans everything; a selector-saved trace
            scans what was saved, and the report counts what was not).
        within: inclusive ``(low, high)``; use ``math.inf`` for an open side.
        selector: restrict the scan, e.g. ``tl.module("encoder.*")``.

    Returns:
        A :class:`~torchlens_nb.report.ThresholdReport` (status ``found``, ``clean`` or
        ``unavailable`` when nothing was saved), with one ``range_origin`` finding per origin
        and a ``violations`` table of every out-of-range op.

    Raises:
        DiagnosticArgumentError: ``trace`` is not a trace, ``within`` is not a number pair with
            low <= high, or ``selector`` is not a selector.

    Example:
        >>> import torch, torchlens_nb as tl
        >>> from torch import nn
        >>> _ = torch.manual_seed(0)
        >>> t = tl.trace(nn.Sequential(nn.Linear(8, 16), nn.ReLU()), torch.randn(4, 8))
        >>> [(v.label, v.is_origin) for v in tl.threshold(t, within=(-0.5, 0.5)).violations]
        [('input_1', True), ('linear_1', False), ('relu_1', False)]
    """
    if not isinstance(trace, Trace):
        raise DiagnosticArgumentError(
            f"tl.threshold takes a trace from tl.trace(...), got {type(trace).__name__}."
        )
    low, high = check_bounds("tl.threshold within", within)
    if selector is not None:
        check_selector("tl.threshold", selector)
    violations: list[RangeViolation] = []
    outside: set[str] = set()
    scanned = unsaved = 0
    with torch.no_grad():
        for op in trace:
            if selector is not None and not selector.matches_op(op.func, op.module_stack):
                continue
            value = _saved_tensor(op)
            if value is None:
                unsaved += int(not op.has_saved)
                continue
            scanned += 1
            hit = _violation(op, value.detach(), low, high, outside)
            if hit is not None:
                outside.add(op.label)
                violations.append(hit)
    return _threshold_report(trace, low, high, violations, scanned, unsaved)


def _violation(
    op: Op, value: torch.Tensor, low: float, high: float, outside: set[str]
) -> RangeViolation | None:
    if value.numel() == 0:
        return None
    below, above, nan = value < low, value > high, torch.isnan(value)
    bad = below | above | nan
    counts = torch.stack(
        [below.sum(), above.sum(), (~torch.isfinite(value)).sum(), bad.sum()]
    ).tolist()
    if counts[3] == 0:
        return None
    flat = int(torch.argmax(bad.flatten().to(torch.uint8)))
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), value.shape))
    finite = value[torch.isfinite(value)]
    lo, hi = (float(finite.min()), float(finite.max())) if finite.numel() else (math.nan, math.nan)
    return RangeViolation(
        op.label,
        op.module,
        op.func,
        tuple(value.shape),
        int(counts[0]),
        int(counts[1]),
        int(counts[2]),
        lo,
        hi,
        index,
        float(value.flatten()[flat]),
        not any(parent in outside for parent in op.parents),
        op.file,
        op.line,
    )


def _threshold_report(
    trace: Trace,
    low: float,
    high: float,
    violations: list[RangeViolation],
    scanned: int,
    unsaved: int,
) -> ThresholdReport:
    rows, attrs = threshold_rows(violations, low, high)
    findings = tuple(
        Finding(
            code="range_origin",
            severity="warning",
            message=(
                f"{v.label} ({v.func}) is the first op on its path outside [{low:g}, {high:g}]: "
                f"{v.below} below, {v.above} above, {v.nonfinite} non-finite; first at index "
                f"{list(v.first_index)} = {v.first_value:.4g}."
            ),
            where=_where(trace[v.label]),
            remedy=f"inspect trace[{v.label!r}].out and the inputs it read "
            f"({', '.join(trace[v.label].parents) or 'none recorded'}).",
            fields={
                "below": v.below,
                "above": v.above,
                "nonfinite": v.nonfinite,
                "first_index": list(v.first_index),
                "first_value": v.first_value,
            },
        )
        for v in violations
        if v.is_origin
    )
    unavailable: tuple[Unavailable, ...] = ()
    status: ThresholdStatus
    if scanned == 0:
        status, lead = "unavailable", "no saved floating-point op output to scan."
        unavailable = (
            Unavailable(
                "threshold",
                "no op output was saved; capture with save=True "
                "or a selector covering the ops to scan.",
                "nothing_saved",
            ),
        )
    elif violations:
        status = "found"
        lead = (
            f"{len(violations)} of {scanned} saved ops hold values outside [{low:g}, "
            f"{high:g}]; it starts at {', '.join(v.label for v in violations if v.is_origin)}."
        )
    else:
        status, lead = "clean", f"all {scanned} saved ops stay inside [{low:g}, {high:g}]."
        status, lead = unless_blind(status, lead, trace, "partial")
    unavailable += blind_spot_unavailable(trace, "range scan")
    disclosures: tuple[str, ...] = (
        "an origin is out of range while none of its saved parents is; an unsaved "
        "parent is not known to be out of range.",
        *blind_spot_disclosures(trace),
    )
    if unsaved:
        disclosures += (f"{unsaved} ops were not saved and not scanned.",)
    return ThresholdReport(
        subject=f"{trace.model_type} ({len(trace)} ops)",
        status=status,
        lead=lead,
        findings=findings,
        low=low,
        high=high,
        ops_scanned=scanned,
        ops_unsaved=unsaved,
        violations=tuple(violations),
        unavailable=unavailable,
        disclosures=disclosures,
        tables=(Table.from_dicts("violations", rows, THRESHOLD_COLUMNS, attrs),),
    )


__all__ = ["dead", "threshold"]
