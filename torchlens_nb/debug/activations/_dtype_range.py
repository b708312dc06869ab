"""``tl.debug.dtype_range``: numeric-range and precision hazards of saved activations.

Four hazards, each a finding code and a ``flags`` entry of the op's row:

* ``nonfinite``: NaN or Inf values that matter, judged by the NaN tools' rule
  (``nonfinite/_paths.py``): a NaN always, an Inf when it reaches the output or a NaN. An Inf
  neutralised on every path (a -inf causal mask before softmax) is flagged ``intentional_inf``
  instead and disclosed, not found;
* ``near_max``: a finite magnitude ``>= max_fraction * finfo(dtype).max`` (fp16 overflows at
  65504: the next multiply may turn it into Inf);
* ``subnormal_heavy``: at least ``subnormal_fraction_threshold`` of ALL elements are subnormal
  (``0 < |x| < finfo(dtype).tiny``), where precision is lost and some kernels flush to zero;
* ``downcast``: the op's floating output has less range or precision (a smaller
  ``finfo.max`` or a larger ``finfo.eps``) than a floating input it was given, read from the
  recorded argument dtypes (``op.arg_meta``), so it covers unsaved ops too.

Value hazards need a saved floating-point output: ``num_audited_ops`` of ``num_ops`` were
inspected, and the others are counted, never guessed. The values are reduced by
``_segment_stats`` (segmented reductions per dtype, one host copy per device): on the 21,000-op
per-head attention trace of ``benchmarks/bench_audit.py`` that took dtype_range from 8-10 s to
the figure the benchmark prints.
"""

from __future__ import annotations

from typing import Any

import torch

from ..._validate import check_number
from ...capture import Trace
from ...capture._gc_pause import paused_gc
from ...errors import DiagnosticArgumentError
from ...report import Finding, Table
from ...report._activations import DTYPE_RANGE_COLUMNS, DTypeRangeReport, DTypeRangeStatus
from ...report._nonfinite import ValueStats
from .._blind_spots import blind_spot_disclosures, blind_spot_unavailable, unless_blind
from .._segment_stats import SegmentStats, segment_stats
from .._values import saved_tensors, where_of
from ..lineage._row_actions import ROW_ACTION_ATTRS, row_actions
from ..nonfinite._forward_scan import facts_from_stats
from ..nonfinite._texts import intentional_text


def dtype_range_rows(
    trace: Trace,
    *,
    max_fraction: float = 0.9,
    subnormal_fraction_threshold: float = 0.1,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The pandas-free core of :func:`dtype_range`: ``(rows, attrs)``, one row per op.

    ``attrs`` hold both thresholds, ``num_audited_ops``, ``num_ops``, ``not_audited``
    (``{"not_saved": n, "not_floating": n}``) and ``num_intentional`` (outputs holding an
    intentional infinity). Same arguments, errors and cost as :func:`dtype_range`.
    """
    rows, attrs, _ = _audit(
        trace, max_fraction=max_fraction, subnormal_fraction_threshold=subnormal_fraction_threshold
    )
    return rows, attrs


def _audit(
    trace: Trace, *, max_fraction: float, subnormal_fraction_threshold: float
) -> tuple[list[dict[str, Any]], dict[str, Any], str | None]:
    """Rows, attrs and the disclosure of the intentional infinities (None when there is none)."""
    if not isinstance(trace, Trace):
        raise DiagnosticArgumentError(
            f"dtype_range reads a tl.trace(...) result, got {type(trace).__name__}."
        )
    for name, value in (
        ("max_fraction", max_fraction),
        ("subnormal_fraction_threshold", subnormal_fraction_threshold),
    ):
        check_number(name, value, low=0, high=1, low_open=True, expect="in (0, 1]")
    rows: list[dict[str, Any]] = []
    audited: list[tuple[dict[str, Any], list[torch.Tensor]]] = []
    not_audited = {"not_saved": 0, "not_floating": 0}
    downcasts: dict[tuple[str | None, tuple[str, ...]], str | None] = {}
    for op in trace.ops:
        arg_dtypes = tuple(name for _, name in op.arg_meta)
        downcast = downcasts.get((op.dtype, arg_dtypes), _UNSEEN)
        if downcast is _UNSEEN:
            downcast = downcasts[(op.dtype, arg_dtypes)] = _downcast_from(op.dtype, arg_dtypes)
        tensors = (
            [t for t in saved_tensors(op.out) if t.is_floating_point()] if op.has_saved else []
        )
        row: dict[str, Any] = {
            "op": op.label,
            "module": op.module,
            "dtype": op.dtype,
            "is_audited": bool(tensors),
            "numel": op.numel,
            "nan_count": None,
            "inf_count": None,
            "max_abs": None,
            "dtype_max": None,
            "subnormal_frac": None,
            "downcast_from": downcast,
            "flags": (),
            "source_line": f"{op.file}:{op.line}" if op.file else None,
        }
        rows.append(row)
        if tensors:
            audited.append((row, tensors))
        else:
            not_audited["not_saved" if not op.has_saved else "not_floating"] += 1
    flat = segment_stats([t for _, tensors in audited for t in tensors])
    pooled = []
    start = 0
    for _, tensors in audited:
        pooled.append(_pooled(flat[start : start + len(tensors)]))
        start += len(tensors)
    facts = facts_from_stats(
        trace, {row["op"]: stats for (row, _), (stats, _) in zip(audited, pooled)}
    )
    paths = facts.paths()
    intentional = set(paths.intentional_holders)
    finfos: dict[torch.dtype, Any] = {}
    for (row, tensors), (stats, subnormals) in zip(audited, pooled):
        dtype = tensors[0].dtype
        finfo = finfos.get(dtype) or finfos.setdefault(dtype, torch.finfo(dtype))
        row["dtype"] = str(dtype).removeprefix("torch.")
        row["numel"] = stats.numel
        row["nan_count"] = stats.nan_count
        row["inf_count"] = stats.posinf_count + stats.neginf_count
        row["max_abs"] = max_abs = (
            None
            if stats.finite_min is None or stats.finite_max is None
            else max(-stats.finite_min, stats.finite_max)
        )
        row["dtype_max"] = finfo.max
        row["subnormal_frac"] = subnormal = subnormals / stats.numel if stats.numel else 0.0
        flags = []
        if not stats.is_finite:
            flags.append("intentional_inf" if row["op"] in intentional else "nonfinite")
        if max_abs is not None and max_abs >= max_fraction * finfo.max:
            flags.append("near_max")
        if subnormal and subnormal >= subnormal_fraction_threshold:
            flags.append("subnormal_heavy")
        row["flags"] = tuple(flags)
    for row in rows:
        if row["downcast_from"] is not None:
            row["flags"] += ("downcast",)
    attrs = {
        "max_fraction": float(max_fraction),
        "subnormal_fraction_threshold": float(subnormal_fraction_threshold),
        "num_audited_ops": len(audited),
        "num_ops": len(rows),
        "not_audited": not_audited,
        "num_intentional": len(intentional),
    }
    return rows, attrs, intentional_text(facts, paths)


@paused_gc()
def dtype_range(
    trace: Trace, *, max_fraction: float = 0.9, subnormal_fraction_threshold: float = 0.1
) -> DTypeRangeReport:
    """Audit saved activations for non-finite, near-max, subnormal-heavy and downcast hazards.

    Args:
        trace: any trace (a PartialTrace too); value hazards need saved outputs.
        max_fraction: flag finite magnitudes at or above this fraction of the dtype's max.
        subnormal_fraction_threshold: flag outputs with at least this fraction of subnormal
            elements.

    Returns:
        A :class:`~torchlens_nb.report.DTypeRangeReport`: findings, coverage
        (``num_audited_ops`` / ``num_ops``) and one table row per op.

    Raises:
        DiagnosticArgumentError: a threshold outside (0, 1].

    Cost: six segmented reductions per (device, dtype) over the saved floating outputs
    (``_segment_stats``), one host sync per device in all.

    Example:
        >>> import torch, torchlens_nb as tl
        >>> t = tl.trace(torch.nn.ReLU(), torch.tensor([[-1.0, 2.0]]))
        >>> audit = tl.debug.dtype_range(t)
        >>> len(audit.findings), audit.num_audited_ops, audit.num_ops
        (0, 2, 2)
    """
    rows, attrs, intentional = _audit(
        trace, max_fraction=max_fraction, subnormal_fraction_threshold=subnormal_fraction_threshold
    )
    findings = _findings(trace, rows)
    audited, total = attrs["num_audited_ops"], attrs["num_ops"]
    serious = [f for f in findings if f.severity != "info"]
    status: DTypeRangeStatus
    if serious:
        status = "found"
        lead = f"{len(serious)} range hazards in {audited} of {total} audited ops."
    elif audited:
        status = "clean"
        lead = (
            f"no non-finite, near-max or subnormal-heavy value in the {audited} audited "
            f"ops (of {total})."
        )
    else:
        status, lead = "unknown", f"none of the {total} ops had a saved floating-point output."
    status, lead = unless_blind(status, lead, trace, "unknown")
    disclosures = [intentional] if intentional else []
    disclosures.extend(blind_spot_disclosures(trace))
    if audited < total:
        missing = attrs["not_audited"]
        disclosures.append(
            f"{total - audited} ops were not audited for values ({missing['not_saved']} not "
            f"saved, {missing['not_floating']} not floating point); downcasts "
            "are read from recorded dtypes for every op."
        )
    return DTypeRangeReport(
        subject=f"{trace.model_type} ({total} ops)",
        status=status,
        lead=lead,
        findings=tuple(findings),
        tables=(
            Table.from_dicts(
                "dtype_range", rows, DTYPE_RANGE_COLUMNS, {**attrs, **ROW_ACTION_ATTRS}
            ),
        ),
        disclosures=tuple(disclosures),
        unavailable=blind_spot_unavailable(trace, "range audit"),
        actions=row_actions(trace),
        num_audited_ops=audited,
        num_ops=total,
        max_fraction=attrs["max_fraction"],
        subnormal_fraction_threshold=attrs["subnormal_fraction_threshold"],
    )


def _dtype(name: str | None) -> torch.dtype | None:
    dtype = getattr(torch, name, None) if name else None
    return dtype if isinstance(dtype, torch.dtype) and dtype.is_floating_point else None


_UNSEEN: Any = object()
"""Cache sentinel: a (dtype, argument dtypes) pair not yet classified."""


def _downcast_from(out_name: str | None, arg_dtypes: tuple[str, ...]) -> str | None:
    """The first floating input dtype with more range or precision than the output's."""
    out = _dtype(out_name)
    if out is None:
        return None
    narrow = torch.finfo(out)
    for name in arg_dtypes:
        source = _dtype(name)
        if source is not None:
            wide = torch.finfo(source)
            if wide.max > narrow.max or wide.eps < narrow.eps:
                return name
    return None


def _pooled(stats: list[SegmentStats]) -> tuple[ValueStats, int]:
    """The statistics of an op's output tensors pooled into one, and the subnormal count."""
    if len(stats) == 1:
        return stats[0].values, stats[0].subnormal_count
    values = [s.values for s in stats]
    lows = [v.finite_min for v in values if v.finite_min is not None]
    highs = [v.finite_max for v in values if v.finite_max is not None]
    finite = [(v.numel - v.nan_count - v.posinf_count - v.neginf_count, v) for v in values]
    count = sum(n for n, _ in finite)
    pooled = ValueStats(
        numel=sum(v.numel for v in values),
        nan_count=sum(v.nan_count for v in values),
        posinf_count=sum(v.posinf_count for v in values),
        neginf_count=sum(v.neginf_count for v in values),
        finite_min=min(lows) if lows else None,
        finite_max=max(highs) if highs else None,
        finite_mean=sum(n * (v.finite_mean or 0.0) for n, v in finite) / count if count else None,
    )
    return pooled, sum(s.subnormal_count for s in stats)


def _findings(trace: Trace, rows: list[dict[str, Any]]) -> list[Finding]:
    findings = []
    nonfinite = [r for r in rows if "nonfinite" in r["flags"]]
    if nonfinite:
        first = nonfinite[0]
        findings.append(
            Finding(
                code="nonfinite_values",
                severity="critical",
                message=(
                    f"{len(nonfinite)} saved outputs hold NaN or Inf; the first is {first['op']} "
                    f"({first['nan_count']} NaN, {first['inf_count']} Inf of {first['numel']})."
                ),
                where=where_of(trace[first["op"]]),
                remedy="tl.debug.nonfinite_origin(trace) names the op where they are born.",
                fields={"count": len(nonfinite), "ops": [r["op"] for r in nonfinite[:20]]},
            )
        )
    for row in rows:
        if not row["flags"]:
            continue
        where = where_of(trace[row["op"]])
        if "near_max" in row["flags"]:
            findings.append(
                Finding(
                    code="near_dtype_max",
                    severity="warning",
                    message=(
                        f"{row['op']} reaches {row['max_abs']:.6g}, "
                        f"{row['max_abs'] / row['dtype_max']:.0%} of {row['dtype']}'s finite "
                        f"max {row['dtype_max']:.6g}."
                    ),
                    where=where,
                    remedy=(
                        "compute this op in a wider dtype (float32/bfloat16) or "
                        "rescale its inputs; one more multiply may overflow to Inf."
                    ),
                    fields={"max_abs": row["max_abs"], "dtype_max": row["dtype_max"]},
                )
            )
        if "subnormal_heavy" in row["flags"]:
            findings.append(
                Finding(
                    code="subnormal_heavy",
                    severity="warning",
                    message=(
                        f"{row['subnormal_frac']:.0%} of {row['op']}'s {row['numel']} values "
                        f"are subnormal in {row['dtype']} (precision is lost below "
                        f"{torch.finfo(getattr(torch, row['dtype'])).tiny:.3g})."
                    ),
                    where=where,
                    remedy="rescale the values or keep this op in a wider dtype.",
                    fields={"subnormal_frac": row["subnormal_frac"]},
                )
            )
        if "downcast" in row["flags"]:
            findings.append(
                Finding(
                    code="downcast",
                    severity="info",
                    message=f"{row['op']} outputs {row['dtype']} from a {row['downcast_from']} input.",
                    where=where,
                    remedy="expected under autocast; otherwise check the explicit cast.",
                    fields={"from": row["downcast_from"], "to": row["dtype"]},
                )
            )
    return findings
