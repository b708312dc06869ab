"""overfit_one_batch: a deep copy trained on one batch, with a throttled live chart."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import torchlens_nb as tl
from tests.recipes.state import assert_untouched, snapshot
from torchlens_nb.errors import DiagnosticArgumentError
from torchlens_nb.recipes.training import _overfit


def mlp() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4))


def test_a_healthy_mlp_memorises_one_batch_and_the_caller_model_is_untouched(batch) -> None:
    model = mlp()
    model.eval()
    nn.functional.cross_entropy(model(batch[0]), batch[1]).backward()  # the caller's own grads
    before = snapshot(model)
    initial = nn.functional.cross_entropy(model(batch[0]), batch[1]).item()
    report = tl.recipes.overfit_one_batch(model, batch, nn.CrossEntropyLoss(), steps=40, lr=5e-2)
    assert report.verdict == "memorised" and report.status == "pass"
    assert report.steps_run == 40 and len(report.grad_norms) == 40
    assert report.losses[0] == initial  # step 0 is the untouched copy: bitwise the same loss
    assert report.losses[-1] <= 0.05 * initial and report.target_loss == 0.05 * initial
    assert_untouched(before, model)  # weights, .grad, eval mode, RNG


class DeadHidden(nn.Module):
    """Planted bug: the hidden layer's output is multiplied by zero."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.hidden, self.head = nn.Linear(8, 32), nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.hidden(x)) * 0.0)


def test_a_model_that_cannot_memorise_is_stuck(batch) -> None:
    report = tl.recipes.overfit_one_batch(
        DeadHidden(), batch, nn.CrossEntropyLoss(), steps=30, lr=5e-2
    )
    # only the head's bias learns: the loss falls to the batch's label entropy, not to zero
    assert report.verdict == "stuck" and report.findings[0].code == "cannot_overfit"
    assert report.losses[-1] > 0.5 * report.losses[0]


def test_a_detached_output_reports_no_gradient(batch) -> None:
    class Detached(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(8, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(x).detach()

    report = tl.recipes.overfit_one_batch(Detached(), batch, nn.CrossEntropyLoss(), steps=5)
    assert report.steps_run == 1 and report.grad_norms == (0.0,)
    assert {f.code for f in report.findings} == {"cannot_overfit", "no_gradient"}


def test_a_huge_learning_rate_diverges() -> None:
    torch.manual_seed(0)
    batch = (10 * torch.randn(16, 4), torch.randn(16, 1))
    report = tl.recipes.overfit_one_batch(nn.Linear(4, 1), batch, nn.MSELoss(), steps=20, lr=10.0)
    assert report.verdict == "diverged" and report.findings[0].code == "loss_diverged"


class SteppedClock:
    """A stand-in for the recipe's clock: every read advances it by ``tick_s`` (no real time
    is read, so the throttle is checked exactly, however busy the machine)."""

    def __init__(self, tick_s: float) -> None:
        self.now, self.tick_s, self.reads = 0.0, tick_s, 0

    def monotonic(self) -> float:
        self.now += self.tick_s
        self.reads += 1
        return self.now


def test_live_updates_are_throttled_and_end_on_the_final_state(batch, monkeypatch) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4))
    clock = SteppedClock(tick_s=0.03)  # about 3 reads per LIVE_INTERVAL_S (0.1 s)
    monkeypatch.setattr(_overfit, "time", clock)
    pushed: list[tl.report.OverfitReport] = []
    report = tl.recipes.overfit_one_batch(
        model, batch, nn.CrossEntropyLoss(), steps=60, lr=5e-2, live=False, on_update=pushed.append
    )
    interim, final = pushed[:-1], pushed[-1]
    assert final == report and final.status != "running"
    assert interim and all(r.status == "running" and r.verdict == "running" for r in interim)
    steps = [r.steps_run for r in interim]
    assert steps == sorted(set(steps))  # each push shows new steps: the chart moves
    # at most one push per LIVE_INTERVAL_S of the clock (10 Hz), plus the first
    assert len(interim) <= clock.now / _overfit.LIVE_INTERVAL_S + 1
    assert len(interim) < 60  # throttled: not one push per step
    assert interim[-1].losses == report.losses[: interim[-1].steps_run]


def test_overfit_validates_before_copying(batch) -> None:
    with pytest.raises(DiagnosticArgumentError, match="steps"):
        tl.recipes.overfit_one_batch(mlp(), batch, nn.CrossEntropyLoss(), steps=0)
    with pytest.raises(DiagnosticArgumentError, match="lr"):
        tl.recipes.overfit_one_batch(mlp(), batch, nn.CrossEntropyLoss(), lr=-1.0)
    with pytest.raises(DiagnosticArgumentError, match="live"):
        tl.recipes.overfit_one_batch(mlp(), batch, nn.CrossEntropyLoss(), live="yes")


def test_overfit_figure_has_loss_and_grad_norm_traces(batch) -> None:
    report = tl.recipes.overfit_one_batch(mlp(), batch, nn.CrossEntropyLoss(), steps=3)
    fig = report.figure()
    assert [trace.name for trace in fig.data] == ["loss", "grad norm"]
    assert list(fig.data[0].y) == list(report.losses)


def test_outside_a_kernel_nothing_is_displayed(batch, capsys) -> None:
    tl.recipes.overfit_one_batch(mlp(), batch, nn.CrossEntropyLoss(), steps=2)  # live=None
    assert capsys.readouterr().out == ""


class RaiseAtCall:
    """A cross-entropy loss that raises ``error`` on its ``call``-th call."""

    def __init__(self, call: int, error: BaseException) -> None:
        self.calls, self.call, self.error = 0, call, error

    def __call__(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.calls == self.call:
            raise self.error
        return nn.functional.cross_entropy(out, y)


@pytest.mark.parametrize(
    ("error", "how"),
    [
        (ValueError("bad target"), "raised ValueError: bad target"),
        (KeyboardInterrupt(), "was interrupted (KeyboardInterrupt)"),
    ],
)
def test_a_loss_fn_that_raises_at_step_5_ends_the_live_chart_in_a_final_state(
    batch, error: BaseException, how: str
) -> None:
    pushed: list[tl.report.OverfitReport] = []
    with pytest.raises(type(error)):
        tl.recipes.overfit_one_batch(
            mlp(), batch, RaiseAtCall(5, error), steps=100, live=False, on_update=pushed.append
        )
    final = pushed[-1]
    assert final.status == "inconclusive" and final.verdict == "stopped"
    assert final.lead.startswith(f"stopped at step 5/100: the step {how}; the last loss was")
    assert final.steps_run == 4  # four losses were computed before the fifth call raised
    assert [u.code for u in final.unavailable] == ["stopped"]


def test_a_loss_fn_that_raises_at_once_still_ends_in_a_final_state(batch) -> None:
    pushed: list[tl.report.OverfitReport] = []
    with pytest.raises(ValueError):
        tl.recipes.overfit_one_batch(
            mlp(), batch, RaiseAtCall(1, ValueError("x")), live=False, on_update=pushed.append
        )
    assert [r.lead for r in pushed] == ["stopped at step 1/200: the step raised ValueError: x."]
