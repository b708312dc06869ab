"""Multi-output ops are checked on every floating-point output, live as on a trace.

``topk`` and ``max_pool2d(..., return_indices=True)`` return int64 indices beside their values:
the indices cannot hold a NaN, so a clean model is ``clean``, not ``partial`` with "the rest were
not checked". ``slogdet`` returns (sign, logabsdet): a singular matrix gives a finite sign and
``logabsdet = -inf``, which only a check of the second output sees.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import torchlens_nb as tl


class TopK(nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        values, indices = torch.topk(x, 2, dim=-1)
        return values * 2.0, indices


class PoolWithIndices(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pooled, _ = nn.functional.max_pool2d(x, 2, return_indices=True)
        return pooled + 1.0


class LogDetOfSingular(nn.Module):
    def forward(self, a: torch.Tensor) -> torch.Tensor:
        _sign, logabsdet = torch.linalg.slogdet(a)  # singular: sign 0, logabsdet -inf
        return logabsdet * 2.0


CLEAN = [
    pytest.param(TopK(), torch.arange(15.0).reshape(3, 5), id="topk"),
    pytest.param(PoolWithIndices(), torch.arange(16.0).reshape(1, 1, 4, 4), id="max_pool2d"),
]


@pytest.mark.parametrize(("model", "x"), CLEAN)
def test_an_integer_second_output_leaves_a_clean_model_clean(model: nn.Module, x) -> None:
    for report in (tl.debug.nonfinite_origin(model, x), tl.debug.find_nan(model, x)):
        assert (report.status, report.coverage) == ("clean", "full")
        assert "not checked" not in report.lead
        assert "could not be read" not in report.disclosures[0]


def test_a_nonfinite_second_output_is_born_at_its_op() -> None:
    singular = torch.ones(2, 2)
    for report in (
        tl.debug.nonfinite_origin(LogDetOfSingular(), singular),
        tl.debug.find_nan(LogDetOfSingular(), singular),
        tl.trace(LogDetOfSingular(), singular).find_nan(),
    ):
        origin = report.first_bad_thing
        assert (origin.op, origin.kind, origin.is_proven) == ("linalg_slogdet_1", "-inf", True)
