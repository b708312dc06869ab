"""Segmented value statistics (``debug/_segment_stats.py``): the same numbers as reducing each
tensor on its own, across dtypes, chunk boundaries, empty and non-finite tensors."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from torchlens_nb.debug import _segment_stats
from torchlens_nb.debug._segment_stats import SegmentStats, segment_stats
from torchlens_nb.report._nonfinite import ValueStats


def reference(tensor: torch.Tensor) -> SegmentStats:
    """One tensor reduced on its own, the slow and obvious way."""
    t = torch.view_as_real(tensor) if tensor.is_complex() else tensor
    t = t.reshape(-1)
    finite = t[torch.isfinite(t)]
    tiny = torch.finfo(tensor.dtype).tiny
    values = ValueStats(
        numel=t.numel(),
        nan_count=int(torch.isnan(t).sum()),
        posinf_count=int((t == math.inf).sum()),
        neginf_count=int((t == -math.inf).sum()),
        finite_min=float(finite.min()) if finite.numel() else None,
        finite_max=float(finite.max()) if finite.numel() else None,
        finite_mean=float(finite.double().mean()) if finite.numel() else None,
    )
    return SegmentStats(values, int(((t != 0) & (t.abs() < tiny)).sum()))


def tensors() -> list[torch.Tensor]:
    torch.manual_seed(0)
    bad = torch.randn(5, 3)
    bad[0, 0], bad[1, 1], bad[2, 2] = math.nan, math.inf, -math.inf
    subnormal = torch.tensor([1e-40, -1e-41, 0.0, 1.0])  # two float32 subnormals
    return [
        torch.randn(2, 8),
        bad,
        torch.empty(0, 4),
        torch.full((3,), math.nan),  # no finite element
        subnormal,
        torch.randn(4, 4).half() * 1e-5,  # fp16 subnormals below 6.1e-5
        torch.randn(3, 5).bfloat16(),
        torch.randn(6, dtype=torch.float64),
        torch.randn(2, 3, dtype=torch.complex64),
        torch.randn(4, 6).t(),  # a non-contiguous view
    ]


@pytest.mark.parametrize("chunk", [1 << 22, 7], ids=["one-chunk", "chunks-of-7"])
def test_segmented_stats_equal_per_tensor_reductions(monkeypatch, chunk: int) -> None:
    monkeypatch.setattr(_segment_stats, "CHUNK_ELEMENTS", chunk)
    values = tensors()
    got, expected = segment_stats(values), [reference(t) for t in values]
    for a, b in zip(got, expected):  # a float64 sum in another order: the mean to 1e-12
        if b.values.finite_mean is None:
            assert a.values.finite_mean is None
        else:
            assert a.values.finite_mean == pytest.approx(b.values.finite_mean, rel=1e-12)
    assert [replace_mean(s) for s in got] == [replace_mean(s) for s in expected]


def replace_mean(stats: SegmentStats) -> SegmentStats:
    return dataclasses.replace(stats, values=dataclasses.replace(stats.values, finite_mean=None))


def test_flags_and_counts_of_the_planted_values() -> None:
    stats = segment_stats(tensors())
    bad = stats[1].values
    assert (bad.nan_count, bad.posinf_count, bad.neginf_count) == (1, 1, 1)
    assert not bad.is_finite and stats[0].values.is_finite
    assert (stats[2].values.numel, stats[2].values.finite_min) == (0, None)
    assert (stats[3].values.finite_min, stats[3].values.finite_mean) == (None, None)
    assert stats[4].subnormal_count == 2
    assert stats[8].values.numel == 12  # complex: real and imaginary parts
