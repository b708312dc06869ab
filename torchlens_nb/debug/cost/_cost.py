"""Rank where a forward's cost goes: ``hot_path`` (by source line) and ``recompute_candidates``
(activation bytes per FLOP). Both read only the trace's metadata: nothing is re-run and no
saved value is needed, so a ``save=False`` trace works.

Per-op facts:

* FLOPs: :func:`~torchlens_nb.debug.cost._flops.op_flops` (ops without a formula are excluded and
  counted, never guessed);
* memory: bytes the op's outputs newly allocate, ``numel * itemsize`` per output (from the saved
  values when saved, else from the recorded shape of the first output); views and in-place ops
  allocate nothing and count 0;
* duration: ``op.duration_ns``, host wall time of the call inside the capture (on an accelerator
  that is launch time: the kernel runs asynchronously).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ..._validate import check_number
from ...capture import Op, Trace
from ...errors import DiagnosticArgumentError, UnavailableError
from ...report import Finding, Table, Unavailable
from ...report._cost import (
    HOT_PATH_COLUMNS,
    METRIC_UNITS,
    RECOMPUTE_COLUMNS,
    HotPathReport,
    Metric,
    RecomputeReport,
)
from ...report._location import source_line_text
from ..compare._compare import source_line, tensors_of
from ._flops import op_flops

BYTES_PER_GB = 10**9
"""``budget_gb`` is in decimal gigabytes."""


def activation_bytes(op: Op) -> int:
    """Bytes newly allocated by ``op``'s outputs (0 for views, in-place ops and inputs)."""
    if op.is_input or op.is_view or op.is_inplace:
        return 0
    saved = tensors_of(op)
    if saved:
        return sum(t.numel() * t.element_size() for t in saved if not t._is_view())
    dtype = getattr(torch, op.dtype or "", None)
    itemsize = dtype.itemsize if isinstance(dtype, torch.dtype) else 0
    return op.numel * itemsize


def _check_trace(trace: Any) -> Trace:
    if not isinstance(trace, Trace):
        raise DiagnosticArgumentError(
            f"trace must be a tl.trace(...) result, got {type(trace).__name__}."
        )
    return trace


def _metric_value(op: Op, by: str) -> tuple[float | None, str | None]:
    if by == "flops":
        flops = op_flops(op).flops
        return (None, "no_flop_formula") if flops is None else (flops, None)
    if by == "memory":
        return activation_bytes(op), None
    return op.duration_ns, None


def hot_path_rows(
    trace: Trace, by: Metric = "flops"
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The pandas-free core of :func:`hot_path`: ``(rows, attrs)``.

    Rows (keys ``HOT_PATH_COLUMNS``) aggregate the ops recorded on the same source line (the
    op's own line: the first frame outside torch and torchlens_nb), largest first; ties keep
    execution order. ``attrs``: ``metric``, ``unit``, ``total``, ``num_ops`` (ranked),
    ``excluded`` with ``excluded_by_reason`` (``no_flop_formula``, ``no_source_line``), and
    the capture-honesty facts ``is_partial``, ``has_source_lines`` and ``basis``.

    Raises:
        UnavailableError: ``by="device_time"`` (code ``device_time_unavailable``): device times
            come from a joined profiler session, which torchlens_nb does not record yet.
        DiagnosticArgumentError: ``by`` is not one of the four metrics.
    """
    _check_trace(trace)
    if by == "device_time":
        raise UnavailableError(
            "by='device_time' needs Kineto device times joined to the trace, and this trace has "
            "no joined profiler session (torchlens_nb does not join one yet); rank by "
            "'duration' (host wall time) or 'flops' instead.",
            code="device_time_unavailable",
        )
    if by not in ("flops", "memory", "duration"):
        raise DiagnosticArgumentError(
            f"by must be 'flops', 'memory', 'duration' or 'device_time', got {by!r}."
        )
    lines: dict[str, dict[str, Any]] = {}
    excluded: dict[str, int] = {}
    ranked = 0
    for op in trace:
        if op.is_input:
            continue
        value, reason = _metric_value(op, by)
        where = source_line(op)
        if reason is None and where is None:
            reason = "no_source_line"
        if reason is not None:
            excluded[reason] = excluded.get(reason, 0) + 1
            continue
        assert where is not None  # reason is set whenever the line is missing
        ranked += 1
        line = lines.setdefault(
            where,
            {
                "source_line": where,
                "code": op.code,
                "value": 0,
                "funcs": {},
                "modules": [],
                "ops": [],
            },
        )
        line["value"] += value
        line["funcs"][op.func] = line["funcs"].get(op.func, 0) + 1
        if op.module not in line["modules"]:
            line["modules"].append(op.module)
        line["ops"].append(op.label)
    total = sum(line["value"] for line in lines.values())
    ordered = sorted(lines.values(), key=lambda line: -line["value"])  # stable: ties keep order
    rows = [
        {
            "rank": rank,
            "source_line": line["source_line"],
            "code": line["code"],
            "value": line["value"],
            "share": line["value"] / total if total else None,
            "num_ops": len(line["ops"]),
            "funcs": ", ".join(f"{f} x{n}" if n > 1 else f for f, n in line["funcs"].items()),
            "modules": tuple(line["modules"]),
            "ops": tuple(line["ops"]),
        }
        for rank, line in enumerate(ordered, start=1)
    ]
    attrs = {
        "metric": by,
        "unit": METRIC_UNITS[by],
        "total": total,
        "num_ops": ranked,
        "excluded": sum(excluded.values()),
        "excluded_by_reason": excluded,
        "is_partial": trace.is_partial,
        "has_source_lines": bool(getattr(trace.options, "source_lines", True)),
        "basis": _BASIS[by],
    }
    return rows, attrs


_BASIS = {
    "flops": "forward FLOPs by torchlens_nb per-op formulas (multiply-add = 2, bias not counted)",
    "memory": "bytes newly allocated by each op's outputs (views and in-place ops: 0)",
    "duration": "host wall time of each call inside the capture (includes capture overhead)",
}


_UNIT_WORDS = {"flop": "FLOPs", "byte": "bytes", "ns": "ns of host time"}


def hot_path(trace: Trace, by: Metric = "flops") -> HotPathReport:
    """Rank the source lines of a trace by forward FLOPs, activation memory or duration.

    A thin view over :func:`hot_path_rows`: the report's table holds its rows unchanged and
    ``to_pandas().attrs`` its attrs, so both spellings report identical facts.

    Example:
        >>> import torch
        >>> from torch import nn
        >>> from torchlens_nb.capture import trace
        >>> report = hot_path(trace(nn.Linear(2, 2), torch.ones(1, 2)), by="flops")
        >>> report.table().rows[0][3]  # 2 * 1 * 2 * 2
        8
    """
    rows, attrs = hot_path_rows(trace, by)
    unit = attrs["unit"]
    unavailable = (
        ()
        if attrs["has_source_lines"]
        else (
            Unavailable(
                "source lines",
                "the trace was captured with CaptureOptions(source_lines=False); every "
                "op is excluded",
                "no_source_line",
            ),
        )
    )
    top = rows[0] if rows else None
    where = source_line_text(top["source_line"]) if top else ""
    lead = (
        f"{where} carries {top['share']:.0%} of {attrs['total']:,} {_UNIT_WORDS[unit]}"
        if top is not None and top["share"] is not None
        else f"no op could be ranked by {by}"
    )
    findings = []
    if attrs["excluded"]:
        reasons = ", ".join(
            f"{n} {r.replace('_', ' ')}" for r, n in attrs["excluded_by_reason"].items()
        )
        findings.append(
            Finding(
                "hot_path_excluded",
                "info",
                f"{attrs['excluded']} op(s) are not ranked ({reasons}).",
                fields=dict(attrs["excluded_by_reason"]),
            )
        )
    return HotPathReport(
        subject=f"{trace.model_type} ({len(trace)} ops) by {by}",
        status="ranked" if rows else "empty",
        lead=lead,
        findings=tuple(findings),
        tables=(Table.from_dicts("hot_path", rows, HOT_PATH_COLUMNS, attrs),),
        disclosures=(attrs["basis"],),
        unavailable=unavailable,
        metric=by,
        unit=unit,
        total=float(attrs["total"]),
        excluded=attrs["excluded"],
    )


def _check_budget(budget_gb: Any) -> int | None:
    if budget_gb is None:
        return None
    gigabytes = check_number(
        "budget_gb", budget_gb, low=0, expect="None or a finite number of gigabytes >= 0"
    )
    return int(gigabytes * BYTES_PER_GB)


def recompute_rows(
    trace: Trace, budget_bytes: int | None
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Candidates ranked by bytes per FLOP with the greedy budget set; see ``RECOMPUTE_COLUMNS``.

    Model outputs (needed after the forward anyway), ops allocating nothing and ops without a
    FLOP formula are excluded and counted. Zero-FLOP ops that allocate (copies, casts, ``cat``)
    rank first: recomputing them costs no arithmetic (``bytes_per_flop`` is inf).
    """
    candidates = []
    excluded: dict[str, int] = {}
    total_bytes = 0
    for op in trace:
        size = activation_bytes(op)
        total_bytes += size
        flops = op_flops(op).flops
        reason = (
            "input"
            if op.is_input
            else "model_output"
            if op.is_output
            else "no_new_memory"
            if size == 0
            else "no_flop_formula"
            if flops is None
            else None
        )
        if reason is not None:
            if reason != "input":
                excluded[reason] = excluded.get(reason, 0) + 1
            continue
        candidates.append((op, size, flops, size / flops if flops else math.inf))
    candidates.sort(key=lambda c: (-c[3], -c[1], c[0].index))
    remaining = total_bytes
    rows: list[dict[str, Any]] = []
    for rank, (op, size, flops, ratio) in enumerate(candidates, start=1):
        selected = budget_bytes is not None and remaining > budget_bytes
        remaining -= size
        rows.append(
            {
                "rank": rank,
                "op": op.label,
                "func": op.func,
                "module": op.module,
                "bytes": size,
                "flops": flops,
                "bytes_per_flop": ratio,
                "is_selected": selected,
                "remaining_bytes": remaining,
                "source_line": source_line(op),
            }
        )
    chosen = [r for r in rows if r["is_selected"]]
    selected_bytes = sum(r["bytes"] for r in chosen)
    attrs = {
        "total_bytes": total_bytes,
        "budget_bytes": budget_bytes,
        "selected_bytes": selected_bytes,
        "selected_flops": sum(r["flops"] for r in chosen),
        "is_budget_reached": None
        if budget_bytes is None
        else total_bytes - selected_bytes <= budget_bytes,
        "excluded": sum(excluded.values()),
        "excluded_by_reason": excluded,
    }
    return rows, attrs


def recompute_candidates(trace: Trace, *, budget_gb: float | None = None) -> RecomputeReport:
    """Rank ops by activation memory per forward FLOP; with ``budget_gb``, mark the greedy set
    whose recomputation brings the forward's activation bytes down to the budget.

    "Activation bytes" is what a save-everything forward keeps alive (each op's newly allocated
    outputs); autograd may save fewer or other tensors, so read the budget as an upper bound.

    Example:
        >>> import torch
        >>> from torch import nn
        >>> from torchlens_nb.capture import trace
        >>> t = trace(nn.Sequential(nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 2)), torch.ones(1, 2))
        >>> [row[1] for row in recompute_candidates(t).table().rows]
        ['relu_1', 'linear_1']
    """
    _check_trace(trace)
    budget_bytes = _check_budget(budget_gb)
    rows, attrs = recompute_rows(trace, budget_bytes)
    reached = attrs["is_budget_reached"]
    if budget_bytes is None:
        lead = (
            f"{len(rows)} candidates; {rows[0]['op']} frees the most bytes per FLOP"
            if rows
            else "no op can be recomputed to save activation memory"
        )
    else:
        lead = (
            f"recomputing {sum(r['is_selected'] for r in rows)} ops frees "
            f"{attrs['selected_bytes']:,} bytes for {attrs['selected_flops']:,} FLOPs"
            + ("" if reached else f"; the budget of {budget_bytes:,} bytes is NOT reached")
        )
    findings = (
        ()
        if reached is not False
        else (
            Finding(
                "recompute_budget_not_reached",
                "warning",
                f"even recomputing every candidate leaves {attrs['total_bytes'] - attrs['selected_bytes']:,}"
                f" bytes, above the budget of {budget_bytes:,}.",
                remedy="raise budget_gb, lower the batch size, or shard activations.",
            ),
        )
    )
    return RecomputeReport(
        subject=f"{trace.model_type} ({len(trace)} ops)",
        status="ranked" if rows else "empty",
        lead=lead,
        findings=findings,
        tables=(Table.from_dicts("recompute", rows, RECOMPUTE_COLUMNS, attrs),),
        disclosures=(
            "bytes are each op's newly allocated outputs; autograd may save fewer "
            "tensors, so the budget is an upper bound",
        ),
        total_bytes=attrs["total_bytes"],
        budget_bytes=budget_bytes,
        selected_bytes=attrs["selected_bytes"],
        selected_flops=attrs["selected_flops"],
        is_budget_reached=reached,
    )
