"""Forward FLOP formulas per recorded op, and the cross-check against PyTorch's dispatch registry.

``op_flops(op)`` counts from what the capture recorded (the function name, the ``(shape, dtype)``
of every tensor argument and the output shape); it never re-runs anything. A multiply-add is two
FLOPs and bias adds are not counted, exactly as ``torch.utils.flop_counter`` counts matmuls and
convolutions, so on linear, conv and matmul models the two agree to the FLOP
(tests/compare/test_flops.py). Beyond that registry we also count element-wise ops, norms,
softmax and reductions with the per-element constants below; ops we have no formula for get
``None`` and land in the unknown-op ledger, never a guessed zero.

``flops_vs_dispatch(model, inputs)`` is the cross-check: one detached capture, a state and RNG
restore, one raw run under ``FlopCounterMode(display=False)``, an output witness, and the two
registries side by side.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from ...capture import Op, Trace, call_arguments, iter_tensors, trace, validate_model
from ...errors import DiagnosticArgumentError
from ...report import Finding, Table
from ...report._cost import FlopsVsDispatchReport
from .._isolation import clone_input_tree, preserved_rng_state

Family = Literal[
    "matmul",
    "conv",
    "attention",
    "elementwise",
    "normalization",
    "reduction",
    "data_movement",
    "unknown",
]
"""Which kind of work an op is; the first three are the families FlopCounterMode also counts."""

NATIVE_FAMILIES: tuple[Family, ...] = ("matmul", "conv", "attention")
"""Families ``torch.utils.flop_counter`` has formulas for (mm/addmm/bmm/baddbmm, convolution,
fused attention); the cross-check compares our subtotal of these against the native total."""

Shape = tuple[int, ...]


@dataclass(frozen=True)
class FlopCount:
    """Forward FLOPs of one op by our formulas."""

    flops: int | None
    """FLOPs, or None when no formula covers the op (it goes to the unknown-op ledger)."""
    family: Family
    formula: str
    """The formula used, e.g. ``"2*numel(out)*prod(w[1:])"``; ``"unknown"`` when none."""


def _numel(shape: Shape) -> int:
    return math.prod(shape)


def _matmul(args: Sequence[Shape], out: Shape) -> int | None:
    # every matmul-like op: one multiply-add per output element per reduced index k
    return 2 * _numel(out) * args[0][-1] if args and args[0] else None


def _addmm(args: Sequence[Shape], out: Shape) -> int | None:
    # addmm(bias, a, b) / baddbmm(bias, a, b): the bias add is not counted (as FlopCounterMode)
    return 2 * _numel(out) * args[1][-1] if len(args) >= 2 and args[1] else None


def _addbmm(args: Sequence[Shape], out: Shape) -> int | None:
    # addbmm(bias, a(b, n, k), b(b, k, m)) -> (n, m): b*n*m*k multiply-adds
    return (
        2 * _numel(out) * args[1][0] * args[1][-1] if len(args) >= 2 and len(args[1]) == 3 else None
    )


def _conv(args: Sequence[Shape], out: Shape) -> int | None:
    # weight (C_out, C_in/groups, *k): each output element is a prod(w[1:])-long dot product
    return 2 * _numel(out) * _numel(args[1][1:]) if len(args) >= 2 and len(args[1]) >= 3 else None


def _conv_transpose(args: Sequence[Shape], out: Shape) -> int | None:
    # weight (C_in, C_out/groups, *k): each INPUT element scatters into prod(w[1:]) outputs
    return (
        2 * _numel(args[0]) * _numel(args[1][1:]) if len(args) >= 2 and len(args[1]) >= 3 else None
    )


def _sdpa(args: Sequence[Shape], out: Shape) -> int | None:
    # q (..., L, E) @ k^T (..., E, S) then (..., L, S) @ v (..., S, Ev): two batched matmuls
    if len(args) < 3 or min(len(a) for a in args[:3]) < 2:
        return None
    q, k, v = args[0], args[1], args[2]
    batch = _numel(out[:-2])
    return 2 * batch * q[-2] * k[-2] * q[-1] + 2 * batch * q[-2] * k[-2] * v[-1]


def _per_output(per_element: int) -> Callable[[Sequence[Shape], Shape], int]:
    return lambda args, out: per_element * _numel(out)


def _per_input(per_element: int) -> Callable[[Sequence[Shape], Shape], int | None]:
    return lambda args, out: per_element * _numel(args[0]) if args else None


_ELEMENTWISE = frozenset(
    {
        "add",
        "sub",
        "mul",
        "div",
        "truediv",
        "floordiv",
        "mod",
        "pow",
        "radd",
        "rsub",
        "rmul",
        "rtruediv",
        "rpow",
        "neg",
        "abs",
        "exp",
        "exp2",
        "expm1",
        "log",
        "log2",
        "log10",
        "log1p",
        "sqrt",
        "rsqrt",
        "reciprocal",
        "square",
        "sin",
        "cos",
        "tan",
        "erf",
        "erfc",
        "sign",
        "relu",
        "relu6",
        "gelu",
        "silu",
        "mish",
        "sigmoid",
        "tanh",
        "softplus",
        "softsign",
        "elu",
        "selu",
        "celu",
        "leaky_relu",
        "hardtanh",
        "hardswish",
        "hardsigmoid",
        "logsigmoid",
        "prelu",
        "threshold",
        "glu",
        "clamp",
        "clip",
        "maximum",
        "minimum",
        "where",
        "lerp",
        "addcmul",
        "addcdiv",
        "lt",
        "le",
        "gt",
        "ge",
        "eq",
        "ne",
        "logical_and",
        "logical_or",
        "logical_not",
        "logical_xor",
        "and",
        "or",
        "xor",
        "invert",
        "floor",
        "ceil",
        "round",
        "trunc",
        "frac",
        "isnan",
        "isinf",
        "isfinite",
        "nan_to_num",
    }
)
"""One FLOP per output element (fvcore and ptflops count activations the same way)."""

_DATA_MOVEMENT = frozenset(
    {
        "view",
        "view_as",
        "reshape",
        "reshape_as",
        "permute",
        "transpose",
        "t",
        "T",
        "mT",
        "H",
        "contiguous",
        "flatten",
        "unflatten",
        "squeeze",
        "unsqueeze",
        "expand",
        "expand_as",
        "repeat",
        "repeat_interleave",
        "tile",
        "cat",
        "concat",
        "concatenate",
        "stack",
        "hstack",
        "vstack",
        "split",
        "split_with_sizes",
        "chunk",
        "unbind",
        "tensor_split",
        "narrow",
        "select",
        "getitem",
        "setitem",
        "index_select",
        "gather",
        "scatter",
        "take",
        "masked_select",
        "masked_fill",
        "index",
        "movedim",
        "moveaxis",
        "swapaxes",
        "roll",
        "flip",
        "pad",
        "tril",
        "triu",
        "embedding",
        "to",
        "type",
        "type_as",
        "float",
        "double",
        "half",
        "bfloat16",
        "long",
        "int",
        "short",
        "bool",
        "byte",
        "char",
        "cpu",
        "cuda",
        "clone",
        "detach",
        "copy_",
        "fill_",
        "zero_",
        "dropout",
        "alpha_dropout",
        "feature_alpha_dropout",
        "dropout1d",
        "dropout2d",
        "dropout3d",
        "identity",
        "tensor",
        "as_tensor",
        "from_numpy",
        "zeros",
        "ones",
        "full",
        "empty",
        "arange",
        "linspace",
        "eye",
        "zeros_like",
        "ones_like",
        "full_like",
        "empty_like",
        "new_zeros",
        "new_ones",
        "new_full",
        "new_empty",
        "new_tensor",
        "rand",
        "randn",
        "randint",
        "rand_like",
        "randn_like",
        "randint_like",
        "randperm",
        "one_hot",
        "pixel_shuffle",
        "pixel_unshuffle",
        "unfold",
        "as_strided",
        "diag",
        "diagonal",
        "broadcast_to",
        "atleast_1d",
        "atleast_2d",
        "atleast_3d",
        "input",
    }
)
"""Zero FLOPs: views, copies, casts, indexing, creation and dropout (its mask multiply is a
copy-class cost, not arithmetic)."""

_NORMALIZATION: dict[str, int] = {
    "layer_norm": 5,
    "group_norm": 5,
    "instance_norm": 5,
    "rms_norm": 4,
    "batch_norm": 4,
    "local_response_norm": 5,
    "normalize": 3,
    "softmax": 3,
    "log_softmax": 4,
    "softmin": 4,
}
"""FLOPs per output element. Norms: mean, variance, subtract, divide, affine (5; RMS norm has
no mean, batch norm in eval uses stored statistics). softmax: exp, sum, divide (3; the
stabilising max-subtraction is not counted); log_softmax adds the log."""

_REDUCTION: dict[str, int] = {
    "sum": 1,
    "mean": 1,
    "prod": 1,
    "amax": 1,
    "amin": 1,
    "max": 1,
    "min": 1,
    "argmax": 1,
    "argmin": 1,
    "cumsum": 1,
    "cumprod": 1,
    "norm": 2,
    "var": 3,
    "std": 3,
    "logsumexp": 3,
    "all": 1,
    "any": 1,
    "count_nonzero": 1,
    "avg_pool1d": 1,
    "avg_pool2d": 1,
    "avg_pool3d": 1,
    "max_pool1d": 1,
    "max_pool2d": 1,
    "max_pool3d": 1,
    "adaptive_avg_pool1d": 1,
    "adaptive_avg_pool2d": 1,
    "adaptive_avg_pool3d": 1,
    "adaptive_max_pool1d": 1,
    "adaptive_max_pool2d": 1,
    "adaptive_max_pool3d": 1,
}
"""FLOPs per INPUT element (pooling reads each input once: overlapping windows are undercounted,
because the kernel size is not part of what the capture records)."""

_FORMULAS: dict[str, tuple[Family, str, Callable[[Sequence[Shape], Shape], int | None]]] = {
    **{
        name: ("matmul", "2*numel(out)*k", _matmul)
        for name in ("linear", "matmul", "mm", "bmm", "mv", "dot", "vdot", "inner", "rmatmul")
    },
    **{
        name: ("matmul", "2*numel(out)*k (bias not counted)", _addmm)
        for name in ("addmm", "baddbmm", "addmv")
    },
    "addbmm": ("matmul", "2*numel(out)*b*k (bias not counted)", _addbmm),
    **{f"conv{d}d": ("conv", "2*numel(out)*prod(w[1:])", _conv) for d in (1, 2, 3)},
    **{
        f"conv_transpose{d}d": ("conv", "2*numel(in)*prod(w[1:])", _conv_transpose)
        for d in (1, 2, 3)
    },
    "scaled_dot_product_attention": ("attention", "2*B*L*S*(E+Ev)", _sdpa),
    **{name: ("elementwise", "numel(out)", _per_output(1)) for name in _ELEMENTWISE},
    **{name: ("data_movement", "0", _per_output(0)) for name in _DATA_MOVEMENT},
    **{
        name: ("normalization", f"{k}*numel(out)", _per_output(k))
        for name, k in _NORMALIZATION.items()
    },
    **{name: ("reduction", f"{k}*numel(in)", _per_input(k)) for name, k in _REDUCTION.items()},
}


def _lookup(func: str) -> tuple[Family, str, Callable[[Sequence[Shape], Shape], int | None]] | None:
    entry = _FORMULAS.get(func)
    if entry is None and func.endswith("_") and not func.endswith("__"):
        entry = _FORMULAS.get(func[:-1])  # in-place twin: add_ counts as add
    return entry


def op_flops(op: Op) -> FlopCount:
    """Forward FLOPs of ``op`` from its recorded function name and argument shapes.

    Example:
        >>> import torch
        >>> from torch import nn
        >>> from torchlens_nb.capture import trace
        >>> t = trace(nn.Linear(3, 5), torch.ones(4, 3))
        >>> op_flops(t["linear_1"]).flops  # 2 * 4 * 5 * 3
        120

    Raises:
        DiagnosticArgumentError: ``op`` is not an ``Op`` (e.g. a label: pass ``trace[label]``).
    """
    if not isinstance(op, Op):
        raise DiagnosticArgumentError(
            f"op_flops takes an Op of a trace, got {type(op).__name__} {op!r:.60}; pass "
            "trace[label], e.g. op_flops(trace['linear_1'])."
        )
    entry = _lookup(op.func)
    if entry is None or op.shape is None:
        return FlopCount(None, "unknown", "unknown")
    family, formula, count = entry
    try:
        flops = count([shape for shape, _ in op.arg_meta], op.shape)
    except IndexError:  # arguments not shaped as the formula expects (e.g. 0-d operands)
        flops = None
    if flops is None:
        return FlopCount(None, "unknown", "unknown")
    return FlopCount(int(flops), family, formula)


def native_family(overload: str) -> Family:
    """Family of a FlopCounterMode ledger key such as ``"aten.addmm"``."""
    name = overload.removeprefix("aten.").split(".")[0]
    if "conv" in name:
        return "conv"
    if "attention" in name or name.startswith("_flash") or name.startswith("_efficient"):
        return "attention"
    if name in ("mm", "addmm", "bmm", "baddbmm", "_scaled_mm"):
        return "matmul"
    return "unknown"


def _snapshot(model: nn.Module) -> list[tuple[torch.Tensor, torch.Tensor]]:
    tensors = [t for _, t in model.named_parameters()] + [t for _, t in model.named_buffers()]
    return [(t, t.detach().clone()) for t in tensors]


def _restore(snapshot: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
    with torch.no_grad():
        for tensor, saved in snapshot:
            tensor.copy_(saved)


def _bitwise_equal(a: Any, b: Any) -> bool:
    left, right = list(iter_tensors(a)), list(iter_tensors(b))
    if len(left) != len(right):
        return False
    for x, y in zip(left, right):
        if x.shape != y.shape or x.dtype != y.dtype or x.layout != y.layout:
            return False
        if x.device.type == "meta" or y.device.type == "meta":
            continue  # no values: matching shapes and dtypes are all a meta run can witness
        if x.layout != torch.strided:  # sparse outputs: compare their values densely
            x, y = x.to_dense(), y.to_dense()
        if x.is_quantized:
            x, y = x.int_repr(), y.int_repr()
        same = x == y
        if x.is_floating_point() or x.is_complex():
            same |= torch.isnan(x) & torch.isnan(y)
        if not bool(same.all()):
            return False
    return True


def _ours(trace: Trace) -> tuple[dict[str, int], list[dict[str, Any]], list[dict[str, Any]]]:
    families: dict[str, int] = {}
    ledger: dict[str, dict[str, Any]] = {}
    unknown: dict[str, dict[str, Any]] = {}
    for op in trace:
        if op.is_input:
            continue
        count = op_flops(op)
        if count.flops is None:
            entry = unknown.setdefault(
                op.func, {"func": op.func, "count": 0, "flops": None, "ops": []}
            )
            entry["count"] += 1
            if len(entry["ops"]) < _UNKNOWN_LABELS_SHOWN:
                entry["ops"].append(op.label)
            continue
        families[count.family] = families.get(count.family, 0) + count.flops
        entry = ledger.setdefault(
            op.func,
            {
                "func": op.func,
                "family": count.family,
                "formula": count.formula,
                "count": 0,
                "flops": 0,
            },
        )
        entry["count"] += 1
        entry["flops"] += count.flops
    return (
        families,
        list(ledger.values()),
        [{**u, "ops": tuple(u["ops"])} for u in unknown.values()],
    )


_UNKNOWN_LABELS_SHOWN = 10
"""Labels listed per unknown function (the count is exact; the list is a sample to click)."""


def flops_vs_dispatch(model: nn.Module, inputs: Any) -> FlopsVsDispatchReport:
    """Cross-check torchlens_nb's FLOP formulas against PyTorch's dispatch-level registry.

    One detached ``tl.trace`` (under ``torch.no_grad``), a restore of every parameter, buffer
    and global RNG stream, one raw forward under
    ``torch.utils.flop_counter.FlopCounterMode(display=False)``, then an output witness: the
    raw run must reproduce the captured outputs bitwise, else the report refuses
    (``status="refused"``, finding ``flops_crosscheck_witness_failed``) because the two counts
    would describe different executions. Afterwards the model's parameters, buffers and the
    global RNG streams are what they were before the call. Cost: two forwards.

    The report sets the two registries side by side: ``delta`` (ours minus native, signed),
    ``comparable_delta`` over the families both count (matmul, conv, attention), the
    per-overload native ledger, our per-function ledger and our unknown-op ledger. Native values
    never fill our unknown cells, and a native zero can be a registry-coverage fact (CPU fused
    attention) rather than a truth verdict.

    Example:
        >>> import torch
        >>> from torch import nn
        >>> report = flops_vs_dispatch(nn.Linear(3, 5), torch.ones(4, 3))
        >>> report.ours_total, report.native_total, report.delta  # 2 * 4 * 5 * 3 = 120
        (120, 120, 0)
    """
    validate_model(model)
    args, kwargs = call_arguments(inputs)
    raw_model = getattr(model, "_orig_mod", model)  # capture records a compiled model's original
    snapshot = _snapshot(model)
    try:
        with preserved_rng_state(), torch.no_grad():
            captured = trace(model, clone_input_tree(inputs), save=False)
        _restore(snapshot)
        with preserved_rng_state(), torch.no_grad():
            raw_args, raw_kwargs = clone_input_tree((args, kwargs))
            with FlopCounterMode(display=False) as counter:
                raw_output = raw_model(*raw_args, **raw_kwargs)
    finally:
        _restore(snapshot)
    subject = f"{type(raw_model).__name__} ({len(captured)} ops)"
    if not _bitwise_equal(captured.output, raw_output):
        return FlopsVsDispatchReport(
            subject=subject,
            status="refused",
            lead="refused: the raw run did not reproduce the captured outputs",
            findings=(
                Finding(
                    "flops_crosscheck_witness_failed",
                    "critical",
                    "the FlopCounterMode run's outputs differ from the captured run's, so the two "
                    "FLOP counts would describe different executions.",
                    remedy="make the forward repeatable (model.eval(), no data-dependent random "
                    "branches) and call again.",
                ),
            ),
            witness="failed",
        )
    families, ours_ledger, unknown = _ours(captured)
    native = {str(k): v for k, v in counter.get_flop_counts().get("Global", {}).items()}
    return _report(subject, families, ours_ledger, unknown, native)


def _report(
    subject: str,
    families: dict[str, int],
    ours_ledger: list[dict[str, Any]],
    unknown: list[dict[str, Any]],
    native: dict[str, int],
) -> FlopsVsDispatchReport:
    native_families: dict[str, int] = {}
    for overload, flops in native.items():
        name = native_family(overload)
        native_families[name] = native_families.get(name, 0) + flops
    ours_total = sum(families.values())
    native_total = sum(native.values())
    comparable_ours = sum(families.get(f, 0) for f in NATIVE_FAMILIES)
    family_rows: list[dict[str, Any]] = []
    for family in dict.fromkeys([*NATIVE_FAMILIES, *families, *native_families]):
        ours = families.get(family, 0)
        theirs = (
            native_families.get(family, 0)
            if family in NATIVE_FAMILIES or family in native_families
            else None
        )
        family_rows.append(
            {
                "family": family,
                "ours": ours,
                "native": theirs,
                "delta": None if theirs is None else ours - theirs,
            }
        )
    findings = []
    comparable_delta = comparable_ours - native_total
    for row in family_rows:
        if row["native"] == 0 and row["ours"] > 0:
            findings.append(
                Finding(
                    "native_registry_gap",
                    "info",
                    f"FlopCounterMode counted 0 {row['family']} FLOPs where ours counted "
                    f"{row['ours']:,}: its registry has no formula for the kernel that ran (CPU fused "
                    "attention, for one), a coverage fact rather than a truth verdict.",
                    fields={"family": row["family"], "ours": row["ours"]},
                )
            )
    if comparable_delta:
        findings.append(
            Finding(
                "flops_registries_disagree",
                "warning",
                f"over the families both count, ours is {comparable_delta:+,} FLOPs off the native "
                "registry; the families table shows where.",
                fields={"delta": comparable_delta},
            )
        )
    if unknown:
        count = sum(u["count"] for u in unknown)
        findings.append(
            Finding(
                "flops_unknown_ops",
                "info",
                f"{count} op(s) have no formula of ours ({', '.join(u['func'] for u in unknown[:5])}"
                f"{' ...' if len(unknown) > 5 else ''}); they are unknown, not zero.",
                fields={"funcs": [u["func"] for u in unknown]},
            )
        )
    return FlopsVsDispatchReport(
        subject=subject,
        status="agree" if comparable_delta == 0 else "disagree",
        lead=(
            f"ours {ours_total:,} vs native {native_total:,} FLOPs (delta {ours_total - native_total:+,};"
            f" {comparable_delta:+,} over matmul/conv/attention)"
        ),
        findings=tuple(findings),
        tables=(
            Table.from_dicts("families", family_rows, ("family", "ours", "native", "delta")),
            Table.from_dicts(
                "native_ledger",
                [
                    {"overload": k, "family": native_family(k), "flops": v}
                    for k, v in native.items()
                ],
                ("overload", "family", "flops"),
            ),
            Table.from_dicts(
                "ours_ledger", ours_ledger, ("func", "family", "formula", "count", "flops")
            ),
            Table.from_dicts("unknown_ops", unknown, ("func", "count", "flops", "ops")),
        ),
        disclosures=(
            "a dispatch-formula cross-check, never measured FLOPs; both registries "
            "count a multiply-add as 2 and skip bias adds",
            "ours also counts element-wise, normalization and reduction ops, which "
            "FlopCounterMode does not: compare comparable_delta, not delta",
        ),
        witness="passed",
        ours_total=ours_total,
        native_total=native_total,
        delta=ours_total - native_total,
        comparable_ours=comparable_ours,
        comparable_delta=comparable_delta,
        unknown_ops=sum(u["count"] for u in unknown),
        family_totals={row["family"]: row["ours"] for row in family_rows},
    )
