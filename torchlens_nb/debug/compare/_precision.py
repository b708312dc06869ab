"""``bisect_precision``: the first op whose native output separates from a high-precision run.

Two isolated captures of the same seeded forward (``_isolation.isolated_capture``): one of the
model as it is, one of a copy whose floating parameters, buffers and inputs are cast to
``reference_dtype``. Ops are aligned on labels (``debug/_compare.py``) and each native output is
compared with its reference in the reference dtype, with tolerances derived from the native dtype:
``rtol = eps ** 0.5`` and ``atol = eps * 10`` (float32: 3.5e-4 and 1.2e-6), so "diverged" means
"lost meaningfully more precision than the dtype itself explains". The error of an upstream op
propagates, so the first diverged row in execution order is the answer; the rows after it are
context.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import torch
from torch import nn

from ..._validate import check_int, check_number
from ...capture import Op, Trace
from ...errors import DiagnosticArgumentError
from ...report import Finding, Table, Unavailable, Where
from ...report._compare import VALUE_STATS_COLUMNS, BisectPrecisionReport, PrecisionRow, SkippedOp
from .._blind_spots import blind_spot_disclosures, blind_spot_unavailable, unless_blind
from .._isolation import check_isolation_args, isolated_capture, map_tensors
from ._compare import aligned_ops, compare_ops, source_line, tensors_of

STOCHASTIC_FUNCS = frozenset(
    {
        "dropout",
        "dropout1d",
        "dropout2d",
        "dropout3d",
        "alpha_dropout",
        "feature_alpha_dropout",
        "rrelu",
        "rand",
        "randn",
        "randint",
        "randperm",
        "rand_like",
        "randn_like",
        "randint_like",
        "bernoulli",
        "multinomial",
        "normal",
        "poisson",
        "uniform_",
        "normal_",
        "bernoulli_",
        "exponential_",
        "geometric_",
        "log_normal_",
        "cauchy_",
        "random_",
        "gumbel_softmax",
        "fused_dropout",
        "native_dropout",
    }
)
"""Functions that draw from the global RNG (in-place samplers keep their trailing ``_``)."""

PRECISION_COLUMNS = (
    "op",
    "func",
    "module",
    "dtype",
    "rtol",
    "atol",
    "max_abs_err",
    "max_rel_err",
    "mismatched",
    "numel",
    "is_diverged",
    "is_stochastic",
    "source_line",
)


def is_stochastic(func: str) -> bool:
    """True when ``func`` draws random numbers (``dropout``, ``rand*``, ``bernoulli_``, ...)."""
    return func in STOCHASTIC_FUNCS or func.rstrip("_") in STOCHASTIC_FUNCS


def dtype_tolerance(dtype_name: str | None) -> tuple[float, float]:
    """``(eps ** 0.5, eps * 10)`` of a floating dtype; ``(0, 0)`` (exact) for other dtypes."""
    dtype = getattr(torch, dtype_name or "", None)
    if not isinstance(dtype, torch.dtype) or not (dtype.is_floating_point or dtype.is_complex):
        return 0.0, 0.0
    eps = torch.finfo(dtype).eps
    return math.sqrt(eps), eps * 10


def _reference_dtype(value: Any) -> torch.dtype:
    if not isinstance(value, torch.dtype) or not value.is_floating_point:
        raise DiagnosticArgumentError(
            f"reference_dtype must be a floating torch.dtype such as torch.float64, got {value!r}."
        )
    return value


def bisect_precision(
    model: nn.Module,
    inputs: Any,
    reference_dtype: torch.dtype = torch.float64,
    *,
    seed: int = 0,
    rtol: float | None = None,
    atol: float | None = None,
) -> BisectPrecisionReport:
    """Name the first op whose native-precision output separates from a ``reference_dtype`` run.

    Both runs are isolated captures (deep copies, cloned inputs, seeded with ``seed`` inside a
    preserved RNG), so the caller's model, inputs and RNG streams are untouched. Cost: two deep
    copies and two save-everything captures.

    Args:
        model: the module (its native dtypes are what is tested).
        inputs: every form ``tl.trace`` takes; floating tensors are cast for the reference run.
        reference_dtype: the high-precision dtype (float64 by default).
        seed: seed of both runs.
        rtol, atol: override the dtype-derived tolerances for every op.

    Returns:
        A :class:`~torchlens_nb.report._compare.BisectPrecisionReport`: ``found``, ``op``,
        ``func_name``, ``module``, ``is_stochastic`` (the first divergence is a random op: a
        mask mismatch across dtypes is likelier than precision loss; bisect in eval mode),
        ``rows`` (every compared op) and ``skipped`` (ops not compared, with the reason).

    Example:
        >>> class Cancelling(nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.pre = nn.Linear(8, 8)
        ...     def forward(self, x):
        ...         return (self.pre(x) + 1e7) - 1e7
        >>> torch.manual_seed(0) and None
        >>> result = bisect_precision(Cancelling().eval(), torch.randn(2, 8))
        >>> result.found, result.func_name
        (True, 'sub')
    """
    reference = _reference_dtype(reference_dtype)
    check_int("seed", seed, hint="pass an int such as 0")
    check_isolation_args(model, inputs, None)
    for name, value in (("rtol", rtol), ("atol", atol)):
        if value is not None:
            check_number(name, value, low=0, expect="None or a finite number >= 0")
    native = isolated_capture(model, inputs, seed=seed)
    cast_inputs = map_tensors(inputs, lambda t: t.to(reference) if t.is_floating_point() else t)
    high = isolated_capture(model, cast_inputs, seed=seed, prepare=lambda m: m.to(reference))
    return _bisect(native, high, reference, seed, rtol, atol)


def _tolerance_for(
    native_dtype: dict[str, str | None], rtol: float | None, atol: float | None
) -> Any:
    def tolerance(op_b: Op) -> tuple[float, float]:
        derived_rtol, derived_atol = dtype_tolerance(native_dtype.get(op_b.label))
        return (derived_rtol if rtol is None else rtol, derived_atol if atol is None else atol)

    return tolerance


def _bisect(
    native: Trace,
    high: Trace,
    reference: torch.dtype,
    seed: int,
    rtol: float | None,
    atol: float | None,
) -> BisectPrecisionReport:
    native_dtype = {op.label: op.dtype for op in native}
    tolerance = _tolerance_for(native_dtype, rtol, atol)
    rows: list[PrecisionRow] = []
    skipped: list[SkippedOp] = []
    nonfinite: list[str] = []
    stats: list[dict[str, Any]] = []
    for op_native, op_high in aligned_ops(native, high):
        if op_native is None or op_high is None or op_native.is_input:
            if op_native is None or op_high is None:
                skipped.append(
                    SkippedOp(
                        (op_native or op_high).label,  # type: ignore[union-attr]
                        "ran in only one of the two runs",
                    )
                )
            continue
        row = compare_ops(op_native, op_high, tolerance, stats)
        if row["allclose"] is None:
            skipped.append(SkippedOp(row["op"], row["reason"]))
            continue
        if row["allclose"] and _holds_nonfinite(op_native):
            # NaN == NaN under equal_nan: agreeing non-finite values say nothing about precision
            nonfinite.append(row["op"])
            skipped.append(SkippedOp(row["op"], NONFINITE_REASON))
            continue
        op_rtol, op_atol = tolerance(op_high)
        rows.append(
            PrecisionRow(
                op=row["op"],
                func=op_native.func,
                module=op_native.module,
                dtype=op_native.dtype or "",
                rtol=op_rtol,
                atol=op_atol,
                max_abs_err=row["max_abs_diff"],
                max_rel_err=row["max_rel_diff"],
                mismatched=row["mismatched"],
                numel=row["numel"],
                is_diverged=not row["allclose"],
                is_stochastic=is_stochastic(op_native.func),
                source_line=source_line(op_native),
            )
        )
    first = next((r for r in rows if r.is_diverged), None)
    narrow = sum(1 for op in high if op.dtype and _is_narrower(op.dtype, reference))
    disclosures = [
        "tolerances derive from each op's native dtype (rtol = eps ** 0.5, atol = eps * 10)"
        if rtol is None and atol is None
        else f"tolerances fixed by the caller: rtol={rtol}, atol={atol}"
    ]
    if narrow:
        disclosures.append(
            f"{narrow} op(s) of the reference run produced a floating dtype "
            f"narrower than {_name(reference)} (explicit casts in the model): "
            "their reference is not high-precision"
        )
    if skipped:
        disclosures.append(f"{len(skipped)} op(s) not compared (see skipped)")
    findings = []
    if first is not None:
        native_op = native[first.op]
        findings.append(
            Finding(
                "precision_divergence",
                "warning",
                f"{first.op} ({first.func}) loses precision: max abs error {first.max_abs_err:.3g}, "
                f"max rel error {first.max_rel_err:.3g} against {_name(reference)}, beyond "
                f"rtol={first.rtol:.2g}, atol={first.atol:.2g} of {first.dtype}.",
                where=Where(
                    op=first.op,
                    module=first.module or None,
                    file=native_op.file,
                    line=native_op.line,
                    code=native_op.code,
                ),
                remedy="compute this op in a wider dtype, or reorder it to avoid cancellation "
                "(e.g. subtract before adding a large constant).",
                fields={"max_abs_err": first.max_abs_err, "max_rel_err": first.max_rel_err},
            )
        )
        if first.is_stochastic:
            findings.append(
                Finding(
                    "precision_divergence_at_stochastic_op",
                    "warning",
                    f"the first divergence is the random op {first.op}: random kernels may draw "
                    "differently across dtypes, so this is likely a mask mismatch, not precision "
                    "loss.",
                    remedy="bisect in eval mode (model.eval()).",
                )
            )
    table = Table.from_dicts(
        "precision",
        [vars(r) for r in rows],
        PRECISION_COLUMNS,
        {"reference_dtype": _name(reference), "seed": seed, "skipped": len(skipped)},
    )
    if first is not None:
        lead = f"{first.op} ({first.func}) is the first op to lose precision"
    elif nonfinite:
        one = len(nonfinite) == 1
        lead = (
            f"{len(nonfinite)} op{'' if one else 's'} hold{'s' if one else ''} NaN/Inf in both "
            f"runs: {'its' if one else 'their'} precision cannot be judged (the first is "
            f"{nonfinite[0]}; tl.debug.nonfinite_origin finds where the value is born)"
        )
    else:
        lead = f"all {len(rows)} compared ops stay within their dtype's tolerance"
    verdict: Literal["found", "clean", "inconclusive"] = (
        "found" if first is not None else "inconclusive" if nonfinite else "clean"
    )
    status, lead = unless_blind(verdict, lead, native, "inconclusive")
    return BisectPrecisionReport(
        subject=f"{native.model_type} ({len(native)} ops) vs {_name(reference)} reference",
        status=status,
        lead=lead,
        unavailable=(
            (Unavailable(f"precision of {len(nonfinite)} op(s)", NONFINITE_REASON, "nonfinite"),)
            if nonfinite
            else ()
        )
        + blind_spot_unavailable(native, "precision"),
        findings=tuple(findings),
        tables=(table, Table.from_dicts("value_stats", stats, VALUE_STATS_COLUMNS)),
        disclosures=(*disclosures, *blind_spot_disclosures(native)),
        found=first is not None,
        op=None if first is None else first.op,
        func_name=None if first is None else first.func,
        module=None if first is None else first.module,
        is_stochastic=bool(first and first.is_stochastic),
        reference_dtype=_name(reference),
        seed=seed,
        rows=tuple(rows),
        skipped=tuple(skipped),
    )


NONFINITE_REASON = "NaN/Inf in both runs: equal non-finite values say nothing about precision"


def _holds_nonfinite(op: Op) -> bool:
    """Whether any floating output of ``op`` holds NaN or Inf (one host sync per output)."""
    return any(
        (t.is_floating_point() or t.is_complex()) and not bool(torch.isfinite(t).all())
        for t in tensors_of(op)
    )


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _is_narrower(dtype_name: str, reference: torch.dtype) -> bool:
    dtype = getattr(torch, dtype_name, None)
    return (
        isinstance(dtype, torch.dtype)
        and dtype.is_floating_point
        and dtype.itemsize < reference.itemsize
    )
