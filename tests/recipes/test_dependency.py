"""batch_independence and causal_dependency: backprop from every output index to the input."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import torchlens_nb as tl
from tests.models import tiny_gpt2
from tests.recipes.planted import CausalAttention, PairLeak, TimeMajorMixer
from tests.recipes.state import assert_untouched, snapshot
from torchlens_nb.errors import DiagnosticArgumentError, InputFormError


def test_batch_independence_catches_view_instead_of_transpose() -> None:
    torch.manual_seed(0)
    report = tl.recipes.batch_independence(TimeMajorMixer(bug=True), torch.randn(3, 5, 4))
    assert report.status == "fail" and report.check == "batch_independence"
    # view(T, B, D) on a (3, 5, 4) batch makes every example read the others
    assert [(leak.output_index, leak.input_indices) for leak in report.leaks] == [
        (0, (1, 2)),
        (1, (0, 2)),
        (2, (0, 1)),
    ]
    assert report.findings[0].code == "batch_leak"


def test_batch_independence_passes_the_transpose_twin() -> None:
    torch.manual_seed(0)
    model = TimeMajorMixer(bug=False)
    model.train()
    model.fc.weight.grad = torch.ones_like(model.fc.weight)  # a gradient the caller had
    x = torch.randn(3, 5, 4)
    before = snapshot(model)
    report = tl.recipes.batch_independence(model, x)
    assert report.status == "pass" and report.leaks == () and report.blind == ()
    assert report.matrix is not None and len(report.matrix) == 3
    assert all(report.matrix[i][i] > 0 for i in range(3))
    assert_untouched(before, model)  # still in train mode, .grad bitwise the same


def test_batch_independence_finds_a_leak_invisible_from_output_zero() -> None:
    torch.manual_seed(0)
    report = tl.recipes.batch_independence(PairLeak(from_row=4, to_row=3), torch.randn(6, 4))
    assert [(leak.output_index, leak.input_indices) for leak in report.leaks] == [(3, (4,))]
    assert report.findings[0].fields["leaks"] == {"3": (4,)}
    assert report.table("leaks").dicts()[0]["depends_on"] == (4,)


def test_batch_independence_runs_in_eval_mode() -> None:
    torch.manual_seed(0)  # BatchNorm mixes the batch in train mode only
    model = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4), nn.Dropout(0.5))
    model.train()
    report = tl.recipes.batch_independence(model, torch.randn(5, 4))
    assert report.status == "pass"
    assert all(m.training for m in model.modules())


def test_causal_dependency_catches_a_mask_off_by_one() -> None:
    torch.manual_seed(0)
    report = tl.recipes.causal_dependency(CausalAttention(diagonal=2), torch.randn(2, 6, 4))
    assert report.status == "fail"
    # triu(diagonal=2) leaves key t+1 visible to query t for t = 0..4
    assert [(leak.output_index, leak.input_indices) for leak in report.leaks] == [
        (t, (t + 1,)) for t in range(5)
    ]
    assert report.findings[0].code == "causal_leak"


def test_causal_dependency_passes_the_correct_mask() -> None:
    torch.manual_seed(0)
    report = tl.recipes.causal_dependency(CausalAttention(diagonal=1), torch.randn(2, 6, 4))
    assert report.status == "pass" and report.leaks == ()
    matrix = report.matrix
    assert matrix is not None
    assert all(matrix[t][s] > 0 for t in range(6) for s in range(t + 1))
    assert all(matrix[t][s] == 0 for t in range(6) for s in range(t + 1, 6))


def test_causal_dependency_finds_a_leak_only_visible_from_position_5() -> None:
    torch.manual_seed(0)
    model = CausalAttention(diagonal=1, open_pair=(5, 7))
    report = tl.recipes.causal_dependency(model, torch.randn(1, 8, 4))
    assert [(leak.output_index, leak.input_indices) for leak in report.leaks] == [(5, (7,))]
    assert "5 <- [7]" in report.findings[0].message


def test_causal_dependency_of_a_real_transformer_goes_through_its_embedding() -> None:
    model = tiny_gpt2()
    report = tl.recipes.causal_dependency(model, {"input_ids": torch.randint(0, 64, (1, 9))})
    assert report.probed == "embedding transformer.wte"
    assert report.status == "pass" and report.size == 9


def test_dependency_checks_refuse_inputs_they_cannot_read() -> None:
    with pytest.raises(DiagnosticArgumentError, match="one output per input"):
        tl.recipes.batch_independence(nn.Flatten(0), torch.randn(3, 4))
    with pytest.raises(InputFormError, match="input_ids"):
        tl.recipes.causal_dependency(nn.Identity(), [torch.randn(1, 3, 2)])
    with pytest.raises(DiagnosticArgumentError, match="rtol"):
        tl.recipes.batch_independence(nn.Identity(), torch.randn(3, 4), rtol=1.5)


def test_dependency_figure_marks_the_leaks() -> None:
    torch.manual_seed(0)
    fig = tl.recipes.batch_independence(PairLeak(), torch.randn(6, 4)).figure()
    assert (list(fig.data[1].x), list(fig.data[1].y)) == ([4], [3])
