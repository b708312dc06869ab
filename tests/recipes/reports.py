"""Real recipe reports with NaN / Inf inside, one per report type (shared by the report
contract tests and the browser tier; built with torchlens_nb itself, never hand-written)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch import nn

import torchlens_nb as tl
from tests.recipes.planted import CausalAttention, CentreRows
from torchlens_nb.recipes.triage._output_vs_loss import output_vs_loss
from torchlens_nb.report import Report

NAN_LOSS = lambda out, y: (out * float("nan")).sum()  # noqa: E731
INF_LOSS = lambda out, y: (out * float("inf")).sum()  # noqa: E731


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    return torch.randn(8, 4), torch.randint(0, 3, (8,))


def linear() -> nn.Linear:
    torch.manual_seed(0)
    return nn.Linear(4, 3)


class NanScale(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.tensor(float("nan")))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.scale


def nan_weights() -> nn.Linear:
    layer = linear()
    with torch.no_grad():
        layer.weight[0, 0] = float("nan")
        layer.bias[0] = float("inf")
    return layer


def dead_layer() -> nn.Sequential:
    model = nn.Sequential(linear(), nn.Linear(3, 3))
    with torch.no_grad():
        model[0].weight.zero_()  # ||w|| = 0: an undefined ratio (NaN) while it stays zero
    model[0].weight.requires_grad_(True)
    return model


BUILDERS: dict[str, Callable[[], Report]] = {
    "data_sanity": lambda: tl.recipes.data_sanity(
        (torch.tensor([[float("nan"), float("inf")]]), torch.tensor([1]))
    ),
    "class_balance": lambda: tl.recipes.class_balance(torch.tensor([0, 0, 1]), num_classes=3),
    "init_loss": lambda: tl.recipes.init_loss(
        linear(), batch(), INF_LOSS, loss_kind="cross_entropy"
    ),
    "random_input_test": lambda: tl.recipes.random_input_test(linear(), batch(), NAN_LOSS),
    "overfit_one_batch": lambda: tl.recipes.overfit_one_batch(linear(), batch(), NAN_LOSS),
    "gradient_flow": lambda: tl.recipes.gradient_flow(linear(), batch(), INF_LOSS),
    "weight_distribution": lambda: tl.recipes.weight_distribution(NanScale()),
    "confident_errors": lambda: tl.recipes.confident_errors(nan_weights(), batch()),
    "update_ratio": lambda: tl.recipes.update_ratio(
        dead_layer(), batch(), nn.CrossEntropyLoss(), steps=3
    ),
    "batch_independence": lambda: tl.recipes.batch_independence(NanScale(), torch.randn(3, 2)),
    "causal_dependency": lambda: tl.recipes.causal_dependency(
        CausalAttention(diagonal=2), torch.randn(1, 4, 4)
    ),
    "leakage_poison": lambda: tl.recipes.leakage_poison(
        lambda X, y: (X - np.nanmean(X, axis=0), y), np.arange(20.0).reshape(10, 2), None, 6
    ),
    "prime_dims": lambda: tl.recipes.prime_dims(
        CentreRows(keepdim=False), lambda batch, seq: torch.randn(batch, seq, 16)
    ),
    "output_vs_loss": lambda: output_vs_loss(nan_weights(), batch(), nn.CrossEntropyLoss()),
    "triage": lambda: tl.recipes.triage(
        nan_weights(), batch(), nn.CrossEntropyLoss(), steps=3, live=False
    ),
}
NONFINITE = {
    "data_sanity",
    "class_balance",
    "init_loss",
    "random_input_test",
    "overfit_one_batch",
    "gradient_flow",
    "weight_distribution",
    "confident_errors",
    "update_ratio",
    "batch_independence",
    "output_vs_loss",
    "triage",
}
"""The builders whose reports carry NaN or Inf somewhere (a shape report has no floats)."""
