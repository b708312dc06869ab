"""Every helper that takes inputs takes every form tl.trace takes: a tensor, a tuple or list of
positional arguments, a dict of keyword arguments."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import torchlens_nb as tl


class Scaled(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor, scale: float = 2.0) -> torch.Tensor:
        return self.fc(x) * scale


X = torch.ones(2, 3)
FORMS = {"tensor": X, "tuple": (X, 2.0), "list": [X, 2.0], "dict": {"x": X, "scale": 2.0}}
HELPERS = {
    "isolated_capture": lambda m, i: tl.debug.isolated_capture(m, i, seed=0).output,
    "bisect_precision": lambda m, i: [r.op for r in tl.debug.bisect_precision(m, i).rows],
    "check_determinism": lambda m, i: tl.debug.check_determinism(m, i).verdict,
    "flops_vs_dispatch": lambda m, i: tl.report.flops_vs_dispatch(m, i).ours_total,
    "graph_breaks": lambda m, i: tl.debug.graph_breaks(m, i).graph_count,
}


@pytest.mark.parametrize("helper", list(HELPERS))
def test_every_input_form_gives_the_same_answer(helper: str) -> None:
    torch.manual_seed(0)
    model = Scaled()
    answers = {form: HELPERS[helper](model, inputs) for form, inputs in FORMS.items()}
    reference = answers.pop("tensor")
    for form, answer in answers.items():
        same = (
            torch.equal(answer, reference)
            if isinstance(answer, torch.Tensor)
            else answer == reference
        )
        assert same, f"{helper} with {form} inputs gave {answer!r}, tensor gave {reference!r}"


@pytest.mark.parametrize("helper", list(HELPERS))
def test_a_string_input_is_refused_with_the_tokenize_hint(helper: str) -> None:
    with pytest.raises(tl.errors.InputFormError, match="tokenize it first"):
        HELPERS[helper](Scaled(), "some text")
