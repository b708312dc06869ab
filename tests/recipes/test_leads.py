"""Across the recipes: a report's status and its lead never disagree.

A lead is the one sentence a person reads. The invariant tested here: a report that does not
pass never leads with a sentence its recipe uses to say "pass". Sentences are compared as
templates, numbers replaced by ``#`` ("all 8 outputs depend only on allowed indices." ->
"all # outputs depend only on allowed indices."), so a failing batch_independence report that
leads with the passing sentence is caught whatever its counts.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np
import pytest
import torch
from torch import nn

import torchlens_nb as tl
from tests.recipes.planted import CausalAttention, IgnoresInput, PairLeak, teacher_classifier
from torchlens_nb.report import Report

CE = nn.CrossEntropyLoss()
NAN_LOSS = lambda out, y: (out * float("nan")).sum()  # noqa: E731


def mlp() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def narrow_mlp() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 4), nn.ReLU(), nn.Linear(4, 4))


def dead_mlp() -> nn.Sequential:
    model = mlp()
    with torch.no_grad():
        model[0].bias.fill_(-100.0)  # every ReLU input is negative: the layer is dead
    return model


def head_scaled(factor: float) -> nn.Sequential:
    model = mlp()
    with torch.no_grad():
        model[2].weight.mul_(factor)
    return model


def nan_weights() -> nn.Sequential:
    model = mlp()
    with torch.no_grad():
        model[0].weight[0, 0] = float("nan")
    return model


def batch(n: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(1)
    return torch.randn(n, 8), torch.randint(0, 4, (n,))


def teacher_batch() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    model, x, y = teacher_classifier()
    return model, (x, y)


def scaled(X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return (X - X.mean(axis=0)) / X.std(axis=0), y


def train_scaled(X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return (X - X[:80].mean(axis=0)) / X[:80].std(axis=0), y


def rows() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.normal(size=(100, 3)), rng.normal(size=100)


R = tl.recipes
CASES: dict[str, Callable[[], Report]] = {
    "data_sanity/pass": lambda: R.data_sanity(batch()),
    "data_sanity/fail-nan": lambda: R.data_sanity((torch.tensor([[float("nan")] * 2] * 4), None)),
    "data_sanity/warn-raw": lambda: R.data_sanity((batch()[0] * 100 + 50, batch()[1])),
    "data_sanity/inconclusive": lambda: R.data_sanity({"x": batch()[0], "y": ["a"] * 32}),
    "class_balance/pass": lambda: R.class_balance(torch.tensor([0, 1] * 10)),
    "class_balance/warn": lambda: R.class_balance(torch.tensor([0] * 20 + [1])),
    "class_balance/fail": lambda: R.class_balance(torch.tensor([0, 1]), num_classes=3),
    "init_loss/pass": lambda: R.init_loss(mlp(), batch(), CE),
    "init_loss/warn-head": lambda: R.init_loss(head_scaled(100.0), batch(), CE),
    "init_loss/fail-nan": lambda: R.init_loss(mlp(), batch(), NAN_LOSS, loss_kind="cross_entropy"),
    "init_loss/inconclusive": lambda: R.init_loss(mlp(), batch(), lambda o, y: o.sum()),
    "random_input_test/pass": lambda: R.random_input_test(*teacher_batch(), CE),
    "random_input_test/fail": lambda: R.random_input_test(
        IgnoresInput(), (torch.randn(8, 4), torch.randint(0, 3, (8,))), CE
    ),
    "random_input_test/inconclusive": lambda: R.random_input_test(mlp(), batch(), CE),
    "overfit_one_batch/pass": lambda: R.overfit_one_batch(mlp(), batch(8), CE, lr=1e-2),
    "overfit_one_batch/warn": lambda: R.overfit_one_batch(
        narrow_mlp(), batch(), CE, steps=300, lr=1e-2
    ),  # a 4-unit hidden layer plateaus at 17% of its start: not still falling
    "overfit_one_batch/pass-falling": lambda: R.overfit_one_batch(
        mlp(), batch(), CE, steps=60, lr=1e-2
    ),  # 60 steps fall without reaching ~0 and are still falling: a hint, not a warning
    "overfit_one_batch/fail": lambda: R.overfit_one_batch(dead_mlp(), batch(), CE, steps=20),
    "gradient_flow/pass": lambda: R.gradient_flow(mlp(), batch(), CE),
    "gradient_flow/warn-dead": lambda: R.gradient_flow(dead_mlp(), batch(), CE),
    "batch_independence/pass": lambda: R.batch_independence(nn.Linear(4, 4), torch.randn(8, 4)),
    "batch_independence/fail": lambda: R.batch_independence(PairLeak(), torch.randn(8, 4)),
    "batch_independence/inconclusive": lambda: R.batch_independence(
        IgnoresInput(), torch.randn(8, 4)
    ),
    "causal_dependency/pass": lambda: R.causal_dependency(CausalAttention(), torch.randn(1, 6, 4)),
    "causal_dependency/fail": lambda: R.causal_dependency(
        CausalAttention(diagonal=2), torch.randn(1, 6, 4)
    ),
    "update_ratio/pass": lambda: R.update_ratio(mlp(), batch(), CE, steps=6),
    "update_ratio/warn": lambda: R.update_ratio(mlp(), batch(), CE, steps=4, lr=1.0),
    "update_ratio/fail-nan": lambda: R.update_ratio(mlp(), batch(), NAN_LOSS, steps=3),
    "weight_distribution/pass": lambda: R.weight_distribution(mlp()),
    "weight_distribution/warn": lambda: R.weight_distribution(head_scaled(1000.0)),  # |w| > 100
    "weight_distribution/fail": lambda: R.weight_distribution(nan_weights()),
    "leakage_poison/pass": lambda: R.leakage_poison(train_scaled, *rows(), 80),
    "leakage_poison/fail": lambda: R.leakage_poison(scaled, *rows(), 80),
    "prime_dims/pass": lambda: R.prime_dims(mlp(), lambda batch: torch.randn(batch, 8)),
}


def template(lead: str) -> str:
    """The lead with every number (and nan / inf) replaced by ``#``."""
    return re.sub(r"[-+]?(\d+(\.\d*)?(e[-+]?\d+)?|nan|inf)", "#", lead)


@pytest.fixture(scope="module")
def reports() -> dict[str, Report]:
    torch.set_num_threads(1)
    return {name: make() for name, make in CASES.items()}


def test_every_case_has_the_status_its_name_says(reports: dict[str, Report]) -> None:
    wrong = {
        name: report.status
        for name, report in reports.items()
        if report.status != name.split("/")[1].split("-")[0]
    }
    assert wrong == {}


def test_a_report_that_does_not_pass_never_leads_with_a_passing_sentence(
    reports: dict[str, Report],
) -> None:
    passing: dict[str, set[str]] = {}
    for name, report in reports.items():
        if report.status == "pass":
            passing.setdefault(name.split("/")[0], set()).add(template(report.lead))
    disagree = {
        name: report.lead
        for name, report in reports.items()
        if report.status != "pass" and template(report.lead) in passing.get(name.split("/")[0], ())
    }
    assert disagree == {}
