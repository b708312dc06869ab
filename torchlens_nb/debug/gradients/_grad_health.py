"""``tl.debug.grad_health``: saved gradients ranked and flagged, with the frontier.

A dead layer zeroes the gradient of everything upstream of it, so "which gradients are zero"
names a whole cone. The frontier names its tip: an op whose verdict is a flag (``zero``,
``vanishing`` or ``exploding``) while none of its children in the forward graph (the ops that
consumed its output) has a gradient row with the same verdict. A child whose gradient this
backward did not reach has no row and so never shares a flag.

Loss scaling (``_grad_scale.py`` has the rule): a declared scale divides the recorded norms;
with evidence of a scale nobody declared (a GradScaler's multiply at the backward's root), the
provenance is ``unknown`` and the magnitude verdicts (ok / vanishing / exploding) are
``unknown``, never a pass. A zero gradient is zero under any scale, so ``zero`` is decided
either way.

Cost: one ``torch._foreach_norm`` per (device, dtype) group and one host sync per device
(``_host_sync.fetch_floats``); no per-op ``.item()`` (tests/grad_health/test_host_sync.py).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch

from ..._validate import check_int, check_number
from ...capture import Trace
from ...capture._gc_pause import paused_gc
from ...errors import DiagnosticArgumentError, UnavailableError
from ...report import Exit, Finding, Table
from ...report._base import Severity
from ...report._gradients import (
    FLAG_VERDICTS,
    GRAD_HEALTH_COLUMNS,
    VERDICTS,
    Basis,
    GradHealthReport,
    GradHealthStatus,
    Stage,
    Verdict,
)
from .._blind_spots import blind_spot_disclosures, blind_spot_unavailable, unless_blind
from .._host_sync import fetch_floats
from .._values import where_of
from ..lineage._row_actions import ROW_ACTION_ATTRS, row_actions
from ._grad_scale import declared_scale, scaling_evidence, seed_probe
from ._unrecorded import frontier_kind, hidden_frontier_finding, unrecorded_entry, unrecorded_ops

if TYPE_CHECKING:
    from ...capture import BackwardPass

DEFAULT_VANISHING_THRESHOLD = 1e-7
DEFAULT_EXPLODING_THRESHOLD = 1e4
_BASES = ("total_norm", "rms")
_REMEDY = {
    "zero": "find what stops the gradient at this op's output: a ReLU whose inputs are all "
    "negative, a detach or integer cast, a saturated activation; "
    "tl.debug.dead_neurons(trace) shows the forward side.",
    "vanishing": "check initialisation and normalisation between this op and the loss, or "
    "compare with basis='rms' (large tensors have small per-element gradients).",
    "exploding": "check this op's inputs and the learning rate; clip with "
    "torch.nn.utils.clip_grad_norm_(..., error_if_nonfinite=True).",
}
_SEVERITY: dict[str, Severity] = {
    "zero": "warning",
    "vanishing": "warning",
    "exploding": "critical",
}


def grad_health_rows(
    trace: Trace,
    *,
    bwd: int | None = None,
    vanishing_threshold: float = DEFAULT_VANISHING_THRESHOLD,
    exploding_threshold: float = DEFAULT_EXPLODING_THRESHOLD,
    grad_scale: Any = None,
    grad_scales: Mapping[int, Any] | None = None,
    basis: Basis = "total_norm",
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The pandas-free core of :func:`grad_health`: ``(rows, attrs)``.

    ``rows`` are dicts with the ``GRAD_HEALTH_COLUMNS`` keys, in execution order; ``attrs``
    hold ``bwd``, ``basis``, both thresholds, ``grad_scale``, ``scale_provenance``, ``stage``,
    the scaling ``evidence`` (text or None), ``verdict_counts``, ``coverage``
    (``num_rows``, ``num_ops``, ``num_grad_ops``, ``num_not_reached``) and ``unrecorded_ops``
    (labels of the ops inside custom autograd.Functions, e.g. a reentrant checkpoint, whose
    gradients no backward records: ``_unrecorded.py``). Same arguments, errors and cost as
    :func:`grad_health`.
    """
    _check_thresholds(vanishing_threshold, exploding_threshold)
    vanishing_threshold = float(vanishing_threshold)
    exploding_threshold = float(exploding_threshold)
    if basis not in _BASES:
        raise DiagnosticArgumentError(f"basis must be 'total_norm' or 'rms', got {basis!r}.")
    record = _select_pass(trace, bwd)
    declared = declared_scale(grad_scale, grad_scales, record.index, len(trace.backward_passes))
    ops = [op for op in trace.ops if record.op_grads.get(op.label) is not None]
    grads = [record.op_grads[op.label] for op in ops]
    stacked, positions = _norms(grads)
    probe = seed_probe(record.fires[0] if record.fires else None)
    fetched = fetch_floats(stacked + probe)
    raw_norms = [0.0] * len(grads)
    for group, values in zip(positions, fetched):
        for position, value in zip(group, values):
            raw_norms[position] = value
    evidence = scaling_evidence(record, [v[0] for v in fetched[len(stacked) :]])
    scale: float | None
    scale, provenance = (
        declared if declared is not None else ((None, "unknown") if evidence else (1.0, "unscaled"))
    )
    stage: Stage = "pre_clip_scaled" if scale != 1.0 else "pre_clip_unscaled"
    rows = []
    for op, grad, raw in zip(ops, grads, raw_norms):
        numel = grad.numel()
        norm: float | None = raw / scale if scale is not None else (0.0 if raw == 0.0 else None)
        rms = norm / math.sqrt(numel) if norm is not None and numel else None
        judged = rms if basis == "rms" else norm
        rows.append(
            {
                "op": op.label,
                "index": op.index,
                "module": op.module,
                "grad_norm": norm,
                "grad_norm_raw": raw,
                "rms": rms,
                "numel": numel,
                "verdict": _verdict(
                    raw, judged, numel, scale, vanishing_threshold, exploding_threshold
                ),
                "is_frontier": False,
                "stage": stage,
                "scale_provenance": provenance,
                "source_line": f"{op.file}:{op.line}" if op.file else None,
            }
        )
    unrecorded = unrecorded_ops(trace)
    _mark_frontier(trace, rows, frozenset(unrecorded))
    counts = {verdict: sum(r["verdict"] == verdict for r in rows) for verdict in VERDICTS}
    num_grad_ops = sum(1 for op in trace.ops if op.grad_fn_name is not None)
    attrs = {
        "bwd": record.index,
        "basis": basis,
        "vanishing_threshold": vanishing_threshold,
        "exploding_threshold": exploding_threshold,
        "grad_scale": scale,
        "scale_provenance": provenance,
        "stage": stage,
        "evidence": evidence,
        "verdict_counts": counts,
        "coverage": {
            "num_rows": len(rows),
            "num_ops": len(trace.ops),
            "num_grad_ops": num_grad_ops,
            "num_not_reached": max(num_grad_ops - len(rows), 0),
        },
        "unrecorded_ops": list(unrecorded),
    }
    return rows, attrs


@paused_gc()
def grad_health(
    trace: Trace,
    *,
    bwd: int | None = None,
    vanishing_threshold: float = DEFAULT_VANISHING_THRESHOLD,
    exploding_threshold: float = DEFAULT_EXPLODING_THRESHOLD,
    grad_scale: Any = None,
    grad_scales: Mapping[int, Any] | None = None,
    basis: Basis = "total_norm",
) -> GradHealthReport:
    """Rank the gradients one backward pass saved and flag zero, vanishing and exploding ones.

    Capture with ``CaptureOptions(save_grads=True)`` and call ``trace.backward(loss)`` first.
    One row per op whose output gradient was saved: ``grad_norm`` (unscaled L2 norm; None
    when the scale is unknown), ``grad_norm_raw`` (as recorded), ``rms`` (norm/sqrt(numel)),
    ``verdict``, ``is_frontier`` (see the module docstring), ``stage``, ``scale_provenance``.
    A value below ``vanishing_threshold`` is ``vanishing``, above ``exploding_threshold``
    ``exploding``; a non-finite norm is ``unknown`` except an infinite one of unscaled
    gradients (``exploding``).

    Args:
        trace: a trace captured with ``save_grads=True``, after ``trace.backward(...)``.
        bwd: which backward pass (index into ``trace.backward_passes``); required when the
            trace has several.
        vanishing_threshold, exploding_threshold: ``0 <= vanishing < exploding``; ``inf`` turns
            the exploding verdict off.
        grad_scale: the loss scale of every pass: a number, or the GradScaler itself (its
            ``get_scale()``, read now: call before ``scaler.update()``).
        grad_scales: ``{bwd: scale}`` per pass (not together with ``grad_scale``).
        basis: ``"total_norm"`` or ``"rms"``: the value the thresholds compare.

    Returns:
        A :class:`~torchlens_nb.report.GradHealthReport`; ``to_pandas().attrs`` holds ``bwd``,
        the thresholds and ``coverage``.

    Raises:
        UnavailableError: no gradients to read (``code`` ``"no_saved_grads"`` or
            ``"no_backward"``).
        DiagnosticArgumentError: several passes and no ``bwd``, a bad threshold, basis or scale.

    Cost: reads gradients only (no copy); one host sync per device; changes nothing. GPT-2
    small at 1x64 tokens (561 gradients): 12 ms min, 2.5% of the 500 ms logged backward it
    describes (benchmarks/bench_grad_health.py, 2-core CPU).

    Example:
        >>> import torch, torchlens_nb as tl
        >>> from torchlens_nb.options import CaptureOptions
        >>> t = tl.trace(torch.nn.Linear(2, 1), torch.ones(1, 2),
        ...              capture=CaptureOptions(save_grads=True))
        >>> _ = t.backward(t[t.output_layers[0]].out.sum())
        >>> tl.debug.grad_health(t).to_pandas()[["op", "grad_norm", "verdict"]].values.tolist()
        [['linear_1', 1.0, 'ok']]
    """
    rows, attrs = grad_health_rows(
        trace,
        bwd=bwd,
        vanishing_threshold=vanishing_threshold,
        exploding_threshold=exploding_threshold,
        grad_scale=grad_scale,
        grad_scales=grad_scales,
        basis=basis,
    )
    findings = _findings(trace, rows, attrs)
    counts = attrs["verdict_counts"]
    frontier = tuple(r["op"] for r in rows if r["is_frontier"])
    flagged = sum(counts[v] for v in FLAG_VERDICTS)
    unrecorded = attrs["unrecorded_ops"]
    status: GradHealthStatus
    if flagged:
        status = "found"
        names = ", ".join(f"{r['op']} ({r['verdict']})" for r in rows if r["is_frontier"])
        lead = (
            f"{len(frontier)} frontier op{'s' if len(frontier) != 1 else ''}: {names}; "
            f"{flagged} of {len(rows)} gradients flagged."
            if frontier or not unrecorded
            else f"no frontier op: the flagged gradients come from ops whose gradients were not "
            f"recorded; {flagged} of {len(rows)} gradients flagged."
        )
    elif unrecorded:
        status = "unknown"
        lead = (
            f"no gradient is flagged among the {len(rows)} read, but {len(unrecorded)} ops ran "
            "inside a custom autograd.Function and their gradients were not recorded."
        )
    elif counts["unknown"] or not rows:
        status = "unknown"
        lead = (
            f"no gradient is zero; {counts['unknown']} of {len(rows)} magnitude verdicts "
            "are unknown."
            if rows
            else "this backward saved no op gradient."
        )
    else:
        status = "clean"
        lead = (
            f"all {len(rows)} gradients are within [{attrs['vanishing_threshold']:g}, "
            f"{attrs['exploding_threshold']:g}] ({attrs['basis']})."
        )
    status, lead = unless_blind(status, lead, trace, "unknown")
    table = Table.from_dicts(
        "grad_health", rows, GRAD_HEALTH_COLUMNS, {**attrs, **ROW_ACTION_ATTRS}
    )
    return GradHealthReport(
        subject=f"{trace.model_type} backward {attrs['bwd']} ({len(rows)} gradients)",
        status=status,
        lead=lead,
        findings=tuple(findings),
        tables=(table,),
        disclosures=(*_disclosures(attrs), *blind_spot_disclosures(trace)),
        unavailable=(
            *((unrecorded_entry(trace, unrecorded),) if unrecorded else ()),
            *blind_spot_unavailable(trace, "gradient health"),
        ),
        exits=tuple(
            Exit(
                f"Show lineage of {op}",
                f"tl.debug.lineage(trace, {op!r}, direction='both', max_depth=1)",
                action="lineage",
                args={"op": op},
            )
            for op in frontier[:3]
        ),
        actions=row_actions(trace),
        bwd=attrs["bwd"],
        basis=attrs["basis"],
        vanishing_threshold=attrs["vanishing_threshold"],
        exploding_threshold=attrs["exploding_threshold"],
        grad_scale=attrs["grad_scale"],
        scale_provenance=attrs["scale_provenance"],
        stage=attrs["stage"],
        frontier=frontier,
        verdict_counts=counts,
    )


# ----- arguments -------------------------------------------------------------------------------
def _check_thresholds(vanishing: Any, exploding: Any) -> None:
    for name, value in (("vanishing_threshold", vanishing), ("exploding_threshold", exploding)):
        check_number(
            name,
            value,
            low=0,
            finite=False,
            hint=f"the defaults are {DEFAULT_VANISHING_THRESHOLD:g} and "
            f"{DEFAULT_EXPLODING_THRESHOLD:g}",
        )
    if math.isinf(vanishing) or vanishing >= exploding:
        raise DiagnosticArgumentError(
            f"vanishing_threshold ({vanishing!r}) must be finite and below exploding_threshold "
            f"({exploding!r})."
        )


def _select_pass(trace: Trace, bwd: Any) -> BackwardPass:
    if not isinstance(trace, Trace):
        raise DiagnosticArgumentError(
            f"grad_health reads a tl.trace(...) result, got {type(trace).__name__}."
        )
    if not trace.options.save_grads:
        raise UnavailableError(
            "this trace saved no gradients; capture with "
            "capture=tl.options.CaptureOptions(save_grads=True), then call trace.backward(loss).",
            code="no_saved_grads",
        )
    passes = trace.backward_passes
    if not passes:
        raise UnavailableError(
            "this trace has no backward pass yet; call trace.backward(loss) first.",
            code="no_backward",
        )
    if bwd is None:
        if len(passes) > 1:
            raise DiagnosticArgumentError(
                f"this trace has {len(passes)} backward passes; pass bwd=N with N in "
                f"0..{len(passes) - 1} to pick one."
            )
        return passes[0]
    index = check_int(
        "bwd",
        bwd,
        low=-len(passes),
        high=len(passes) - 1,
        expect=f"an int in 0..{len(passes) - 1} (this trace's backward passes)",
    )
    return passes[index]


# ----- measurement ------------------------------------------------------------------------------
def _norms(grads: list[torch.Tensor]) -> tuple[list[torch.Tensor], list[list[int]]]:
    """The L2 norms of ``grads``, one stacked 1-D tensor per (device, dtype) group, with the
    positions in ``grads`` of each group's entries. Half precision is reduced in float32 (an
    fp16 norm overflows at 65504 even when every element is finite)."""
    groups: dict[tuple[torch.device, torch.dtype], list[int]] = {}
    for position, grad in enumerate(grads):
        groups.setdefault((grad.device, grad.dtype), []).append(position)
    stacked = []
    with torch.no_grad():
        for (_, dtype), positions in groups.items():
            members = [grads[p] for p in positions]
            if dtype in (torch.float16, torch.bfloat16):
                values = torch._foreach_norm(members, 2, dtype=torch.float32)
            else:
                values = torch._foreach_norm(members, 2)
            stacked.append(torch.stack(values))
    return stacked, list(groups.values())


def _verdict(
    raw: float,
    value: float | None,
    numel: int,
    scale: float | None,
    vanishing: float,
    exploding: float,
) -> Verdict:
    if numel == 0 or math.isnan(raw):
        return "unknown"
    if raw == 0.0:
        return "zero"
    if value is None:
        return "unknown"
    if math.isinf(value):  # under a loss scale != 1, inf is the scaler's overflow, not the model
        return "exploding" if scale == 1.0 else "unknown"
    if value < vanishing:
        return "vanishing"
    return "exploding" if value > exploding else "ok"


def _mark_frontier(trace: Trace, rows: list[dict[str, Any]], unrecorded: frozenset[str]) -> None:
    flag = {r["op"]: r["verdict"] for r in rows if r["verdict"] in FLAG_VERDICTS}
    for row in rows:
        row["is_frontier"] = frontier_kind(trace, row["op"], flag, unrecorded) == "frontier"


# ----- report parts -----------------------------------------------------------------------------
def _cone(trace: Trace, start: str, verdict: str, flag: dict[str, str]) -> int:
    """Ops upstream of ``start`` reached through parents with the same verdict."""
    seen = {start}
    pending = [start]
    while pending:
        for parent in trace[pending.pop()].parents:
            if parent not in seen and flag.get(parent) == verdict:
                seen.add(parent)
                pending.append(parent)
    return len(seen) - 1


def _findings(trace: Trace, rows: list[dict[str, Any]], attrs: dict[str, Any]) -> list[Finding]:
    flag = {r["op"]: r["verdict"] for r in rows if r["verdict"] in FLAG_VERDICTS}
    unrecorded = frozenset(attrs["unrecorded_ops"])
    findings = [
        hidden_frontier_finding(trace, row, unrecorded)
        for row in rows
        if frontier_kind(trace, row["op"], flag, unrecorded) == "hidden"
    ]
    for row in (r for r in rows if r["is_frontier"]):
        op = trace[row["op"]]
        upstream = _cone(trace, op.label, row["verdict"], flag)
        findings.append(
            Finding(
                code="gradient_frontier",
                severity=_SEVERITY[row["verdict"]],
                message=(
                    f"the {row['verdict']} gradient begins at {op.label}: none of its "
                    "consumers shares it"
                    + (
                        f"; {upstream} op{'s' if upstream != 1 else ''} upstream share it too."
                        if upstream
                        else "."
                    )
                ),
                where=where_of(op),
                remedy=_REMEDY[row["verdict"]],
                fields={
                    "verdict": row["verdict"],
                    "grad_norm": row["grad_norm"],
                    "rms": row["rms"],
                    "num_upstream_flagged": upstream,
                },
            )
        )
    if attrs["scale_provenance"] == "unknown":
        findings.append(
            Finding(
                code="grad_scale_unknown",
                severity="warning",
                message=(
                    f"the gradients carry a loss scale this analysis does not know "
                    f"({attrs['evidence']}); magnitude verdicts are unknown."
                ),
                remedy=(
                    "pass grad_scale=scaler.get_scale() (before scaler.update()), or "
                    "grad_scale=1.0 to classify the gradients as recorded."
                ),
                fields={"evidence": attrs["evidence"]},
            )
        )
    nonfinite = [r["op"] for r in rows if not math.isfinite(r["grad_norm_raw"])]
    if nonfinite:
        scaled = attrs["stage"] == "pre_clip_scaled"
        findings.append(
            Finding(
                code="gradient_nonfinite",
                severity="info" if scaled else "critical",
                message=(
                    f"{len(nonfinite)} gradient{'s are' if len(nonfinite) != 1 else ' is'} "
                    f"NaN or Inf (first in forward order: {nonfinite[0]})"
                    + ("; under loss scaling a GradScaler skips such a step." if scaled else ".")
                ),
                where=where_of(trace[nonfinite[0]]),
                remedy="tl.debug.bisect_nan_backward finds where a backward NaN is born.",
                fields={"ops": nonfinite[:20], "count": len(nonfinite)},
            )
        )
    return findings


def _disclosures(attrs: dict[str, Any]) -> tuple[str, ...]:
    notes = [
        "gradients are w.r.t. op outputs, read during trace.backward before any clipping; "
        "the frontier is a flagged op none of whose consumers shares its verdict."
    ]
    if attrs["scale_provenance"] == "unscaled":
        notes.append(
            "no loss scaling was seen at the backward's root (pass grad_scale= if the "
            "loss was scaled inside the captured forward)."
        )
    missed = attrs["coverage"]["num_not_reached"]
    if missed:
        notes.append(
            f"{missed} op{'s' if missed != 1 else ''} with a grad_fn got no gradient in "
            "this backward (not reached from the loss) and have no row."
        )
    return tuple(notes)
