"""confident_errors: the most confident mistakes, and the pattern among them."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import torchlens_nb as tl
from tests.recipes.planted import teacher_classifier
from torchlens_nb.errors import InputFormError


def test_confident_errors_find_swapped_label_ids() -> None:
    model, x, y = teacher_classifier()
    mislabelled = y.clone()
    mislabelled[y == 2] = 0  # planted bug: class 2 stored as label 0
    loader = DataLoader(TensorDataset(x, mislabelled), batch_size=32)
    report = tl.recipes.confident_errors(model, loader, k=5)
    assert report.num_examples == 200 and report.num_errors == int((y == 2).sum())
    assert [(e.predicted, e.target) for e in report.errors] == [(2, 0)] * 5
    assert [e.rank for e in report.errors] == [1, 2, 3, 4, 5]
    confidences = [e.confidence for e in report.errors]
    assert confidences == sorted(confidences, reverse=True)
    top = report.errors[0]  # the index points back at the example
    assert mislabelled[top.index] == 0 and y[top.index] == 2
    assert report.findings[0].code == "systematic_confusion"
    assert report.findings[0].fields["count"] == 5


def test_confident_errors_of_a_correct_model_are_empty() -> None:
    model, x, y = teacher_classifier()
    report = tl.recipes.confident_errors(model, (x, y))
    assert report.errors == () and report.accuracy == 1.0 and report.status == "pass"


def test_confident_errors_says_when_indices_do_not_map_back() -> None:
    model, x, y = teacher_classifier()
    loader = DataLoader(TensorDataset(x, y), batch_size=50, shuffle=True)
    report = tl.recipes.confident_errors(model, loader)
    assert any("shuffles" in note for note in report.disclosures)


def test_confident_errors_reads_binary_logits() -> None:
    model = torch.nn.Linear(1, 1)
    with torch.no_grad():
        model.weight.fill_(10.0)
        model.bias.zero_()
    x = torch.tensor([[1.0], [-1.0], [0.5]])
    report = tl.recipes.confident_errors(model, (x, torch.tensor([0, 0, 1])))
    (error,) = report.errors
    assert (error.index, error.predicted, error.target) == (0, 1, 0)
    assert error.confidence == pytest.approx(torch.sigmoid(torch.tensor(10.0)).item())


def test_confident_errors_refuses_sequence_logits() -> None:
    with pytest.raises(InputFormError, match="N\\*T"):
        tl.recipes.confident_errors(torch.nn.Identity(), (torch.randn(2, 3, 4), torch.zeros(2, 3)))
