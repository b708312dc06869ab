"""Keeping the batch that broke training: ``session.step(inputs=...)``, ``err.replay`` and
``err.investigate()``."""

from __future__ import annotations

import gc
import math
import weakref

import pytest
import torch
from torch import nn

import torchlens_nb as tl
from tests.checks.conftest import is_bitwise_equal, nonfinite_session, snapshot
from torchlens_nb.errors import CheckViolationError, DiagnosticArgumentError, UnavailableError


def dropout_mlp() -> nn.Sequential:
    """Linear -> Dropout -> ReLU -> Linear: every forward draws from the CPU RNG."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.Dropout(0.5), nn.ReLU(), nn.Linear(16, 4))


def session_on(model: nn.Module) -> tuple[tl.debug.ChecksSession, torch.optim.Optimizer]:
    optimizer = torch.optim.AdamW(model.parameters())
    return nonfinite_session(model, optimizer), optimizer


@pytest.fixture
def kept() -> tuple[nn.Module, torch.Tensor, CheckViolationError]:
    """(model, batch, error): a boundary-mode step on an all-NaN batch kept with inputs=."""
    model = dropout_mlp()
    session, optimizer = session_on(model)
    bad = torch.full((4, 8), math.nan)
    with session, pytest.raises(CheckViolationError) as caught:
        with session.step(global_step=3, inputs=bad):
            loss_of(model, bad).backward()
            optimizer.step()
    return model, bad, caught.value


def loss_of(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return model(x).square().mean()


def test_the_raise_keeps_the_attempts_batch_and_the_rng_state_at_its_start() -> None:
    model = dropout_mlp()
    session, optimizer = session_on(model)
    clean, bad = torch.randn(4, 8), torch.randn(4, 8)
    bad[1, 3] = math.nan  # a forward-born NaN: every gradient of the model is NaN
    with session:
        with session.step(global_step=0, inputs=clean):
            loss_of(model, clean).backward()
            optimizer.step()
        optimizer.zero_grad()
        before = snapshot(model, optimizer)
        at_start = torch.get_rng_state()
        with pytest.raises(CheckViolationError) as caught:
            with session.step(global_step=1, inputs=bad):
                loss_of(model, bad).backward()
                optimizer.step()
    assert is_bitwise_equal(snapshot(model, optimizer), before)
    replay = caught.value.replay
    assert replay.inputs is bad and replay.model() is model
    assert torch.equal(replay.rng_state.cpu, at_start) and replay.rng_state.cuda is None
    assert (replay.global_step, replay.attempt, replay.micro_batch) == (1, 1, 0)
    assert replay.micro_batches is None


@pytest.mark.parametrize("clean_steps", [0, 3], ids=["first-step", "stable-graph"])
def test_with_accumulation_the_micro_batch_that_produced_the_nan_is_kept(clean_steps) -> None:
    model = dropout_mlp()
    session, optimizer = session_on(model)
    micro = [torch.randn(2, 8) for _ in range(4)]
    states = []
    with session, pytest.raises(CheckViolationError) as caught:
        for step in range(clean_steps):  # after 3 identical backwards S-A keeps two hooks
            with session.step(global_step=step, micro_batches=4, inputs=micro):
                for x in micro:
                    (loss_of(model, x) / 4).backward()
                optimizer.step()
                optimizer.zero_grad()
        micro[2][0, 0] = math.nan  # the third micro-batch's backward is the first non-finite one
        with session.step(global_step=7, micro_batches=4, inputs=micro):
            for x in micro:
                states.append(torch.get_rng_state())  # what the session must keep for x
                (loss_of(model, x) / 4).backward()
            optimizer.step()
    replay = caught.value.replay
    assert (replay.micro_batch, replay.micro_batches, replay.global_step) == (2, 4, 7)
    assert replay.inputs is micro[2]
    assert torch.equal(replay.rng_state.cpu, states[2])
    assert not torch.equal(states[2], states[1])  # dropout drew between micro-batches
    assert caught.value.fields["first_nonfinite_micro_batch"] == 2


def test_nothing_is_kept_after_a_clean_attempt() -> None:
    model = dropout_mlp()
    session, optimizer = session_on(model)
    with session:
        batch = torch.randn(4, 8)
        alive = weakref.ref(batch)
        with session.step(global_step=0, inputs=batch):
            loss_of(model, batch).backward()
            optimizer.step()
        del batch
        gc.collect()
        assert alive() is None  # the session held the batch for its attempt only


def test_investigate_replays_the_kept_batch_under_its_rng_state(kept) -> None:
    _, _, error = kept
    report = error.investigate(loss_fn=lambda output: output.sum())
    assert isinstance(report, tl.report.InvestigationReport)
    assert report.status == "nonfinite_input"  # the kept batch is the all-NaN one
    assert error.replay.rng_state.as_mapping().keys() == {"cpu"}  # CUDA was never initialised


def test_the_message_and_the_next_step_name_the_call_that_replays_the_batch(kept) -> None:
    _, _, error = kept
    assert "err.investigate()" in str(error) and "bisect_nan_backward" not in str(error)
    assert [(e.label, e.code) for e in error.report.exits] == [
        ("Find where the value was born", "err.investigate()")
    ]


def test_without_a_kept_batch_investigate_says_both_ways_to_get_one(mlp_adamw, poison) -> None:
    model, optimizer = mlp_adamw
    session = nonfinite_session(model, optimizer)
    with session, pytest.raises(CheckViolationError) as caught:  # hook-only: no batch kept
        poison(model[0].weight, math.nan)
        loss_of(model, torch.randn(4, 8)).backward()
        optimizer.step()
    error = caught.value
    assert error.replay is None
    with pytest.raises(UnavailableError, match=r"session\.step\(global_step=i, inputs=batch\)"):
        error.investigate()
    with pytest.raises(UnavailableError, match=r"tl\.debug\.investigate\(model, batch, loss_fn="):
        error.investigate()
    call = "tl.debug.investigate(model, batch, loss_fn=...)"
    assert call in str(error) and "bisect_nan_backward" not in str(error)
    assert [e.code for e in error.report.exits] == [call]


def test_the_report_on_the_error_is_final() -> None:
    model = dropout_mlp()
    session, optimizer = session_on(model)
    bad = torch.full((4, 8), math.nan)
    with session:
        with pytest.raises(CheckViolationError) as caught:
            loss_of(model, bad).backward()
            optimizer.step()
        assert session.report().is_final is False  # the session itself trains on
    report = caught.value.report
    assert (report.is_final, report.exit_reason, report.status) == (
        True,
        "raised CheckViolationError",
        "raised",
    )


@pytest.mark.parametrize(
    "inputs, match",
    [
        ({"x": 1}, r"with micro_batches=2, inputs= must be the list of the 2 micro-batches"),
        ([torch.zeros(1)] * 3, r"got a list of 3"),
    ],
    ids=["dict", "three-for-two"],
)
def test_micro_batch_inputs_must_match_the_declared_count(mlp_adamw, inputs, match) -> None:
    model, optimizer = mlp_adamw
    session = tl.debug.ChecksSession(model, optimizer, scaler=None)
    with session, pytest.raises(DiagnosticArgumentError, match=match):
        with session.step(global_step=0, micro_batches=2, inputs=inputs):
            pass


def test_a_kept_forward_fn_is_how_err_investigate_calls_the_model() -> None:
    model = dropout_mlp()
    session, optimizer = session_on(model)
    micro = [{"x": torch.randn(2, 8), "scale": 1.0} for _ in range(2)]
    micro[1]["x"][0, 0] = math.nan
    steps = [lambda m, b: loss_of(m, b["x"]) * b["scale"] for _ in range(2)]  # two objects
    with session, pytest.raises(CheckViolationError) as caught:
        with session.step(global_step=0, micro_batches=2, inputs=micro, forward_fn=steps):
            for batch in micro:
                (loss_of(model, batch["x"]) / 2).backward()
            optimizer.step()
    replay = caught.value.replay
    assert replay.micro_batch == 1 and replay.forward_fn is steps[1]
    report = caught.value.investigate()  # model(**batch) would raise: forward() takes no scale
    assert report.status == "nonfinite_input" and report.nonfinite_inputs[0].rows == (0,)


@pytest.mark.parametrize(
    "forward_fn, match",
    [(3, r"a callable forward_fn\(model, batch\).*got int"), ([print], r"got list")],
    ids=["not-callable", "one-for-two"],
)
def test_forward_fn_must_be_one_callable_or_one_per_micro_batch(
    mlp_adamw, forward_fn, match
) -> None:
    model, optimizer = mlp_adamw
    session = tl.debug.ChecksSession(model, optimizer, scaler=None)
    inputs = [torch.zeros(1)] * 2
    with session, pytest.raises(DiagnosticArgumentError, match=match):
        with session.step(micro_batches=2, inputs=inputs, forward_fn=forward_fn):
            pass
