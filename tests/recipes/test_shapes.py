"""prime_dims: distinct prime sizes expose reshapes and broadcasts that equal sizes hide."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import torchlens_nb as tl
from tests.recipes.planted import CentreRows, Regressor, TimeMajorMixer
from tests.recipes.state import assert_untouched, snapshot
from torchlens_nb.errors import DiagnosticArgumentError


def make_sequence(batch: int, seq: int) -> torch.Tensor:
    return torch.randn(batch, seq, 16)


def test_prime_dims_names_the_op_that_breaks_with_primes() -> None:
    torch.manual_seed(0)
    model = CentreRows(keepdim=False)  # (B, T) - (B,): runs only while B == T
    report = tl.recipes.prime_dims(model, make_sequence)
    # primes skip 16 and 4 (parameter sizes) and the baseline 8: batch 7, seq 11
    assert report.prime_sizes == (("batch", 7), ("seq", 11))
    assert (report.is_baseline_ok, report.is_prime_ok) == (True, False)
    finding = report.findings[0]
    assert (finding.code, finding.severity) == ("shape_broke", "critical")
    assert finding.where is not None and finding.where.op == "mean_1"
    assert finding.where.code == "return scores - scores.mean(dim=-1, keepdim=self.keepdim)"
    assert report.broke is not None and report.broke.error.startswith("RuntimeError")


def test_prime_dims_passes_the_keepdim_twin() -> None:
    torch.manual_seed(0)
    model = CentreRows(keepdim=True)
    model.train()
    before = snapshot(model)
    report = tl.recipes.prime_dims(model, make_sequence)
    assert report.status == "pass" and report.output_dims == ("batch", "seq")
    assert_untouched(before, model)


def test_prime_dims_flags_a_silent_outer_product_broadcast() -> None:
    torch.manual_seed(0)
    report = tl.recipes.prime_dims(
        Regressor(squeeze=False), lambda batch: (torch.randn(batch, 16), torch.randn(batch))
    )
    (site,) = report.broadcasts
    assert (site.op, site.input_shapes, site.output_shape, site.dims) == (
        "sub_1",
        ((7, 1), (7,)),
        (7, 7),
        ("batch",),
    )
    assert report.findings[0].code == "silent_broadcast"
    twin = tl.recipes.prime_dims(
        Regressor(squeeze=True), lambda batch: (torch.randn(batch, 16), torch.randn(batch))
    )
    assert twin.status == "pass" and twin.broadcasts == ()


def test_prime_dims_sees_the_batch_dimension_moved_by_a_view() -> None:
    torch.manual_seed(0)

    class ViewBack(TimeMajorMixer):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(x.transpose(0, 1))  # forgot to transpose back: (seq, batch, dim)

    report = tl.recipes.prime_dims(
        ViewBack(bug=False), lambda batch, seq: torch.randn(batch, seq, 4)
    )
    assert report.output_dims == ("seq", "batch", "4")
    assert [f.code for f in report.findings] == ["output_dims_moved"]


def test_prime_dims_reports_a_baseline_that_does_not_run() -> None:
    report = tl.recipes.prime_dims(nn.Linear(16, 4), lambda batch: torch.randn(batch, 3))
    assert report.findings[0].code == "baseline_failed" and not report.is_baseline_ok


def test_prime_dims_validates_make_input() -> None:
    with pytest.raises(DiagnosticArgumentError, match="named size"):
        tl.recipes.prime_dims(nn.Linear(2, 2), lambda: torch.randn(3, 2))
    with pytest.raises(DiagnosticArgumentError, match="primes"):
        tl.recipes.prime_dims(
            nn.Linear(2, 2), lambda batch: torch.randn(batch, 2), primes={"rows": 7}
        )
