"""Compare two runs: ``compare`` / ``compare_rows`` / ``first_divergence`` on traces, and
``compare_params`` on models.

Traces are aligned on op labels (``relu_1`` in one run is ``relu_1`` in the other) and rows keep
EXECUTION order: ops of ``trace_a`` in order, each op only ``trace_b`` has slotted in before the
next shared op that follows it in ``trace_b``. ``trace_b`` is the reference of the tolerance
(``|a - b| <= atol + rtol * |b|``, as ``torch.allclose``). Values on different devices are
compared on the CPU, different dtypes in ``torch.promote_types`` of the two, and integer and
boolean values exactly; each row's ``reason`` names the alignment used. NaN equals NaN at the same
position (``equal_nan=True``): two runs that both produce NaN there agree.

Cost: for each compared op a handful of element-wise kernels on its device and one host sync.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import nn

from ..._validate import check_bool, check_number
from ...capture import Op, Trace, validate_model
from ...errors import DiagnosticArgumentError
from ...report import Exit, Finding, LineageReport, Table, Unavailable, Where
from ...report._compare import (
    COMPARE_COLUMNS,
    COMPARE_PARAMS_COLUMNS,
    DIVERGED_STATUSES,
    VALUE_STATS_COLUMNS,
    CompareParamsReport,
    CompareReport,
)
from .._blind_spots import blind_spot_disclosures, blind_spot_unavailable, unless_blind
from ..lineage._row_actions import lineage_follow_up

Tolerance = Callable[[Op], tuple[float, float]]
"""``tolerance(op_b) -> (rtol, atol)`` for one aligned op (bisect_precision varies it per op)."""


@dataclass(frozen=True)
class ValueDiff:
    """How far two tensors are apart."""

    alignment: str
    """How they were made comparable, e.g. ``"in float64 (float32 vs float64)"``."""
    is_exact: bool
    """Compared for equality (integer / boolean values), not within a tolerance."""
    max_abs: float
    max_rel: float
    """Max of ``|a - b| / max(|a|, |b|)`` (0 where both are 0; inf where one side is NaN)."""
    mismatched: int
    """Elements outside the tolerance (exact: unequal)."""
    numel: int

    @property
    def is_close(self) -> bool:
        return self.mismatched == 0


def check_tolerance(rtol: float, atol: float) -> None:
    """Refuse negative, NaN or infinite tolerances before any work."""
    for name, value in (("rtol", rtol), ("atol", atol)):
        check_number(name, value, low=0, hint="e.g. rtol=1e-5, atol=1e-8")


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _readable(tensor: torch.Tensor) -> torch.Tensor:
    if tensor.is_quantized:
        return tensor.dequantize()
    return tensor.to_dense() if tensor.layout != torch.strided else tensor


def diff_values(a: torch.Tensor, b: torch.Tensor, rtol: float, atol: float) -> ValueDiff:
    """Compare ``a`` with the reference ``b`` of the same shape (see the module docstring)."""
    notes = []
    a, b = _readable(a.detach()), _readable(b.detach())
    if a.device != b.device:
        notes.append(f"on cpu ({a.device} vs {b.device})")
        a, b = a.cpu(), b.cpu()
    if a.dtype != b.dtype:
        dtype = torch.promote_types(a.dtype, b.dtype)
        notes.append(f"in {_dtype_name(dtype)} ({_dtype_name(a.dtype)} vs {_dtype_name(b.dtype)})")
        a, b = a.to(dtype), b.to(dtype)
    exact = not (a.dtype.is_floating_point or a.dtype.is_complex)
    if exact:
        notes.append(f"exact ({_dtype_name(a.dtype)})")
    alignment = ", ".join(notes) or "same dtype and device"
    if a.numel() == 0:
        return ValueDiff(alignment, exact, 0.0, 0.0, 0, 0)
    with torch.no_grad():
        if exact:
            bad = a != b
            a, b = a.to(torch.float64), b.to(torch.float64)
        else:
            bad = ~torch.isclose(a, b, rtol=rtol, atol=atol, equal_nan=True)
            if a.dtype in (torch.float16, torch.bfloat16):  # their differences overflow early
                a, b = a.float(), b.float()
        same = (a == b) | (torch.isnan(a) & torch.isnan(b))
        diff = torch.where(
            same, torch.zeros((), dtype=a.real.dtype, device=a.device), (a - b).abs()
        ).nan_to_num(nan=math.inf)
        scale = torch.maximum(a.abs(), b.abs())
        rel = torch.where(diff == 0, torch.zeros_like(diff), diff / scale).nan_to_num(nan=math.inf)
        summary = torch.stack([diff.max().double(), rel.max().double(), bad.sum().double()])
        max_abs, max_rel, mismatched = summary.tolist()
    return ValueDiff(alignment, exact, max_abs, max_rel, int(mismatched), a.numel())


def value_stats(tensor: torch.Tensor) -> dict[str, float | int]:
    """min, max, mean, std over the finite elements, plus NaN and Inf counts (one host sync)."""
    t = _readable(tensor.detach())
    if t.is_complex():
        t = t.abs()
    t = t.to(torch.float64)
    with torch.no_grad():
        finite = t[torch.isfinite(t)]
        nan = torch.isnan(t).sum().double()
        inf = torch.isinf(t).sum().double()
        if finite.numel() == 0:
            nan_count, inf_count = torch.stack([nan, inf]).tolist()
            return {
                "min": math.nan,
                "max": math.nan,
                "mean": math.nan,
                "std": math.nan,
                "nan_count": int(nan_count),
                "inf_count": int(inf_count),
            }
        std = finite.std(correction=0) if finite.numel() > 1 else torch.zeros((), dtype=t.dtype)
        low, high, mean, spread, nan_count, inf_count = torch.stack(
            [finite.min(), finite.max(), finite.mean(), std, nan, inf]
        ).tolist()
    return {
        "min": low,
        "max": high,
        "mean": mean,
        "std": spread,
        "nan_count": int(nan_count),
        "inf_count": int(inf_count),
    }


def tensors_of(op: Op) -> list[torch.Tensor]:
    """The saved output tensors of ``op`` (empty when nothing was saved)."""
    if not op.has_saved:
        return []
    return list(op.out) if isinstance(op.out, tuple) else [op.out]


def source_line(op: Op) -> str | None:
    return f"{op.file}:{op.line}" if op.file else None


def aligned_ops(trace_a: Trace, trace_b: Trace) -> Iterator[tuple[Op | None, Op | None]]:
    """Pairs of same-label ops in execution order; an op only one trace has pairs with None."""
    in_a = {op.label for op in trace_a}
    b_ops = list(trace_b)
    next_b = 0
    for op_a in trace_a:
        op_b = trace_b[op_a.label] if op_a.label in trace_b else None  # noqa: SIM401
        if op_b is not None:
            for candidate in b_ops[next_b : op_b.index]:
                if candidate.label not in in_a:
                    yield None, candidate
            next_b = max(next_b, op_b.index + 1)
        yield op_a, op_b
    for candidate in b_ops[next_b:]:
        if candidate.label not in in_a:
            yield None, candidate


def _structure_note(op_a: Op, op_b: Op) -> str | None:
    if op_a.parents != op_b.parents:
        return f"parents {list(op_a.parents)} vs {list(op_b.parents)}"
    if op_a.module != op_b.module:
        return f"module {op_a.module!r} vs {op_b.module!r}"
    return None


def compare_ops(
    op_a: Op | None,
    op_b: Op | None,
    tolerance: Tolerance,
    stats: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """One comparison row (keys: ``COMPARE_COLUMNS``); appends both sides' value statistics to
    ``stats`` when given and the values were compared."""
    base = op_a if op_a is not None else op_b
    assert base is not None
    row: dict[str, Any] = {
        "op": base.label,
        "index_a": None if op_a is None else op_a.index,
        "index_b": None if op_b is None else op_b.index,
        "kind": "input" if base.is_input else "op",
        "func": base.func,
        "module": base.module,
        "shape_a": None if op_a is None else op_a.shape,
        "shape_b": None if op_b is None else op_b.shape,
        "dtype_a": None if op_a is None else op_a.dtype,
        "dtype_b": None if op_b is None else op_b.dtype,
        "max_abs_diff": None,
        "max_rel_diff": None,
        "mismatched": None,
        "numel": base.numel,
        "allclose": None,
        "source_line": source_line(base),
    }
    if op_a is None or op_b is None:
        row.update(
            status="only_in_b" if op_a is None else "only_in_a",
            reason=f"op ran only in trace_{'b' if op_a is None else 'a'}",
        )
        return row
    values_a, values_b = tensors_of(op_a), tensors_of(op_b)
    shapes_a: list[tuple[int, ...] | None] = [tuple(t.shape) for t in values_a]
    shapes_b: list[tuple[int, ...] | None] = [tuple(t.shape) for t in values_b]
    shapes_a = shapes_a or [op_a.shape] * op_a.num_outputs
    shapes_b = shapes_b or [op_b.shape] * op_b.num_outputs
    structure = _structure_note(op_a, op_b)
    if shapes_a != shapes_b:
        row.update(status="shape_diverged", reason=f"shape {shapes_a} vs {shapes_b}")
    elif not values_a or not values_b:
        side = "trace_a" if not values_a else "trace_b"
        row.update(status="not_saved", reason=f"output not saved in {side} (save= selector)")
    elif any(t.device.type == "meta" for t in values_a + values_b):
        row.update(status="not_comparable", reason="meta tensor: no values to compare")
    else:
        rtol, atol = tolerance(op_b)
        diffs = [diff_values(a, b, rtol, atol) for a, b in zip(values_a, values_b)]
        close = all(d.is_close for d in diffs)
        row.update(
            max_abs_diff=max(d.max_abs for d in diffs),
            max_rel_diff=max(d.max_rel for d in diffs),
            mismatched=sum(d.mismatched for d in diffs),
            allclose=close,
            status="match" if close else "value_diverged",
            reason=diffs[0].alignment,
        )
        if stats is not None:
            for side, tensor in (("a", values_a[0]), ("b", values_b[0])):
                stats.append({"op": base.label, "side": side, **value_stats(tensor)})
    if base.is_input and row["status"] in ("value_diverged", "shape_diverged"):
        row["status"] = "input_differs"
    elif structure is not None and row["status"] in ("match", "value_diverged", "not_saved"):
        row.update(status="structure_diverged", reason=f"{structure}; {row['reason']}")
    return row


def _constant(rtol: float, atol: float) -> Tolerance:
    return lambda op: (rtol, atol)


def _check_traces(trace_a: Any, trace_b: Any) -> None:
    for name, value in (("trace_a", trace_a), ("trace_b", trace_b)):
        if not isinstance(value, Trace):
            raise DiagnosticArgumentError(
                f"{name} must be a tl.trace(...) result, got {type(value).__name__}; capture "
                "both runs with tl.trace(model, inputs) first."
            )


def _rows(
    trace_a: Trace,
    trace_b: Trace,
    rtol: float,
    atol: float,
    stats: list[dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    _check_traces(trace_a, trace_b)
    check_tolerance(rtol, atol)
    return [
        compare_ops(a, b, _constant(rtol, atol), stats) for a, b in aligned_ops(trace_a, trace_b)
    ]


def summarize(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Counts per status, ``compared``, ``matched``, alignment counts, the first divergence."""
    counts = {
        status: 0
        for status in (
            "match",
            "value_diverged",
            "shape_diverged",
            "structure_diverged",
            "input_differs",
            "only_in_a",
            "only_in_b",
            "not_saved",
            "not_comparable",
        )
    }
    alignment: dict[str, int] = {}
    first = None
    for row in rows:
        counts[row["status"]] += 1
        if row["allclose"] is not None:  # the alignment is the reason's last part
            how = row["reason"].split("; ")[-1]
            alignment[how] = alignment.get(how, 0) + 1
        if first is None and row["status"] in DIVERGED_STATUSES:
            first = row
    counts["compared"] = sum(1 for row in rows if row["allclose"] is not None)
    counts["matched"] = sum(
        1 for row in rows if row["index_a"] is not None and row["index_b"] is not None
    )
    return {"counts": counts, "alignment": alignment, "first": first}


def compare_rows(
    trace_a: Trace, trace_b: Trace, *, rtol: float = 1e-5, atol: float = 1e-8
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The pandas-free core of :func:`compare`: ``(rows, attrs)``.

    Rows are dicts with the ``COMPARE_COLUMNS`` keys, in execution order. ``attrs`` holds
    ``rtol``, ``atol``, one count per status (``value_diverged``, ``shape_diverged``,
    ``structure_diverged``, ``input_differs``, ``only_in_a``, ``only_in_b``, ``not_saved``,
    ``not_comparable``, ``match``), ``compared``, ``matched``, ``alignment`` and
    ``first_divergence`` (a label or None).
    """
    rows = _rows(trace_a, trace_b, rtol, atol)
    return rows, _attrs(summarize(rows), rtol, atol)


def _attrs(summary: dict[str, Any], rtol: float, atol: float) -> dict[str, Any]:
    first = summary["first"]
    return {
        "rtol": rtol,
        "atol": atol,
        **summary["counts"],
        "alignment": summary["alignment"],
        "first_divergence": None if first is None else first["op"],
    }


def first_divergence(
    trace_a: Trace, trace_b: Trace, *, rtol: float = 1e-5, atol: float = 1e-8
) -> dict[str, Any] | None:
    """The first execution-order row of :func:`compare_rows` where the runs separate (value,
    shape or structure), or None when every aligned op agrees. Input rows never count: a
    different input is evidence, not a divergence of the computation.

    Example:
        >>> import torch
        >>> from torch import nn
        >>> from torchlens_nb.capture import trace
        >>> a = trace(nn.ReLU(), torch.tensor([[-1.0, 2.0]]))
        >>> b = trace(nn.ReLU(), torch.tensor([[-1.0, 3.0]]))
        >>> first_divergence(a, b)["op"]
        'relu_1'
    """
    return summarize(_rows(trace_a, trace_b, rtol, atol))["first"]


def compare(
    trace_a: Trace, trace_b: Trace, *, rtol: float = 1e-5, atol: float = 1e-8
) -> CompareReport:
    """Compare the saved activations of two traces op by op (labels aligned, execution order).

    Returns a :class:`~torchlens_nb.report._compare.CompareReport` whose ``to_pandas()`` is the
    ``comparison`` table (``COMPARE_COLUMNS``) with the counts of :func:`compare_rows` in
    ``attrs``, plus a ``value_stats`` table of both sides for the panel. Nothing is re-run.

    Example:
        >>> import torch
        >>> from torch import nn
        >>> from torchlens_nb.capture import trace
        >>> left = trace(nn.ReLU(), torch.tensor([[-1.0, 2.0]]))
        >>> right = trace(nn.ReLU(), torch.tensor([[-1.0, 3.0]]))
        >>> compare(left, right).to_pandas().attrs["value_diverged"]
        1
    """
    stats: list[dict[str, Any]] = []
    rows = _rows(trace_a, trace_b, rtol, atol, stats)
    return _compare_report(
        rows,
        stats,
        subject=(
            f"{trace_a.model_type} ({len(trace_a)} ops) vs {trace_b.model_type} ({len(trace_b)} ops)"
        ),
        rtol=rtol,
        atol=atol,
        lineage_of=lineage_follow_up(trace_a, direction="ancestors", max_depth=None),
        unseen=trace_a if trace_a.blind_spots else trace_b,
    )


def coverage_line(counts: dict[str, int], alignment: dict[str, int]) -> str:
    """``coverage: compared 5 of 7 aligned ops (2 not saved); aligned: 5 same dtype and device``."""
    skipped = [
        f"{counts[k]} {k.replace('_', ' ')}"
        for k in ("not_saved", "not_comparable", "shape_diverged")
        if counts[k]
    ]
    aligned = "; ".join(f"{n} {reason}" for reason, n in alignment.items()) or "none"
    return (
        f"coverage: compared {counts['compared']} of {counts['matched']} aligned ops"
        + (f" ({', '.join(skipped)})" if skipped else "")
        + f"; aligned: {aligned}"
    )


def _where(row: dict[str, Any]) -> Where:
    file, line = row["source_line"].rsplit(":", 1) if row["source_line"] else (None, None)
    return Where(
        op=row["op"],
        module=row["module"] or None,
        file=file,
        line=None if line is None else int(line),
    )


def _compare_report(
    rows: Sequence[dict[str, Any]],
    stats: Sequence[dict[str, Any]],
    *,
    subject: str,
    rtol: float,
    atol: float,
    lineage_of: Callable[..., LineageReport],
    unseen: Trace,
) -> CompareReport:
    """The report of :func:`compare` from its rows and value statistics; a ``match`` on
    traces the capture could not see all of (``unseen``'s blind spots) is ``incomplete``."""
    summary = summarize(rows)
    counts, first = summary["counts"], summary["first"]
    findings = []
    if first is not None:
        findings.append(
            Finding(
                "first_divergence",
                "warning",
                f"the runs separate first at {first['op']} ({first['status'].replace('_', ' ')}: "
                f"{first['reason']}).",
                where=_where(first),
                remedy="inspect its inputs: tl.debug.lineage(trace_a, label) walks its ancestors.",
                fields={"status": first["status"], "max_abs_diff": first["max_abs_diff"]},
            )
        )
    if counts["input_differs"]:
        findings.append(
            Finding(
                "inputs_differ",
                "info",
                f"{counts['input_differs']} input op(s) differ between the runs; downstream "
                "differences may simply follow from them.",
            )
        )
    diverged = sum(counts[s] for s in DIVERGED_STATUSES)
    lead = (
        f"runs separate first at {first['op']} ({first['status'].replace('_', ' ')}); "
        f"{diverged} of {len(rows)} rows diverge"
        if first is not None
        else f"all {counts['compared']} compared ops agree within rtol={rtol:g}, atol={atol:g}"
    )
    verdict: Literal["match", "diverged", "incomplete"] = (
        "diverged" if first is not None else "match"
    )
    status, lead = unless_blind(verdict, lead, unseen, "incomplete", clean="match")
    return CompareReport(
        subject=subject,
        status=status,
        lead=lead,
        findings=tuple(findings),
        tables=(
            Table.from_dicts("comparison", rows, COMPARE_COLUMNS, _attrs(summary, rtol, atol)),
            Table.from_dicts("value_stats", stats, VALUE_STATS_COLUMNS),
        ),
        disclosures=(coverage_line(counts, summary["alignment"]), *blind_spot_disclosures(unseen)),
        unavailable=blind_spot_unavailable(unseen, "comparison"),
        exits=()
        if first is None or first["index_a"] is None
        else (
            Exit(
                f"Lineage of {first['op']}",
                f"tl.debug.lineage(trace_a, {first['op']!r})",
                action="lineage",
                args={"op": first["op"]},
            ),
        ),
        actions={"lineage": lineage_of},
        rtol=rtol,
        atol=atol,
        first_divergence=None if first is None else first["op"],
        first_divergence_status=None if first is None else first["status"],
        counts=counts,
        alignment=summary["alignment"],
        coverage=coverage_line(counts, summary["alignment"]),
    )


def _named_tensors(model: nn.Module, include_buffers: bool) -> dict[str, tuple[str, Any]]:
    named: dict[str, tuple[str, Any]] = {name: ("param", p) for name, p in model.named_parameters()}
    if include_buffers:
        named.update({name: ("buffer", b) for name, b in model.named_buffers()})
    return named


def compare_params(
    model_a: nn.Module,
    model_b: nn.Module,
    *,
    rtol: float = 1e-5,
    atol: float = 1e-8,
    include_buffers: bool = False,
) -> CompareParamsReport:
    """Align two models' parameters (and buffers with ``include_buffers=True``) on qualified
    names and compare their values; ``model_b`` is the tolerance reference.

    Shape or dtype mismatches and meta tensors skip the value comparison with the reason in the
    row (``allclose`` is None there). ``attrs``: ``matched`` (names in both), ``compared``,
    ``value_diverged``, ``skipped``, ``only_in_a``, ``only_in_b``, ``rtol``, ``atol``.

    Example:
        >>> torch.manual_seed(0) and None
        >>> left, right = nn.Linear(4, 2), nn.Linear(4, 2)
        >>> right.load_state_dict(left.state_dict())
        <All keys matched successfully>
        >>> with torch.no_grad():
        ...     _ = right.bias.add_(1.0)
        >>> report = compare_params(left, right)
        >>> report.counts["matched"], report.counts["value_diverged"]
        (2, 1)
    """
    validate_model(model_a, "model_a")
    validate_model(model_b, "model_b")
    check_tolerance(rtol, atol)
    check_bool("include_buffers", include_buffers)
    named_a = _named_tensors(model_a, include_buffers)
    named_b = _named_tensors(model_b, include_buffers)
    names = list(named_a) + [name for name in named_b if name not in named_a]
    rows = [_param_row(name, named_a.get(name), named_b.get(name), rtol, atol) for name in names]
    counts = {
        "matched": sum(1 for n in names if n in named_a and n in named_b),
        "compared": sum(1 for r in rows if r["allclose"] is not None),
        "value_diverged": sum(1 for r in rows if r["status"] == "value_diverged"),
        "skipped": sum(
            1 for r in rows if r["status"] in ("shape_mismatch", "dtype_mismatch", "meta")
        ),
        "only_in_a": sum(1 for r in rows if r["status"] == "only_in_a"),
        "only_in_b": sum(1 for r in rows if r["status"] == "only_in_b"),
    }
    diverged = [r["name"] for r in rows if r["status"] == "value_diverged"]
    mismatched = [r["status"] for r in rows if r["status"] in ("shape_mismatch", "dtype_mismatch")]
    unseen = [r["name"] for r in rows if r["status"] == "meta"]
    findings = (
        [
            Finding(
                "param_value_diverged",
                "warning",
                f"{len(diverged)} of {counts['compared']} compared tensors differ beyond "
                f"rtol={rtol:g}, atol={atol:g}: {', '.join(diverged[:5])}"
                + (" ..." if len(diverged) > 5 else "")
                + ".",
                fields={"names": diverged[:20]},
            )
        ]
        if diverged
        else []
    )
    skipped = [
        f"{r['name']}: {r['reason']}"
        for r in rows
        if r["status"] not in ("match", "value_diverged")
    ]
    differs = diverged or mismatched or counts["only_in_a"] or counts["only_in_b"]
    return CompareParamsReport(
        subject=f"{type(model_a).__name__} vs {type(model_b).__name__} ({len(names)} names)",
        status="diverged" if differs else "incomplete" if unseen else "match",
        lead=_params_lead(len(diverged), mismatched, counts),
        unavailable=tuple(
            Unavailable(name, "a meta tensor holds no values: not compared", "meta")
            for name in unseen
        ),
        findings=tuple(findings),
        tables=(
            Table.from_dicts(
                "compare_params",
                rows,
                COMPARE_PARAMS_COLUMNS,
                {**counts, "rtol": rtol, "atol": atol, "include_buffers": include_buffers},
            ),
        ),
        disclosures=tuple(f"skipped {s}" for s in skipped[:10]),
        rtol=rtol,
        atol=atol,
        include_buffers=include_buffers,
        counts=counts,
    )


def _param_row(
    name: str, a: tuple[str, Any] | None, b: tuple[str, Any] | None, rtol: float, atol: float
) -> dict[str, Any]:
    kind = (a or b)[0]  # type: ignore[index]
    ta = None if a is None else a[1]
    tb = None if b is None else b[1]
    row: dict[str, Any] = {
        "name": name,
        "kind": kind,
        "allclose": None,
        "shape_a": None if ta is None else tuple(ta.shape),
        "shape_b": None if tb is None else tuple(tb.shape),
        "dtype_a": None if ta is None else _dtype_name(ta.dtype),
        "dtype_b": None if tb is None else _dtype_name(tb.dtype),
        "max_abs_diff": None,
        "max_rel_diff": None,
        "mismatched": None,
        "numel": ta.numel() if ta is not None else tb.numel() if tb is not None else 0,
    }
    if ta is None or tb is None:
        row.update(
            status="only_in_b" if ta is None else "only_in_a",
            reason=f"no {kind} {name!r} in model_{'a' if ta is None else 'b'}",
        )
    elif ta.shape != tb.shape:
        row.update(status="shape_mismatch", reason=f"shape {tuple(ta.shape)} vs {tuple(tb.shape)}")
    elif ta.dtype != tb.dtype:
        row.update(
            status="dtype_mismatch",
            reason=f"dtype {_dtype_name(ta.dtype)} vs {_dtype_name(tb.dtype)}",
        )
    elif ta.device.type == "meta" or tb.device.type == "meta":
        row.update(status="meta", reason="meta tensor: no values to compare")
    else:
        diff = diff_values(ta, tb, rtol, atol)
        row.update(
            status="match" if diff.is_close else "value_diverged",
            allclose=diff.is_close,
            max_abs_diff=diff.max_abs,
            max_rel_diff=diff.max_rel,
            mismatched=diff.mismatched,
            reason=diff.alignment,
        )
    return row


def _params_lead(num_diverged: int, mismatched: list[str], counts: dict[str, int]) -> str:
    """The compare_params verdict sentence; names present in one model only are part of it,
    and so are tensors whose shape or dtype differs (they differ without a value comparison)."""
    unmatched = counts["only_in_a"] + counts["only_in_b"]
    missing = (
        f"; {unmatched} name{'s' if unmatched != 1 else ''} exist in one model only"
        if unmatched
        else ""
    )
    if mismatched:
        how = ", ".join(
            f"{mismatched.count(status)} in {what}"
            for status, what in (("shape_mismatch", "shape"), ("dtype_mismatch", "dtype"))
            if status in mismatched
        )
        return (
            f"{num_diverged + len(mismatched)} of {counts['compared'] + len(mismatched)} "
            f"tensors differ ({how}){missing}"
        )
    if num_diverged:
        return f"{num_diverged} of {counts['compared']} compared tensors differ{missing}"
    if counts["compared"] == 0:
        return "no tensor could be compared" + missing
    return f"all {counts['compared']} compared tensors agree{missing}"
