"""recipes/_stats.py: the fused passes of a finite tensor give the masked float64 path's numbers,
and a tensor with NaN or Inf still gets its moments over the finite elements."""

from __future__ import annotations

import math

import pytest
import torch

from torchlens_nb.recipes._stats import histogram, summary, tensor_stats
from torchlens_nb.recipes.training._gradients import _grad_moments


def _reference(values: torch.Tensor) -> dict[str, float]:
    """The masked float64 reading: moments of the finite elements."""
    flat = values.detach().double().reshape(-1)
    finite = flat[torch.isfinite(flat)]
    return {
        "mean": float(finite.mean()),
        "std": float(finite.std()),
        "min": float(finite.min()),
        "max": float(finite.max()),
        "zero_fraction": float((flat == 0).sum()) / flat.numel(),
    }


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.int64])
def test_a_finite_tensor_gets_the_float64_numbers_from_its_fused_passes(dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    values = (torch.randn(300, 70) * 3e-2 + 5.0).to(dtype)  # an offset: the mean matters
    values.view(-1)[::7] = 0
    stats = tensor_stats(values)
    expected = _reference(values)
    assert (stats.numel, stats.nan_count, stats.inf_count) == (21000, 0, 0)
    assert (stats.min, stats.max, stats.zero_fraction) == (
        expected["min"],
        expected["max"],
        expected["zero_fraction"],
    )
    assert stats.mean == pytest.approx(expected["mean"], rel=1e-6)
    assert stats.std == pytest.approx(expected["std"], rel=1e-5)
    assert stats.abs_max == max(abs(expected["min"]), abs(expected["max"]))


def test_nan_and_inf_are_counted_and_left_out_of_the_moments() -> None:
    values = torch.tensor([1.0, float("nan"), 3.0, float("-inf"), 0.0])
    stats, counts = summary(values, bins=3)
    assert (stats.nan_count, stats.inf_count, stats.zero_fraction) == (1, 1, 0.2)
    assert (stats.mean, stats.min, stats.max) == (4 / 3, 0.0, 3.0)
    assert stats.std == pytest.approx(float(torch.tensor([1.0, 3.0, 0.0]).double().std()))
    assert counts == histogram(values, 3) and sum(counts.counts) == 3


def test_summary_shares_one_read_and_matches_the_histogram_alone() -> None:
    torch.manual_seed(1)
    weight = torch.randn(64, 32)
    stats, counts = summary(weight, bins=30)
    assert stats == tensor_stats(weight)
    assert counts == histogram(weight, 30)
    assert sum(counts.counts) == weight.numel() and counts.edges[0] == stats.min
    assert counts.edges[-1] == stats.max
    one, constant = summary(torch.tensor([2.5]), 4)
    assert (one.mean, math.isnan(one.std)) == (2.5, True)
    assert constant.edges == (2.0, 3.0) and constant.counts == (1,)
    empty, nothing = summary(torch.zeros(0), 4)
    assert empty.numel == 0 and nothing.counts == ()


def test_gradient_moments_match_the_float64_reading() -> None:
    torch.manual_seed(2)
    grad = torch.randn(768, 96) * 1e-3 + 2e-5
    norm, mean, std, max_abs, zero_fraction = _grad_moments(grad)
    flat = grad.double().reshape(-1)
    assert norm == pytest.approx(float(flat.norm()), rel=1e-6)
    assert mean == pytest.approx(float(flat.mean()), rel=1e-5)
    assert std == pytest.approx(float(flat.std()), rel=1e-6)
    assert (max_abs, zero_fraction) == (float(flat.abs().max()), 0.0)
    assert _grad_moments(torch.zeros(3, 3)) == (0.0, 0.0, 0.0, 0.0, 1.0)
    nonfinite = _grad_moments(torch.tensor([1.0, float("inf")]))
    assert nonfinite[0] == math.inf  # a non-finite gradient keeps its non-finite norm
