"""The checks kit's word on what it saw: the kind of a value written after the backward, a NaN
seen by a session without the non-finite check, a disabled GradScaler, complex gradients, and
``session.step(global_step=...)`` refused when it is not a step number."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import torchlens_nb as tl
from tests import models
from tests.checks.conftest import is_bitwise_equal, nonfinite_session, snapshot
from torchlens_nb.errors import CheckViolationError, DiagnosticArgumentError


def _backward(model: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor) -> None:
    optimizer.zero_grad()
    model(x).square().mean().backward()


@pytest.mark.fault("no_corruption")
def test_a_nan_written_after_the_backward_is_reported_as_nan_that_poisons_the_clip() -> None:
    model = models.mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    session = nonfinite_session(model, optimizer)
    with session, pytest.raises(CheckViolationError) as caught:
        _backward(model, optimizer, torch.randn(4, 8))
        model[0].weight.grad[0, 0] = math.nan  # finite on arrival, NaN at the step
        optimizer.step()
    fields = caught.value.fields
    assert [(p["param"], p["kind"]) for p in fields["params"]] == [("0.weight", "nan")]
    assert (fields["culprit_site"], fields["clipping_collateral_effect"]) == ("S-B", "nan_poisoned")
    # the 3 other gradients (and 0.weight itself) arrived finite and non-zero
    assert "would have turned into NaN 4 healthy gradient(s)" in caught.value.finding.message


@pytest.mark.fault("no_corruption")
def test_a_smeared_nan_with_no_healthy_gradient_says_so_in_words() -> None:
    model = models.mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    session = nonfinite_session(model, optimizer)
    x = torch.randn(4, 8)
    x[0, 0] = math.nan  # born in the forward: every gradient is NaN
    before = snapshot(model, optimizer)
    with session, pytest.raises(CheckViolationError) as caught:
        _backward(model, optimizer, x)
        optimizer.step()
    message = caught.value.finding.message
    assert "0 healthy" not in message and "no healthy gradient left to spoil" in message
    assert "smeared through the backward" not in message
    assert is_bitwise_equal(snapshot(model, optimizer), before)


@pytest.mark.fault("no_false_clean")
def test_a_session_without_the_nonfinite_check_never_says_clean_over_a_nan_it_read() -> None:
    model = models.mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    session = tl.debug.ChecksSession(model, optimizer, scaler=None)
    session.register_change_check(action="collect")  # reads the gradient norms ...
    session.register_update_ratio_check()  # ... but no non-finite check is registered
    torch.manual_seed(1)
    batches = [torch.randn(4, 8) for _ in range(3)]
    batches[1][0, 0] = math.nan
    with session:
        for x in batches:
            _backward(model, optimizer, x)
            optimizer.step()
    report = session.report()
    assert report.status == "found"
    nonfinite = [f for f in report.findings if f.code == "nonfinite_grad"]
    # attempt 1 got the NaN batch; attempt 2 ran on the NaN weights the optimizer wrote
    assert [(f.fields["attempt"], f.fields["action"]) for f in nonfinite] == [
        (1, "collect"),
        (2, "collect"),
    ]
    assert "was not stopped" in nonfinite[0].message
    missing = {u.check: u.code for u in report.unavailable}
    assert missing["nonfinite_grad"] == "not_registered"


@pytest.mark.fault("no_false_clean")
def test_a_session_that_reads_no_gradient_lists_nonfinite_gradients_as_not_checked() -> None:
    model = models.mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    session = tl.debug.ChecksSession(model, optimizer, scaler=None)
    with session:
        _backward(model, optimizer, torch.randn(4, 8))
        optimizer.step()
    report = session.report()
    entry = next(u for u in report.unavailable if u.check == "nonfinite_grad")
    assert "not observed" in entry.reason
    assert report.status != "clean"


@pytest.mark.fault("no_false_clean")
def test_a_healthy_session_with_the_nonfinite_check_is_clean_and_lists_nothing_for_it() -> None:
    model = models.mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    session = nonfinite_session(model, optimizer)
    with session:
        for _ in range(3):
            _backward(model, optimizer, torch.randn(4, 8))
            optimizer.step()
    report = session.report()
    assert report.status == "clean"
    assert "nonfinite_grad" not in {u.check for u in report.unavailable}


@pytest.mark.fault("no_corruption")
def test_a_disabled_gradscaler_is_a_session_without_a_scaler() -> None:
    model = models.mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", enabled=False)  # GradScaler(enabled=use_amp), AMP off
    session = tl.debug.ChecksSession(model, optimizer, scaler=scaler)
    session.register_nonfinite_grad_check()
    with session:
        for _ in range(2):
            optimizer.zero_grad()
            scaler.scale(model(torch.randn(4, 8)).square().mean()).backward()
            scaler.step(optimizer)
            scaler.update()
    report = session.report()
    ledger = report.ledgers["scale"]
    assert (ledger["method"], ledger["skipped"]) == ("not_applicable", 0)
    assert "enabled=False" in ledger["reason"]
    assert (report.status, report.counters["accepted"]) == ("clean", 2)
    # gradients are unscaled: the norms are labelled as such
    assert {row["grad_scale_provenance"] for row in report.table("params").dicts()} == {"unscaled"}


@pytest.mark.fault("no_false_clean")
def test_complex_gradients_are_judged_and_a_healthy_complex_model_is_clean() -> None:
    torch.manual_seed(0)
    model = nn.Linear(4, 2).to(torch.complex64)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    session = nonfinite_session(model, optimizer)
    x = torch.randn(8, 4, dtype=torch.complex64)
    target = torch.randn(8, 2, dtype=torch.complex64)
    losses = []
    with session:
        for _ in range(30):
            optimizer.zero_grad()
            loss = (model(x) - target).abs().square().mean()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    assert losses[-1] < losses[0]  # it trains
    report = session.report()
    assert (report.status, report.counters["accepted"]) == ("clean", 30)
    assert {row["grad_fact"] for row in report.table("params").dicts()} == {"ok"}


@pytest.mark.fault("bad_input")
@pytest.mark.parametrize(
    "global_step", ["a", 1.5, True, -5], ids=["str", "float", "bool", "negative"]
)
def test_session_step_refuses_a_global_step_that_is_not_a_step_number(global_step) -> None:
    model = models.mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    session = tl.debug.ChecksSession(model, optimizer, scaler=None)
    with session:
        with pytest.raises(DiagnosticArgumentError, match=r"global_step must be an int >= 0"):
            with session.step(global_step=global_step):
                pass
        with session.step(global_step=3):  # refused blocks leave the session usable
            _backward(model, optimizer, torch.randn(4, 8))
            optimizer.step()
    assert [r["global_step"] for r in session.report().ledgers["steps"]] == [3]
