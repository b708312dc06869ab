"""Value facts shared by every NaN tool: finiteness flags, value statistics, the first bad thing.

All batched: the per-tensor reductions stay on the tensor's device and are stacked, so a scan of
N saved values costs one host sync per device instead of N (``finite_flags``, ``value_stats``).
Nothing here mutates a tensor, and nothing builds an autograd graph: every reduction reads a
detached tensor, or runs under ``capture._installs.without_grad`` (not ``with torch.no_grad():``,
which an interrupt inside its ``__enter__`` leaves switched off).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Literal

import torch

from ..capture._installs import without_grad
from ..report import Where
from ..report._nonfinite import FirstBadThing, NonfiniteKind, Phase, ValueStats

if TYPE_CHECKING:
    from ..capture import Op

_STRIDED = torch.strided
_STAT_WIDTH = 8
"""numel, nan, +inf, -inf, finite min, finite max, finite sum, finite count."""


def is_float_dtype(name: str | None) -> bool:
    """True for a floating-point or complex dtype name (``"float16"``); None counts as float.

    Only such values can hold NaN or Inf; an op of unknown dtype is treated as checkable.
    """
    if name is None:
        return True
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        return True
    return dtype.is_floating_point or dtype.is_complex


def checkable(tensor: Any) -> bool:
    """A dense, materialised floating/complex tensor whose values can be read.

    Cheapest test first, no ``torch.device`` built (0.29 us a call here, against 0.99 us when it
    compared ``layout ==`` and ``device.type``: the NaN tools call it per saved op output).
    """
    return (
        isinstance(tensor, torch.Tensor)
        and (tensor.is_floating_point() or tensor.is_complex())
        and tensor.layout is _STRIDED
        and not tensor.is_meta
    )


def saved_tensors(value: Any) -> list[torch.Tensor]:
    """The checkable tensors of a saved op value (one tensor, or a tuple for several outputs)."""
    items = value if isinstance(value, tuple) else (value,)
    return [t for t in items if checkable(t)]


def _extremes(tensor: torch.Tensor) -> torch.Tensor:
    """``[min, max]`` of a non-empty tensor, one kernel; NaN propagates to both (torch.aminmax)."""
    t = tensor.detach()
    t = torch.view_as_real(t) if t.is_complex() else t
    return torch.stack(torch.aminmax(t))


ValueClass = Literal["finite", "nan", "inf"]
"""What the extremes of a value show: ``nan`` (a NaN somewhere, maybe Inf too), ``inf`` (only
+/-Inf among the non-finite elements), ``finite``. The NaN tools need no more per op: a NaN is
always a finding, an Inf only when it reaches something that matters (``nonfinite/_paths.py``)."""


def _class_of(low: float, high: float) -> ValueClass:
    if math.isnan(low) or math.isnan(high):
        return "nan"
    return "finite" if math.isfinite(low) and math.isfinite(high) else "inf"


def value_class(tensor: torch.Tensor) -> ValueClass:
    """Whether ``tensor`` holds a NaN, only Infs, or only finite values: one reduction, one sync.

    Reads only ``aminmax``: a NaN anywhere makes both extremes NaN, an Inf shows as an extreme,
    so both extremes are finite exactly when every element is. Unlike ``isfinite().all()`` it
    runs one kernel and allocates no mask (5-8x cheaper on GPT-2 small activation shapes, second
    table of ``benchmarks/bench_nan.py``), and unlike a sum it cannot overflow.
    """
    if tensor.numel() == 0:
        return "finite"
    low, high = _extremes(tensor).tolist()
    return _class_of(low, high)


def is_all_finite(tensor: torch.Tensor) -> bool:
    """Whether every element of ``tensor`` is finite (:func:`value_class` is ``finite``)."""
    return value_class(tensor) == "finite"


def value_classes(values: Sequence[Sequence[torch.Tensor]]) -> list[ValueClass]:
    """The :data:`ValueClass` of each value (a group of tensors: NaN beats Inf beats finite).

    The batched form of :func:`value_class`, read from the largest magnitude of each tensor
    (NaN propagates into it, an Inf is it): one ``torch._foreach_norm(..., inf)`` and one host
    read per device. Measured on the 23,281 saved values of ``bench_nan.py``'s per-head trace
    (9,216 of them non-contiguous views), CPU: 0.08 s for the fused norms, against 0.18 s for
    one ``aminmax`` and read per tensor and 0.42 s for stacked ``aminmax`` pairs read once; on a
    GPU it is one fused kernel instead of one per tensor. The Python loop around it is kept to a
    list append per tensor.
    """
    result: list[ValueClass] = ["finite"] * len(values)
    flat: list[torch.Tensor] = []
    owner: list[int] = []
    for index, tensors in enumerate(values):
        for tensor in tensors:
            if tensor.numel():  # the inf-norm of an empty tensor is undefined (and it is finite)
                flat.append(tensor)
                owner.append(index)
    by_device: dict[torch.device, list[int]] = {}
    for position, tensor in enumerate(flat):
        by_device.setdefault(tensor.device, []).append(position)
    for positions in by_device.values():
        group = flat if len(by_device) == 1 else [flat[p] for p in positions]
        magnitudes = without_grad(_max_magnitudes, group)
        for position, magnitude in zip(positions, magnitudes):
            index = owner[position]
            if math.isnan(magnitude):
                result[index] = "nan"
            elif magnitude == math.inf and result[index] == "finite":
                result[index] = "inf"
    return result


def _max_magnitudes(tensors: list[torch.Tensor]) -> list[float]:
    """The largest magnitude of each tensor (one fused kernel, one host read; grad mode off:
    detaching each tensor first would cost a Python call per tensor)."""
    return torch.stack(torch._foreach_norm(tensors, math.inf)).tolist()


def finite_flags(values: Sequence[Sequence[torch.Tensor]]) -> list[bool]:
    """For each value (a group of tensors), whether every element of every tensor is finite
    (one host sync per device, :func:`value_classes`)."""
    return [found == "finite" for found in value_classes(values)]


def nonfinite_kinds(values: Sequence[Sequence[torch.Tensor]]) -> list[NonfiniteKind | None]:
    """The non-finite kind of each value (None when finite); one or two host syncs per device.

    Read from the largest and the smallest element of each tensor (``torch._foreach_max`` of it
    and of its negation: +Inf is the largest, -Inf the smallest, a NaN propagates into both):
    two fused passes per device instead of three reductions per tensor. Only a tensor holding a
    NaN, whose extremes hide its infinities, gets its own ``isposinf`` / ``isneginf`` read.
    """
    pending: dict[torch.device, list[tuple[int, torch.Tensor]]] = {}
    for index, tensors in enumerate(values):
        for tensor in tensors:
            t = torch.view_as_real(tensor) if tensor.is_complex() else tensor
            if t.numel():
                pending.setdefault(t.device, []).append((index, t.detach()))
    present = [[False, False, False] for _ in values]
    for items in pending.values():
        tensors = [t for _, t in items]
        highs = torch._foreach_max(tensors)
        lows = torch._foreach_max(torch._foreach_neg(tensors))  # -min
        rows = torch.stack([torch.stack(pair).double() for pair in zip(highs, lows)]).tolist()
        with_nan = []
        for (index, t), (high, low) in zip(items, rows):
            flags = present[index]
            if math.isnan(high) or math.isnan(low):
                flags[0] = True
                with_nan.append((index, t))
            flags[1] = flags[1] or high == math.inf
            flags[2] = flags[2] or low == math.inf
        if with_nan:
            infs = torch.stack(
                [
                    torch.stack([torch.isposinf(t).any(), torch.isneginf(t).any()])
                    for _, t in with_nan
                ]
            ).tolist()
            for (index, _), (pos, neg) in zip(with_nan, infs):
                present[index][1] = present[index][1] or pos
                present[index][2] = present[index][2] or neg
    return [_KIND_OF_FLAGS.get(tuple(flags), "mixed") for flags in present]


_KIND_OF_FLAGS: dict[tuple[bool, ...], NonfiniteKind | None] = {
    (False, False, False): None,
    (True, False, False): "nan",
    (False, True, False): "inf",
    (False, False, True): "-inf",
}


def _stat_vector(tensor: torch.Tensor) -> torch.Tensor:
    t = tensor.detach()
    if t.is_complex():
        t = torch.view_as_real(t)
    if not t.is_floating_point():
        t = t.to(torch.float64)
    finite = torch.isfinite(t)
    inf = torch.tensor(math.inf, dtype=t.dtype, device=t.device)
    parts = (
        torch.tensor(float(t.numel()), device=t.device),
        torch.isnan(t).sum(),
        (t == inf).sum(),
        (t == -inf).sum(),
        torch.where(finite, t, inf).min(),
        torch.where(finite, t, -inf).max(),
        torch.where(finite, t, 0).sum(dtype=torch.float64),
        finite.sum(),
    )
    return torch.stack([p.to(torch.float64) for p in parts])


def value_stats(values: Sequence[Sequence[torch.Tensor]]) -> list[ValueStats]:
    """Counts and finite min/max/mean of each value (several tensors are pooled).

    Complex tensors count their real and imaginary parts as separate elements. One host sync
    per device for the whole batch.
    """
    pending: dict[torch.device, list[tuple[int, torch.Tensor]]] = {}
    for index, tensors in enumerate(values):
        for tensor in tensors:
            if tensor.numel():
                pending.setdefault(tensor.device, []).append((index, _stat_vector(tensor)))
    pooled = [[0.0, 0.0, 0.0, 0.0, math.inf, -math.inf, 0.0, 0.0] for _ in values]
    for items in pending.values():
        rows = torch.stack([vector for _, vector in items]).cpu().tolist()
        for (index, _), row in zip(items, rows):
            acc = pooled[index]
            for k in (0, 1, 2, 3, 6, 7):
                acc[k] += row[k]
            acc[4], acc[5] = min(acc[4], row[4]), max(acc[5], row[5])
    return [_to_stats(acc) for acc in pooled]


def _to_stats(acc: list[float]) -> ValueStats:
    count = int(acc[7])
    return ValueStats(
        numel=int(acc[0]),
        nan_count=int(acc[1]),
        posinf_count=int(acc[2]),
        neginf_count=int(acc[3]),
        finite_min=acc[4] if count else None,
        finite_max=acc[5] if count else None,
        finite_mean=acc[6] / count if count else None,
    )


MAX_BATCH_ROWS = 16
"""A model input's non-finite rows are named up to this many (their count is exact)."""

BatchRows = tuple[tuple[int, ...], int, int]
"""(the first rows along dim 0 holding a non-finite element, how many do, the size of dim 0)."""


def nonfinite_rows(tensor: torch.Tensor) -> BatchRows | None:
    """Which rows along dim 0 (the batch of a model input) hold a non-finite element; None for
    a 0-d tensor. One reduction and one host sync."""
    if tensor.dim() == 0:
        return None
    bad = (~torch.isfinite(tensor.detach())).reshape(tensor.shape[0], -1).any(dim=1)
    rows = bad.nonzero().flatten().tolist()
    return tuple(rows[:MAX_BATCH_ROWS]), len(rows), tensor.shape[0]


def where_of(op: Op) -> Where:
    """The report ``Where`` of an op: label, module, file, line and the code text."""
    return Where(op=op.label, module=op.module, file=op.file, line=op.line, code=op.code)


def first_bad_thing(
    op: Op,
    stats: ValueStats,
    *,
    is_proven: bool,
    phase: Phase = "forward",
    node: str | None = None,
    fire_order: int | None = None,
    kind: NonfiniteKind | None = None,
    rows: BatchRows | None = None,
) -> FirstBadThing:
    """Describe ``op``'s non-finite value in the shared vocabulary (kind from ``stats``);
    ``rows`` says where a model input holds it (:func:`nonfinite_rows`)."""
    resolved = kind or stats.kind
    assert resolved is not None, f"{op.label} holds no non-finite value"
    shown, count, size = rows if rows is not None else ((), None, None)
    return FirstBadThing(
        phase=phase,
        kind=resolved,
        op=op.label,
        func=op.func,
        module=op.module,
        file=op.file,
        line=op.line,
        code=op.code,
        is_proven=is_proven,
        node=node,
        fire_order=fire_order,
        stats=stats,
        batch_rows=shown,
        num_batch_rows=count,
        batch_size=size,
    )


def kind_of(stats: Iterable[ValueStats]) -> NonfiniteKind | None:
    """The kind over several values: one kind when only one is present, else ``mixed``."""
    kinds = {s.kind for s in stats if s.kind is not None}
    if not kinds:
        return None
    return kinds.pop() if len(kinds) == 1 else "mixed"
