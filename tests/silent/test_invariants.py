"""The per-step invariants of ``ChecksSession`` on healthy loops that look like the bugs: each
declared or legitimate exception stays silent, and what the session cannot judge is disclosed
as an ``unavailable`` entry, never passed as clean."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import torchlens_nb as tl
from tests.silent.zoo import batch, documented_session, mlp

SILENT = (
    "grads_not_reset",
    "step_did_not_move",
    "param_written_outside_step",
    "optimizer_has_nothing_to_train",
    "params_trained_by_no_optimizer",
    "frozen_param_changed",
)


def run(
    model: nn.Module,
    optimizer: Any,
    loop: Callable[[Any], None],
    setup: Callable[[Any], None] | None = None,
) -> tuple[Any, list[str]]:
    """The report of ``loop`` under the documented session, and the warnings it emitted."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        session = documented_session(model, optimizer)
        if setup is not None:
            setup(session)
        with session:
            loop(session)
    return session.report(), [str(w.message).split(":")[0] for w in caught]


def codes(report: Any) -> list[str]:
    return [f.code for f in report.findings if f.code in SILENT]


def test_gradient_accumulation_with_zero_grad_after_the_step_is_fresh() -> None:
    model = mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    def loop(_: Any) -> None:
        for step in range(12):
            x, y = batch(step)
            (F.mse_loss(model(x), y) / 4).backward()
            if step % 4 == 3:
                optimizer.step()
                optimizer.zero_grad(set_to_none=False)  # zero_() after the step, not None

    report, caught = run(model, optimizer, loop)
    assert codes(report) == [] and caught == []
    assert report.counters["accepted"] == 3


def test_a_forgotten_zero_grad_is_visible_to_a_checks_session() -> None:
    # issue 27's question, answered by the session itself
    model = mlp()
    optimizer = torch.optim.AdamW(model.parameters())

    def loop(_: Any) -> None:
        for step in range(3):
            x, y = batch(step)
            F.mse_loss(model(x), y).backward()
            optimizer.step()

    report, caught = run(model, optimizer, loop)
    finding = next(f for f in report.findings if f.code == "grads_not_reset")
    assert finding.fields["param"] == "2.bias"  # the parameter whose gradient opens a backward
    assert (finding.fields["first_attempt"], finding.fields["count"]) == (1, 2)
    assert caught.count("grads_not_reset") == 1


class TwoHeads(nn.Module):
    """A shared trunk and two heads that take turns: the head of the step opens its backward."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.trunk = nn.Linear(8, 16)
        self.heads = nn.ModuleList([nn.Linear(16, 4), nn.Linear(16, 4)])

    def forward(self, x: torch.Tensor, head: int) -> torch.Tensor:
        return self.heads[head](torch.relu(self.trunk(x)))


def test_a_forgotten_zero_grad_is_caught_when_two_heads_take_turns_opening_the_backward() -> None:
    # the session records, after each step, the gradients of the parameters that have opened a
    # backward so far; a parameter opening its first backward is not compared (head 1 at step 1)
    model = TwoHeads()
    optimizer = torch.optim.AdamW(model.parameters())

    def loop(_: Any) -> None:
        for step in range(4):
            x, y = batch(step)
            F.mse_loss(model(x, step % 2), y).backward()
            optimizer.step()

    report, caught = run(model, optimizer, loop)
    finding = next(f for f in report.findings if f.code == "grads_not_reset")
    assert finding.fields["param"] == "heads.0.bias"
    assert (finding.fields["first_attempt"], finding.fields["count"]) == (2, 2)
    assert caught.count("grads_not_reset") == 1


def test_two_heads_taking_turns_with_zero_grad_are_fresh() -> None:
    model = TwoHeads()
    optimizer = torch.optim.AdamW(model.parameters())

    def loop(_: Any) -> None:
        for step in range(6):
            x, y = batch(step)
            optimizer.zero_grad()
            F.mse_loss(model(x, step % 2), y).backward()
            optimizer.step()

    report, caught = run(model, optimizer, loop)
    assert "grads_not_reset" not in codes(report) and "grads_not_reset" not in caught


def test_carried_gradients_declared_do_not_fire() -> None:
    model = mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    def loop(_: Any) -> None:
        for step in range(3):
            x, y = batch(step)
            F.mse_loss(model(x), y).backward()
            optimizer.step()

    report, _ = run(model, optimizer, loop, lambda s: s.expect_grads_carried_over())
    assert codes(report) == []


class MaskedSGD(torch.optim.SGD):
    """Updates only the last layer: the first layer's step is masked."""

    @torch.no_grad()
    def step(self, closure: Any = None) -> None:
        for param in self.param_groups[0]["params"][2:]:
            param.add_(param.grad, alpha=-0.01)


def _train(model: nn.Module, optimizer: Any, steps: int = 4) -> Callable[[Any], None]:
    def loop(_: Any) -> None:
        for step in range(steps):
            optimizer.zero_grad()
            x, y = batch(step)
            F.mse_loss(model(x), y).backward()
            optimizer.step()

    return loop


def test_lr_zero_and_declared_masked_updates_do_not_fire() -> None:
    model = mlp()
    masked = MaskedSGD(model.parameters(), lr=0.01)
    report, caught = run(model, masked, _train(model, masked), lambda s: s.expect_unmoved(model[0]))
    assert codes(report) == [] and caught == []

    model = mlp()
    frozen_lr = torch.optim.SGD(
        [{"params": model[0].parameters(), "lr": 0.0}, {"params": model[2].parameters()}], lr=0.01
    )
    report, caught = run(model, frozen_lr, _train(model, frozen_lr))
    assert codes(report) == [] and caught == []


def test_the_same_masked_step_undeclared_is_caught_at_the_second_step() -> None:
    model = mlp()
    optimizer = MaskedSGD(model.parameters(), lr=0.01)
    session = tl.debug.ChecksSession(model, optimizer, scaler=None)  # no sampled step
    with warnings.catch_warnings(record=True), session:
        warnings.simplefilter("always")
        _train(model, optimizer)(session)
    report = session.report()
    finding = next(f for f in report.findings if f.code == "step_did_not_move")
    assert finding.severity == "critical"
    assert finding.fields["params"] == ("0.weight", "0.bias")
    assert finding.fields["first_attempt"] == 1  # suspect at 0, confirmed bitwise at 1


class DataSGD(torch.optim.SGD):
    """An older style: writes p.data, which the version counter does not see (nor does a fused
    kernel's write, e.g. the Hugging Face Trainer's fused AdamW)."""

    @torch.no_grad()
    def step(self, closure: Any = None) -> None:
        for param in self.param_groups[0]["params"]:
            param.data.add_(param.grad, alpha=-0.01)


def test_an_optimizer_writing_through_data_is_judged_on_sampled_steps_not_flagged() -> None:
    model = mlp()
    optimizer = DataSGD(model.parameters(), lr=0.01)
    report, caught = run(model, optimizer, _train(model, optimizer))  # update ratio every=1
    assert codes(report) == [] and caught == []
    assert not [u for u in report.unavailable if u.check == "step_moves"]
    assert report.status == "clean"


def test_without_sampled_steps_a_version_blind_optimizer_is_disclosed() -> None:
    model = mlp()
    optimizer = DataSGD(model.parameters(), lr=0.01)
    session = tl.debug.ChecksSession(model, optimizer, scaler=None)
    session.register_nonfinite_grad_check()
    with session:
        _train(model, optimizer)(session)
    report = session.report()
    entry = next(u for u in report.unavailable if u.check == "step_moves")
    assert entry.code == "written_without_version_bump" and "4 parameter(s)" in entry.reason
    assert report.status == "incomplete"  # what was not seen keeps the status from clean


def test_a_sampled_step_that_moved_nothing_is_found_at_that_step() -> None:
    model = mlp()
    optimizer = MaskedSGD(model.parameters(), lr=0.01)
    session = tl.debug.ChecksSession(model, optimizer, scaler=None)
    session.register_update_ratio_check(every=1)
    with warnings.catch_warnings(record=True), session:
        warnings.simplefilter("always")
        _train(model, optimizer)(session)
    finding = next(f for f in session.report().findings if f.code == "step_did_not_move")
    assert finding.fields["first_attempt"] == 0  # ||dw|| == 0 measured on the first step


def test_declared_frozen_parameters_that_stay_frozen_are_clean() -> None:
    model = mlp()
    model[0].requires_grad_(False)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)  # holds the frozen layer too
    report, caught = run(
        model, optimizer, _train(model, optimizer), lambda s: s.expect_frozen(model[0])
    )
    assert codes(report) == [] and caught == []
    assert next(r for r in report.checks_run if r.name == "frozen").state == "clean"


def test_an_ema_swap_inside_paused_is_not_a_write_outside_the_step() -> None:
    model = mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    shadow = [p.detach().clone() for p in model.parameters()]

    def loop(session: Any) -> None:
        for _ in range(4):
            _train(model, optimizer, steps=1)(session)
            with session.paused(), torch.no_grad():  # evaluate the EMA weights, then restore
                live = [p.detach().clone() for p in model.parameters()]
                for p, s in zip(model.parameters(), shadow):
                    p.copy_(s)
                for p, v in zip(model.parameters(), live):
                    p.copy_(v)

    report, caught = run(model, optimizer, loop)
    assert codes(report) == [] and caught == []


def test_an_optimizer_of_frozen_parameters_never_crashes_the_loop() -> None:
    # was: RuntimeError "Tensor list must have at least one tensor" from _update_ratio.py
    model = mlp()
    model[0].requires_grad_(False)
    optimizer = torch.optim.SGD(model[0].parameters(), lr=0.01)
    report, caught = run(model, optimizer, _train(model, optimizer))
    assert report.counters["accepted"] == 4
    assert [f.code for f in report.findings if f.severity == "critical"] == [
        "optimizer_has_nothing_to_train"
    ]
    assert "optimizer_has_nothing_to_train" in caught  # warned at construction


def test_invariants_can_raise_before_the_write_and_be_turned_off() -> None:
    model = mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    session = tl.debug.ChecksSession(model, optimizer, scaler=None)
    session.register_invariant_checks(action="raise")
    with pytest.raises(tl.debug.CheckViolationError, match="grads_not_reset"), session:
        for step in range(3):
            x, y = batch(step)
            F.mse_loss(model(x), y).backward()
            before = [p.detach().clone() for p in model.parameters()]
            optimizer.step()
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))  # not written

    quiet = tl.debug.ChecksSession(mlp(), torch.optim.SGD(mlp().parameters()), invariants=False)
    assert [r.name for r in quiet.report().checks_run] == ["stability", "no_accepted_steps"]


def test_expect_frozen_refuses_what_is_not_a_parameter() -> None:
    session = tl.debug.ChecksSession(mlp(), torch.optim.SGD(mlp().parameters()), scaler=None)
    with pytest.raises(tl.errors.DiagnosticArgumentError, match="expect_frozen"):
        session.expect_frozen(["backbone"])


def test_declarations_refuse_what_the_session_cannot_watch() -> None:
    model = mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    before = [p.detach().clone() for p in model.parameters()]
    session = tl.debug.ChecksSession(model, optimizer, scaler=None)
    # a module of another model: its parameters would never be read by this session
    with pytest.raises(
        tl.errors.DiagnosticArgumentError, match="not parameters of this session's model"
    ):
        session.expect_frozen(nn.Linear(3, 3))
    with pytest.raises(tl.errors.DiagnosticArgumentError, match="replica_every must be"):
        session.register_invariant_checks(replica_every=0)
    with pytest.raises(tl.errors.DiagnosticArgumentError, match="not parameters"):
        tl.debug.ChecksSession(model, optimizer, scaler=None, expect_frozen=torch.zeros(2))
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    session.expect_frozen(next(model.children()))  # a part of the model is accepted


# ----- issue 42 / issue 45: what the step uses, not what a hook saw ---------------------------
def dead_relu() -> nn.Sequential:
    model = mlp()
    with torch.no_grad():
        model[0].bias.fill_(-1e3)  # every pre-activation < 0: layer 0's gradients are exactly 0
    return model


@pytest.mark.parametrize("make", [torch.optim.SGD, torch.optim.Adam], ids=["sgd", "adam"])
def test_an_exactly_zero_gradient_is_no_step_did_not_move(make: Any) -> None:
    # issue 45: a dead ReLU under register_update_ratio_check(every=1) alone (no check that
    # takes gradient norms, so the gradient fact is "unmeasured") got a false CRITICAL
    model = dead_relu()
    optimizer = make(model.parameters(), lr=0.01)
    session = tl.debug.ChecksSession(model, optimizer, scaler=None)
    session.register_update_ratio_check(every=1)
    with warnings.catch_warnings(record=True) as caught, session:
        warnings.simplefilter("always")
        for step in range(4):
            optimizer.zero_grad()
            x, y = batch(step)
            F.mse_loss(model(x), y).backward()
            optimizer.step()
    assert float(model[0].weight.grad.abs().max()) == 0.0
    assert "step_did_not_move" not in codes(session.report())
    assert [str(w.message) for w in caught] == []


def test_the_update_ratio_recipe_on_a_dead_relu_leaks_no_warning() -> None:
    # issue 45: triage's update_ratio step ran a session whose invariants warned in the cell
    model = dead_relu()
    x, y = batch(0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tl.recipes.update_ratio(model, (x, y), F.mse_loss, optimizer=torch.optim.SGD, lr=0.01)
    assert [str(w.message) for w in caught if "step_did_not_move" in str(w.message)] == []


def test_a_pause_keeps_the_zero_grad_record() -> None:
    # weight clipping declared with session.paused() used to switch the zero_grad check off
    def clipped(zero_grad: bool) -> list[str]:
        model = mlp()
        optimizer = torch.optim.RMSprop(model.parameters(), lr=5e-5)

        def loop(session: Any) -> None:
            for step in range(4):
                with session.paused(), torch.no_grad():
                    for p in model.parameters():
                        p.clamp_(-0.01, 0.01)
                if zero_grad:
                    optimizer.zero_grad()
                x, y = batch(step)
                F.mse_loss(model(x), y).backward()
                optimizer.step()

        report, caught = run(model, optimizer, loop)
        return codes(report) + caught

    assert clipped(zero_grad=True) == []
    assert clipped(zero_grad=False).count("grads_not_reset") == 2  # the finding and its warning


def test_a_sam_step_is_judged_at_its_base_optimizer() -> None:
    # SAM's step() is never called: the session hooks base_optimizer, so a NaN gradient stops
    # the base step before it writes, and SAM's own perturbation is not a write from outside
    from tests.corpus.optimizers import SAM, classifier

    model = classifier()
    optimizer = SAM(model.parameters(), torch.optim.SGD, lr=0.1)
    session = tl.debug.ChecksSession(model, optimizer, scaler=None)
    session.register_nonfinite_grad_check(action="raise")
    x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))
    with pytest.raises(tl.debug.CheckViolationError, match="nonfinite"), session:
        for step in range(3):
            before = model[0].weight.detach().clone()
            F.cross_entropy(model(x), y).backward()
            optimizer.first_step(zero_grad=True)
            F.cross_entropy(model(x), y).backward()
            if step == 2:
                model[0].weight.grad[0, 0] = float("nan")
            optimizer.second_step(zero_grad=True)
    assert torch.equal(model[0].weight, before)  # restored by second_step, never stepped
    assert "first_step" not in vars(optimizer)  # the wrapper's methods are its own again
    report = session.report()
    assert [f.code for f in report.findings if f.code == "param_written_outside_step"] == []


def test_expect_frozen_takes_a_list_of_modules() -> None:
    # the docs say it takes modules: [m.base for m in lora_layers] was refused
    model = mlp()
    model[0].requires_grad_(False)
    optimizer = torch.optim.SGD(model[2].parameters(), lr=0.01)
    session = tl.debug.ChecksSession(model, optimizer, scaler=None, expect_frozen=[model[0]])
    with session:
        for step in range(2):
            optimizer.zero_grad()
            x, y = batch(step)
            F.mse_loss(model(x), y).backward()
            optimizer.step()
    assert [f.code for f in session.report().findings if f.severity != "info"] == []
    with pytest.raises(tl.errors.DiagnosticArgumentError, match="module, a tensor"):
        tl.debug.ChecksSession(model, optimizer, scaler=None, expect_frozen=["model[0]"])
