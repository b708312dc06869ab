"""gradient_flow: per-parameter gradients of one backward, with grad_health's frontier."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import torchlens_nb as tl
from tests.recipes.state import assert_untouched, snapshot


@pytest.fixture
def batch() -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    return torch.randn(16, 8), torch.randint(0, 4, (16,))


class DeadMiddle(nn.Module):
    """Planted bugs: ``b``'s pre-activation is shifted by -100 (its ReLU is dead for every
    input), and ``unused`` is never called."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b, self.c = nn.Linear(8, 16), nn.Linear(16, 16), nn.Linear(16, 4)
        self.unused = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.a(x))
        h = torch.relu(self.b(h) - 100.0)
        return self.c(h)


def test_gradient_flow_names_the_disconnected_and_the_dead_cone(batch) -> None:
    report = tl.recipes.gradient_flow(DeadMiddle(), batch, nn.CrossEntropyLoss())
    verdicts = {p.name: p.verdict for p in report.params}
    assert verdicts == {
        "a.weight": "zero",
        "a.bias": "zero",
        "b.weight": "zero",
        "b.bias": "zero",
        "c.weight": "zero",
        "c.bias": "ok",
        "unused.weight": "disconnected",
        "unused.bias": "disconnected",
    }
    # grad_health's frontier: the subtraction whose output gradient is zero under a live ReLU
    assert [(f.op, f.verdict) for f in report.frontier] == [("sub_1", "zero")]
    zero = next(f for f in report.findings if f.code == "grad_zero")
    assert zero.where is not None and zero.where.code == "h = torch.relu(self.b(h) - 100.0)"
    assert next(f for f in report.findings if f.code == "grad_disconnected").fields["params"] == (
        "unused.weight",
        "unused.bias",
    )
    assert report.run_action("grad_health").report_type == "grad_health"


def test_gradient_flow_of_a_healthy_mlp_passes_and_restores_the_caller_grads(batch) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.1), nn.Linear(16, 4))
    model.eval()
    nn.functional.cross_entropy(model(batch[0]), batch[1]).backward()  # the caller's grads
    before = snapshot(model)
    report = tl.recipes.gradient_flow(model, batch, nn.CrossEntropyLoss())
    assert report.status == "pass" and report.frontier == ()
    assert [p.verdict for p in report.params] == ["ok"] * 4
    # measured: a default-initialised MLP's gradient RMS spans well under 2 decades
    assert report.spread_decades is not None and report.spread_decades < 2
    weight = report.params[0]
    assert weight.norm == pytest.approx(weight.rms * math.sqrt(16 * 8))
    assert_untouched(before, model)  # .grad objects and bits, eval mode, RNG (dropout ran)


def test_gradient_flow_flags_exploding_gradients_by_the_given_threshold(batch) -> None:
    torch.manual_seed(0)
    model = nn.Linear(8, 4)
    report = tl.recipes.gradient_flow(
        model, (100 * batch[0], batch[1]), nn.CrossEntropyLoss(), exploding_threshold=1.0
    )
    assert report.exploding_threshold == 1.0
    assert report.params[0].verdict == "exploding"
    assert report.findings[0].code == "grad_exploding" and report.status == "fail"


def _forwards(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> int:
    """How many forwards of ``model`` one gradient_flow call runs."""
    calls: list[int] = []
    handle = model.register_forward_pre_hook(lambda module, args: calls.append(1))
    try:
        tl.recipes.gradient_flow(model, batch, nn.CrossEntropyLoss())
    finally:
        handle.remove()
    return len(calls)


def test_gradient_flow_runs_one_forward_unless_a_norm_or_a_disconnected_parameter_asks(
    batch,
) -> None:
    torch.manual_seed(0)
    assert _forwards(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)), batch) == 1
    # a disconnected parameter: one more forward asks whether any module output reads it
    assert _forwards(DeadMiddle(), batch) == 2
    # a BatchNorm: one more (no_grad) forward finds the biases it cancels
    with_norm = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 4))
    assert _forwards(with_norm, batch) == 2
    report = tl.recipes.gradient_flow(with_norm, batch, nn.CrossEntropyLoss())
    expected = next(f for f in report.findings if f.code == "grad_expected_small")
    assert expected.fields["params"] == ("0.bias",) and report.status == "pass"
