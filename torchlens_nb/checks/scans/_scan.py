"""The batched tensor scan of the checks kit (the norms kernel lives in ``_norms.py``).

:func:`scan_tensors` -- signed non-finite counts, zeros, subnormals, finite range, constant fills
and declared-bounds violations of many tensors, in two batched phases (the second only for the
rare tensors that need it), one host read per device each. ``tl.debug.param_health``, the
session's scheduled ``param_scan`` check and ``session.overhead()`` all run this one kernel.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ._norms import read_host


@dataclass(frozen=True)
class TensorStats:
    """What :func:`scan_tensors` measured on one tensor (host numbers)."""

    numel: int
    nan_count: int
    posinf_count: int
    neginf_count: int
    zero_count: int
    subnormal_count: int
    finite_min: float | None
    finite_max: float | None
    is_all_same: bool
    out_of_bounds_count: int | None

    @property
    def absmax(self) -> float | None:
        """Largest finite magnitude, None when no element is finite."""
        if self.finite_min is None or self.finite_max is None:
            return None
        return max(abs(self.finite_min), abs(self.finite_max))


def scan_tensors(
    tensors: Sequence[torch.Tensor], bounds: Sequence[tuple[float, float] | None]
) -> list[TensorStats]:
    """Scan dense strided tensors (any dtype): one host read per device, plus one more only
    when some tensor holds a non-finite value or crosses its declared bounds.

    Phase 1 reads each tensor about five times (``aminmax``, ``count_nonzero``, and the
    subnormal count for floating tensors). A tensor whose min and max are finite has no NaN or
    Inf, its range is that min and max, and it is constant exactly when they are equal, so the
    common case needs nothing else. Phase 2 runs only for tensors whose range is non-finite
    (signed NaN/Inf counts, finite range) or outside their bounds (the count outside).
    Complex tensors are scanned as their real view, bools as uint8. The caller skips meta,
    sparse and quantized tensors (they have no dense values).
    """
    flat = [_dense(t) for t in tensors]
    first = read_host([_phase_one(x) for x in flat])
    stats: list[TensorStats] = []
    second: list[tuple[int, torch.Tensor]] = []
    for position, (x, bound) in enumerate(zip(flat, bounds)):
        lo, hi, nonzero, small = first[4 * position : 4 * position + 4]
        numel = x.numel()
        is_finite = math.isfinite(lo) and math.isfinite(hi)
        stats.append(
            TensorStats(
                numel=numel,
                nan_count=0,
                posinf_count=0,
                neginf_count=0,
                zero_count=numel - int(nonzero),
                subnormal_count=int(small) - (numel - int(nonzero)),
                finite_min=lo if numel and is_finite else None,
                finite_max=hi if numel and is_finite else None,
                is_all_same=bool(numel) and lo == hi,
                out_of_bounds_count=None if bound is None else 0,
            )
        )
        crosses = bound is not None and numel and (lo < bound[0] or hi > bound[1])
        if numel and (not is_finite or crosses):
            second.append((position, _phase_two(x, bound)))
    values = read_host([vector for _, vector in second]) if second else []
    for slot, (position, _) in enumerate(second):
        nan, pos, neg, lo, hi, outside = values[6 * slot : 6 * slot + 6]
        has_finite = math.isfinite(lo) and math.isfinite(hi)
        stats[position] = dataclasses.replace(
            stats[position],
            nan_count=int(nan),
            posinf_count=int(pos),
            neginf_count=int(neg),
            finite_min=lo if has_finite else None,
            finite_max=hi if has_finite else None,
            is_all_same=stats[position].is_all_same and not nan,
            out_of_bounds_count=None if bounds[position] is None else int(outside),
        )
    return stats


def _dense(tensor: torch.Tensor) -> torch.Tensor:
    x = tensor.detach()
    if x.is_complex():
        x = torch.view_as_real(x)
    if x.dtype == torch.bool:
        x = x.to(torch.uint8)
    return x.reshape(-1)


def _out_dtype(x: torch.Tensor) -> torch.dtype:
    return torch.float32 if x.device.type == "mps" else torch.float64


def _phase_one(x: torch.Tensor) -> torch.Tensor:
    """``[min, max, nonzero count, count of |x| < tiny]`` (NaN min/max when a NaN is present;
    the last count includes the zeros)."""
    out = _out_dtype(x)
    if x.numel() == 0:
        return torch.tensor([math.inf, -math.inf, 0.0, 0.0], dtype=out, device=x.device)
    lo, hi = torch.aminmax(x)
    nonzero = torch.count_nonzero(x)
    if x.is_floating_point():
        small = torch.count_nonzero(x.abs() < torch.finfo(x.dtype).tiny)
    else:
        small = x.numel() - nonzero
    return torch.stack([v.to(out) for v in (lo, hi, nonzero, small)])


def _phase_two(x: torch.Tensor, bound: tuple[float, float] | None) -> torch.Tensor:
    """``[nan, +inf, -inf, finite min, finite max, finite values outside bound]``."""
    out = _out_dtype(x)
    zero = x.new_zeros((), dtype=out)
    if not x.is_floating_point():
        outside = ((x < bound[0]) | (x > bound[1])).sum() if bound else zero
        lo, hi = torch.aminmax(x)
        return torch.stack([v.to(out) for v in (zero, zero, zero, lo, hi, outside)])
    finite = torch.isfinite(x)
    parts = [
        torch.isnan(x).sum(),
        (x == math.inf).sum(),
        (x == -math.inf).sum(),
        torch.where(finite, x, math.inf).amin(),
        torch.where(finite, x, -math.inf).amax(),
    ]
    if bound is None:
        parts.append(zero)
    else:
        parts.append((((x < bound[0]) | (x > bound[1])) & finite).sum())
    return torch.stack([p.to(out) for p in parts])
