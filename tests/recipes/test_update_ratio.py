"""update_ratio: the ChecksSession's ||dw|| / ||w|| per layer and step, judged against 1e-3."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import torchlens_nb as tl
from tests.recipes.state import assert_untouched, snapshot
from torchlens_nb.errors import DiagnosticArgumentError, ModelTypeError


def mlp() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def test_adam_at_1e_3_updates_near_the_target_and_leaves_the_model_alone(batch) -> None:
    model = mlp()
    before = snapshot(model)
    report = tl.recipes.update_ratio(model, batch, nn.CrossEntropyLoss(), steps=6)
    assert report.status == "pass" and report.steps == (0, 1, 2, 3, 4, 5)
    assert [layer.name for layer in report.layers] == ["0.weight", "2.weight"]  # biases: not judged
    # Adam moves each weight by about lr, so ||dw|| / ||w|| ~ 1e-3 / rms(w) ~ 10^-2.3
    assert all(-3 < layer.median < -2 and layer.verdict == "ok" for layer in report.layers)
    assert_untouched(before, model)


@pytest.mark.parametrize(
    ("lr", "verdict", "code"),
    [
        (1.0, "too_high", "update_ratio_too_high"),
        (1e-6, "too_low", "update_ratio_too_low"),
    ],
    ids=["lr_1", "lr_1e-6"],
)
def test_learning_rates_far_off_are_flagged(batch, lr: float, verdict: str, code: str) -> None:
    report = tl.recipes.update_ratio(mlp(), batch, nn.CrossEntropyLoss(), steps=4, lr=lr)
    assert [layer.verdict for layer in report.layers] == [verdict, verdict]
    assert report.findings[0].code == code


def test_numbers_are_the_checks_session_numbers(batch) -> None:
    report = tl.recipes.update_ratio(mlp(), batch, nn.CrossEntropyLoss(), steps=3)
    checks = report.run_action("checks")
    first = next(r for r in checks.table("series").dicts() if r["attempt"] == 1 and r["group"] == 0)
    assert report.layers[0].log10_ratios[1] == math.log10(first["update_ratio"])


def test_reads_a_finished_session_report_per_param_group() -> None:
    model = mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)  # one group: the whole model
    session = tl.debug.ChecksSession(model, optimizer, scaler=None)
    session.register_update_ratio_check(every=1)
    with session:
        for _ in range(3):
            optimizer.zero_grad()
            model(torch.randn(4, 8)).square().mean().backward()
            optimizer.step()
    report = tl.recipes.update_ratio(session.report())
    (layer,) = report.layers
    assert layer.name == "group 0 (0.weight, 0.bias, 2.weight ...)"
    assert len(layer.log10_ratios) == 3


def test_update_ratio_validates_its_source(batch) -> None:
    with pytest.raises(ModelTypeError, match="ChecksSession report"):
        tl.recipes.update_ratio("model")
    with pytest.raises(DiagnosticArgumentError, match="weight matrix"):
        tl.recipes.update_ratio(nn.LayerNorm(8), batch, lambda out, y: out.sum())


def test_update_ratio_figure_draws_the_target_line(batch) -> None:
    fig = tl.recipes.update_ratio(mlp(), batch, nn.CrossEntropyLoss(), steps=2).figure()
    assert len(fig.data) == 2 and fig.layout.shapes[0].y0 == -3


def test_an_optimizer_class_trains_at_the_recipes_lr() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 1))
    batch = (torch.randn(16, 8), torch.randn(16, 1))
    slow = tl.recipes.update_ratio(
        model, batch, nn.MSELoss(), steps=3, lr=1e-4, optimizer=torch.optim.SGD
    )
    fast = tl.recipes.update_ratio(
        model, batch, nn.MSELoss(), steps=3, lr=1e-1, optimizer=torch.optim.SGD
    )
    # SGD's update is lr * grad, so a 1000x lr moves every layer's ratio by about 3 decades
    slow_ratio = slow.to_pandas()["median_log10"].mean()
    fast_ratio = fast.to_pandas()["median_log10"].mean()
    assert 2.0 < fast_ratio - slow_ratio < 4.0
