"""Value statistics of many tensors at once: segmented reductions over their concatenation.

A trace of an op-dense model saves tens of thousands of small tensors (the 48-layer per-head
attention of ``benchmarks/bench_audit.py``: 21,000 outputs of 16-1,536 elements). Reducing each
one separately costs a few kernel launches per tensor and per statistic, which dominates: 8-10 s
for ``dtype_range`` on that trace. Here the tensors of one (device, dtype) are flattened into
chunks of about :data:`CHUNK_ELEMENTS` elements and every statistic is one
``torch.segment_reduce`` per chunk, so the cost follows the element count, not the tensor
count; all results reach the host in one copy per device.

Nothing is mutated; every reduction runs under ``torch.no_grad``. The concatenation copies at
most one chunk at a time, so the extra memory is bounded by the chunk (plus the largest tensor).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ..report._nonfinite import ValueStats

CHUNK_ELEMENTS = 1 << 22
"""Elements concatenated per reduction pass (16 MiB of float32): large enough that launch cost
is negligible, small enough that the temporary copy stays small next to the saved values."""


@dataclass(frozen=True)
class SegmentStats:
    """The value statistics of one tensor (the NaN tools' :class:`ValueStats`: complex parts
    count as separate elements) and its subnormal count."""

    values: ValueStats
    subnormal_count: int
    """Nonzero elements below the dtype's smallest normal magnitude (``finfo.tiny``)."""


_WIDTH = 8
"""numel, nan, +inf, -inf, finite min, finite max, finite sum, subnormal: one row per tensor."""


def segment_stats(tensors: Sequence[torch.Tensor]) -> list[SegmentStats]:
    """:class:`SegmentStats` of each floating-point or complex tensor, in order.

    Cost: per (device, dtype) and chunk, one ``torch.cat`` and seven ``segment_reduce`` passes;
    one host copy per device. Empty tensors give ``numel=0`` and no extremes.
    """
    groups: dict[tuple[torch.device, torch.dtype], list[int]] = {}
    for position, tensor in enumerate(tensors):
        groups.setdefault((tensor.device, tensor.dtype), []).append(position)
    rows: dict[torch.device, list[tuple[list[int], torch.Tensor]]] = {}
    with torch.no_grad():
        for (device, dtype), positions in groups.items():
            tiny = torch.finfo(dtype).tiny
            for chunk in _chunks(positions, tensors):
                rows.setdefault(device, []).append(
                    (chunk, _reduce([tensors[p] for p in chunk], tiny))
                )
    result: list[SegmentStats | None] = [None] * len(tensors)
    for items in rows.values():
        flat = torch.cat([values for _, values in items]).tolist()
        row = 0
        for chunk, _ in items:
            for position in chunk:
                result[position] = _stats(flat[row])
                row += 1
    return [stats for stats in result if stats is not None]


def _chunks(positions: list[int], tensors: Sequence[torch.Tensor]) -> list[list[int]]:
    chunks: list[list[int]] = [[]]
    size = 0
    for position in positions:
        numel = tensors[position].numel()
        if chunks[-1] and size + numel > CHUNK_ELEMENTS:
            chunks.append([])
            size = 0
        chunks[-1].append(position)
        size += numel
    return chunks


def _reduce(tensors: list[torch.Tensor], tiny: float) -> torch.Tensor:
    """``(len(tensors), _WIDTH)`` float64 statistics of one same-dtype chunk."""
    parts = [(torch.view_as_real(t) if t.is_complex() else t).reshape(-1) for t in tensors]
    lengths = torch.tensor([p.numel() for p in parts], device=parts[0].device)
    flat = torch.cat(parts)
    if flat.dtype in (torch.float16, torch.bfloat16):
        flat = flat.float()  # exact; segment_reduce has no half kernels on every device
    finite = torch.isfinite(flat)
    magnitude = flat.abs()

    def total(mask: torch.Tensor) -> torch.Tensor:
        return torch.segment_reduce(mask.double(), "sum", lengths=lengths, unsafe=True)

    low = torch.segment_reduce(
        torch.where(finite, flat, math.inf), "min", lengths=lengths, unsafe=True
    )
    high = torch.segment_reduce(
        torch.where(finite, flat, -math.inf), "max", lengths=lengths, unsafe=True
    )
    finite_sum = torch.segment_reduce(
        torch.where(finite, flat.double(), 0.0), "sum", lengths=lengths, unsafe=True
    )
    return torch.stack(
        [
            lengths.double(),
            total(torch.isnan(flat)),
            total(flat == math.inf),
            total(flat == -math.inf),
            low.double(),
            high.double(),
            finite_sum,
            total((magnitude < tiny) & (flat != 0)),
        ],
        dim=1,
    )


def _stats(row: list[float]) -> SegmentStats:
    numel, nan, posinf, neginf, low, high, finite_sum, subnormal = row
    count = numel - nan - posinf - neginf
    return SegmentStats(
        ValueStats(
            numel=int(numel),
            nan_count=int(nan),
            posinf_count=int(posinf),
            neginf_count=int(neginf),
            finite_min=low if count else None,
            finite_max=high if count else None,
            finite_mean=finite_sum / count if count else None,
        ),
        int(subnormal),
    )
