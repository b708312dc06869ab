"""output_vs_loss, the triage check that reads the outputs and the loss together: probabilities
into a loss that expects logits is the double softmax (or sigmoid) bug, said by name."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tests.recipes.state import assert_untouched, snapshot
from torchlens_nb.recipes.triage._output_vs_loss import output_vs_loss


def head(last: nn.Module | None = None) -> nn.Sequential:
    torch.manual_seed(0)
    layers: list[nn.Module] = [nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)]
    return nn.Sequential(*layers, *([last] if last is not None else []))


_SEED = torch.Generator().manual_seed(0)
BATCH = (torch.randn(32, 8, generator=_SEED), torch.randint(0, 4, (32,), generator=_SEED))
CASES = [
    ("logits-ce", head(), nn.CrossEntropyLoss(), "pass", "scores", None),
    ("softmax-ce", head(nn.Softmax(dim=1)), nn.CrossEntropyLoss(), "fail", "probabilities",
     "double_softmax"),
    ("log-softmax-ce", head(nn.LogSoftmax(dim=1)), nn.CrossEntropyLoss(), "pass",
     "log_probabilities", None),
    ("log-softmax-nll", head(nn.LogSoftmax(dim=1)), nn.NLLLoss(), "pass", "log_probabilities",
     None),
    ("softmax-nll", head(nn.Softmax(dim=1)), nn.NLLLoss(), "fail", "probabilities",
     "nll_on_probabilities"),
    ("logits-nll", head(), nn.NLLLoss(), "fail", "scores", "nll_on_scores"),
    ("sigmoid-bce-logits", head(nn.Sigmoid()), nn.BCEWithLogitsLoss(), "fail", "scores",
     "double_sigmoid"),
    ("logits-bce-logits", head(), nn.BCEWithLogitsLoss(), "pass", "scores", None),
    ("mse", head(), nn.MSELoss(), "inconclusive", "scores", None),
]  # fmt: skip


@pytest.mark.parametrize(
    ("model", "loss", "status", "form", "code"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_the_output_form_is_judged_against_the_loss(
    model: nn.Module, loss: nn.Module, status: str, form: str, code: str | None
) -> None:
    before = snapshot(model)
    report = output_vs_loss(model, BATCH, loss)
    assert (report.status, report.output_form) == (status, form)
    assert [f.code for f in report.findings] == ([code] if code else [])
    assert_untouched(before, model)


def test_the_class_axis_of_a_language_model_is_the_last() -> None:
    probabilities = torch.randn(2, 5, 7, generator=torch.Generator().manual_seed(0)).softmax(-1)

    class Fixed(nn.Module):
        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            return probabilities

    report = output_vs_loss(Fixed(), (torch.zeros(2, 5), torch.zeros(2, 5)), nn.CrossEntropyLoss())
    assert ([f.code for f in report.findings], report.class_dim) == (["double_softmax"], -1)
