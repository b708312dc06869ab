"""``prime_dims``: rerun the model with distinct prime sizes to expose silent broadcasting.

With batch = seq = 8 a reshape that mixes the two, or a ``(N, 1) - (N,)`` broadcast, runs by
accident. With batch = 7 and seq = 13 the first crashes, and the second leaves a fingerprint the
trace can see: an elementwise op whose output holds the size 7 twice while no input does.
Sizes are chosen from primes that no parameter of the model uses, so a free dimension is always
recognisable by its size.
"""

from __future__ import annotations

import inspect
import traceback
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from ..._validate import MAX_PROBE_SIZE, is_int
from ...capture import Trace, trace, validate_model
from ...debug._isolation import keeps_torch_switches
from ...errors import DiagnosticArgumentError, ForwardError
from ...report import Finding, Table, Where
from ...report._recipes_data import recipe_status
from ...report._recipes_flow import BroadcastSite, PrimeDimsReport, ShapeBreak
from .._batches import model_device, to_device
from .._model_state import preserved

PRIMES = (7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71, 73)
BASELINE_SIZE = 8
"""The "normal" size every free dimension gets in the reference run: powers of two (and equal
sizes) are exactly what lets a wrong reshape run."""
BROADCASTING_FUNCS = frozenset(
    {
        "add",
        "sub",
        "rsub",
        "mul",
        "truediv",
        "div",
        "floordiv",
        "mod",
        "remainder",
        "fmod",
        "pow",
        "where",
        "maximum",
        "minimum",
        "atan2",
        "eq",
        "ne",
        "lt",
        "le",
        "gt",
        "ge",
        "logical_and",
        "logical_or",
        "logical_xor",
        "and",
        "or",
        "xor",
        "masked_fill",
        "hypot",
        "copysign",
    }
)
"""Elementwise ops that broadcast their operands (normalised names, ``truediv`` is ``/``)."""
_INTERNAL = ("/torch/", "/torchlens_nb/")


def _dim_names(make_input: Callable[..., Any]) -> tuple[str, ...]:
    try:
        params = inspect.signature(make_input).parameters.values()
    except (TypeError, ValueError) as exc:
        raise DiagnosticArgumentError(
            "make_input must be a function of the free sizes, e.g. "
            "lambda batch, seq: torch.randn(batch, seq, 16)."
        ) from exc
    names = tuple(p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))
    if not names:
        raise DiagnosticArgumentError(
            "make_input takes no named size; write it as a function of the free dimensions, "
            "e.g. lambda batch, seq: torch.randn(batch, seq, 16)."
        )
    return names


def _prime_sizes(
    model: nn.Module, names: tuple[str, ...], baseline: Mapping[str, int]
) -> dict[str, int]:
    used = {size for p in model.parameters() for size in p.shape} | set(baseline.values())
    free = [p for p in PRIMES if p not in used]
    if len(free) < len(names):
        raise DiagnosticArgumentError(
            f"the model's parameters use most primes up to {PRIMES[-1]}; pass primes= explicitly."
        )
    return dict(zip(names, free))


def _run(
    model: nn.Module, make_input: Callable[..., Any], sizes: Mapping[str, int]
) -> Trace | ForwardError:
    inputs = to_device(make_input(**sizes), model_device(model))
    try:
        with torch.no_grad():
            return trace(model, inputs, save=False)
    except ForwardError as exc:
        return exc


def _user_frame(exc: BaseException) -> tuple[str | None, int | None, str | None]:
    frames = traceback.extract_tb(exc.__traceback__)
    for frame in reversed(frames):
        path = frame.filename.replace("\\", "/")
        if not any(part in path for part in _INTERNAL) and not path.startswith("<frozen"):
            return frame.filename, frame.lineno, (frame.line or "").strip() or None
    return None, None, None


def _shape_break(error: ForwardError) -> ShapeBreak:
    cause = error.__cause__ or error
    file, line, code = _user_frame(cause)
    ops = error.partial_trace.ops if error.partial_trace is not None else []
    last = ops[-1] if ops else None
    return ShapeBreak(
        f"{type(cause).__name__}: {cause}",
        file,
        line,
        code,
        last.label if last else None,
        last.module if last else None,
    )


def _broadcasts(recorded: Trace, sizes: Mapping[str, int]) -> list[BroadcastSite]:
    names = {size: name for name, size in sizes.items()}
    sites = []
    for op in recorded:
        shapes = [shape for shape, _ in op.arg_meta]
        if op.func not in BROADCASTING_FUNCS or len(shapes) < 2 or op.shape is None:
            continue
        crossed = tuple(
            name
            for size, name in names.items()
            if op.shape.count(size) > max(s.count(size) for s in shapes)
        )
        if crossed:
            sites.append(
                BroadcastSite(
                    op.label,
                    op.func,
                    op.module,
                    op.file,
                    op.line,
                    op.code,
                    tuple(shapes),
                    op.shape,
                    crossed,
                )
            )
    return sites


@keeps_torch_switches
def prime_dims(
    model: nn.Module,
    make_input: Callable[..., Any],
    *,
    baseline: int | Mapping[str, int] = BASELINE_SIZE,
    primes: Mapping[str, int] | None = None,
) -> PrimeDimsReport:
    """Run the model with ordinary sizes and with distinct primes; report what broke.

    Findings: the prime run raises while the baseline runs (critical ``shape_broke``, with the
    source line and the last op before it); an elementwise op broadcast two different axes of the
    same size against each other (critical ``silent_broadcast``, first op named); the output does
    not start with the same free dimension as the input (warning ``output_dims_moved``); the
    baseline itself fails (critical ``baseline_failed``: the input does not fit the model).

    Args:
        model: traced twice with ``tl.trace`` (``save=False``) in eval mode under no_grad; its
            train/eval flags are restored and BatchNorm statistics are not updated. The random
            draws of ``make_input`` happen inside ``preserved()``, which restores the RNG
            streams: the caller's do not advance.
        make_input: a function of the free sizes by name, e.g.
            ``lambda batch, seq: torch.randn(batch, seq, 16)``.
        baseline: the reference size of every free dimension, or a mapping name -> size.
        primes: the prime size per name (default: the smallest primes >= 7 that no parameter
            dimension of the model uses, in argument order).

    Returns:
        A :class:`PrimeDimsReport` with table ``broadcasts``.

    Example:
        >>> import torch, torchlens_nb as tl
        >>> r = tl.recipes.prime_dims(torch.nn.Linear(16, 4), lambda batch: torch.randn(batch, 16))
        >>> r.status, r.prime_sizes, r.output_dims
        ('pass', (('batch', 7),), ('batch', '4'))
    """
    validate_model(model)
    if not callable(make_input):
        raise DiagnosticArgumentError(
            f"make_input must be callable, got {type(make_input).__name__}; e.g. "
            "lambda batch, seq: torch.randn(batch, seq, 16)."
        )
    names = _dim_names(make_input)
    if not (is_int(baseline) or isinstance(baseline, Mapping)):
        raise DiagnosticArgumentError(
            f"baseline must be an int or a mapping from each of {list(names)} to an int, got "
            f"{baseline!r}."
        )
    if primes is not None and not isinstance(primes, Mapping):
        raise DiagnosticArgumentError(
            f"primes must be None or a mapping from each of {list(names)} to an int, got "
            f"{primes!r}."
        )
    base = dict(baseline) if isinstance(baseline, Mapping) else {n: baseline for n in names}
    sizes = dict(primes) if primes is not None else _prime_sizes(model, names, base)
    for label, mapping in (("baseline", base), ("primes", sizes)):
        if set(mapping) != set(names) or not all(
            is_int(v) and 1 <= v <= MAX_PROBE_SIZE for v in mapping.values()
        ):
            raise DiagnosticArgumentError(
                f"{label} must give an int in [1, {MAX_PROBE_SIZE}] for each of {list(names)}, "
                f"got {mapping!r}; the default baseline is {BASELINE_SIZE}."
            )
    with preserved(model, mode="eval"):
        reference, probe = _run(model, make_input, base), _run(model, make_input, sizes)
    findings: list[Finding] = []
    broke = _shape_break(probe) if isinstance(probe, ForwardError) else None
    sites: list[BroadcastSite] = []
    output_dims: tuple[str, ...] = ()
    if isinstance(reference, ForwardError):
        info = _shape_break(reference)
        findings.append(
            Finding(
                "baseline_failed",
                "critical",
                f"the model fails even with the baseline sizes {base}: {info.error}",
                where=Where(
                    op=info.after_op,
                    module=info.module,
                    file=info.file,
                    line=info.line,
                    code=info.code,
                ),
                remedy="make_input must build an input the model accepts; fix that first.",
            )
        )
    elif broke is not None:
        findings.append(
            Finding(
                "shape_broke",
                "critical",
                f"with sizes {sizes} the forward raises {broke.error} (with {base} it runs): a "
                "reshape, view or broadcast there only works when sizes coincide.",
                where=Where(
                    op=broke.after_op,
                    module=broke.module,
                    file=broke.file,
                    line=broke.line,
                    code=broke.code,
                ),
                remedy="use transpose/permute to move axes (not view/reshape), keepdim=True on "
                "reductions you subtract, and named sizes instead of hard-coded ones.",
                fields={"sizes": sizes, "after_op": broke.after_op},
            )
        )
    if isinstance(probe, Trace):
        sites = _broadcasts(probe, sizes)
        output_dims = _named_shape(probe, probe.output_layers, sizes)
        input_dims = _named_shape(probe, probe.input_layers, sizes)
        findings += _probe_findings(sites, input_dims, output_dims)
    table = Table.from_dicts(
        "broadcasts",
        [
            {
                "op": s.op,
                "func": s.func,
                "module": s.module,
                "dims": s.dims,
                "inputs": s.input_shapes,
                "output": s.output_shape,
                "source": f"{s.file}:{s.line}" if s.file else None,
            }
            for s in sites
        ],
        ("op", "func", "module", "dims", "inputs", "output", "source"),
        {"sizes": sizes},
    )
    status = recipe_status(findings)
    lead = (
        f"runs with {sizes}; no silent broadcast, output {output_dims}."
        if status == "pass"
        else f"{len(findings)} shape problem(s) with prime sizes {sizes}."
    )
    return PrimeDimsReport(
        subject=f"{type(model).__name__} with free dims {list(names)}",
        status=status,
        lead=lead,
        findings=tuple(findings),
        tables=(table,),
        baseline_sizes=tuple(base.items()),
        prime_sizes=tuple(sizes.items()),
        is_baseline_ok=isinstance(reference, Trace),
        is_prime_ok=isinstance(probe, Trace),
        broke=broke,
        broadcasts=tuple(sites),
        output_dims=output_dims,
        disclosures=(
            "a broadcast is flagged only when it crosses two axes of the same free size; "
            "bias-style broadcasts against fixed sizes are legitimate and not listed",
        ),
    )


def _named_shape(
    recorded: Trace, labels: tuple[str, ...], sizes: Mapping[str, int]
) -> tuple[str, ...]:
    """The shape of the first op in ``labels`` with free sizes replaced by their names."""
    names = {size: name for name, size in sizes.items()}
    shape = recorded[labels[0]].shape or () if labels else ()
    return tuple(names.get(size, str(size)) for size in shape)


def _probe_findings(
    sites: list[BroadcastSite], input_dims: tuple[str, ...], output_dims: tuple[str, ...]
) -> list[Finding]:
    findings = []
    if sites:
        first = sites[0]
        findings.append(
            Finding(
                "silent_broadcast",
                "critical",
                f"{first.func} broadcast {' x '.join(map(str, first.input_shapes))} to "
                f"{first.output_shape}: two different {first.dims[0]} axes were crossed (an outer "
                f"product); {len(sites)} such op(s) in all.",
                where=Where(
                    op=first.op,
                    module=first.module,
                    file=first.file,
                    line=first.line,
                    code=first.code,
                ),
                remedy="align the shapes explicitly: squeeze(-1) / unsqueeze, or keepdim=True on the "
                "reduction feeding this op.",
                fields={"ops": [s.op for s in sites]},
            )
        )
    first_dim = input_dims[0] if input_dims and not input_dims[0].isdigit() else None
    if first_dim is not None and output_dims and output_dims[0] != first_dim:
        findings.append(
            Finding(
                "output_dims_moved",
                "warning",
                f"the input starts with {first_dim} but the output's dimensions are {output_dims}.",
                remedy="check reshapes near the output: a view where a transpose was meant "
                "reorders the examples.",
                fields={"output_dims": list(output_dims)},
            )
        )
    return findings
