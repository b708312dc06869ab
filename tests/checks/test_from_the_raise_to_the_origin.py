"""From the raise to the origin, end to end (issue 19): a boundary-mode loop stops the step that
would write a NaN, ``err.investigate()`` replays that exact batch on the untouched weights and
names the op, module and line where the value was born, and the loop trains on."""

from __future__ import annotations

import inspect
import random

import pytest
import torch
from torch import nn

import torchlens_nb as tl
from tests.checks.conftest import is_bitwise_equal, nonfinite_session, snapshot
from torchlens_nb.errors import CheckViolationError


class LogFeatures(nn.Module):
    """``log(x + 3)`` next to a linear map: finite while every input is above -3."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x) * torch.log(x + 3.0)


def model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(LogFeatures(), nn.Dropout(0.25), nn.Linear(4, 2))


def batch(step: int, *, turns_negative: bool = False) -> torch.Tensor:
    x = torch.rand(8, 4, generator=torch.Generator().manual_seed(step))  # in [0, 1)
    if turns_negative:
        x[5, 2] = -4.0  # log(-1): the NaN of this batch
    return x


def loss_of(output: torch.Tensor) -> torch.Tensor:
    return output.square().mean()


LOG_LINE = inspect.getsourcelines(LogFeatures.forward)[1] + 1


def rng_streams() -> tuple[torch.Tensor, object]:
    return torch.get_rng_state(), random.getstate()


def test_a_forward_nan_at_step_7_is_stopped_replayed_named_and_training_goes_on() -> None:
    net = model()
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-2)
    session = nonfinite_session(net, optimizer)
    investigations, trained = [], []
    with session:
        for step in range(10):
            x = batch(step, turns_negative=step == 7)
            optimizer.zero_grad()
            before = snapshot(net, optimizer)
            try:
                with session.step(global_step=step, inputs=x):
                    loss_of(net(x)).backward()
                    optimizer.step()
            except CheckViolationError as err:
                assert is_bitwise_equal(snapshot(net, optimizer), before)  # stopped pre-write
                rng = rng_streams()
                investigations.append((step, err.investigate(loss_fn=loss_of)))
                assert is_bitwise_equal(snapshot(net, optimizer), before)  # replay left it
                assert torch.equal(torch.get_rng_state(), rng[0]) and random.getstate() == rng[1]
                continue
            trained.append(step)
    [(step, report)] = investigations
    origin = report.first_bad_thing
    assert (step, report.status, report.phase) == (7, "found", "forward")
    assert (origin.func, origin.module) == ("log", "0")
    assert (origin.file, origin.line) == (__file__, LOG_LINE)
    assert trained == [0, 1, 2, 3, 4, 5, 6, 8, 9]  # the next clean steps trained on
    assert all(torch.isfinite(p).all() for p in net.parameters())


def test_with_4_micro_batches_the_third_is_the_one_replayed() -> None:
    net = model()
    optimizer = torch.optim.AdamW(net.parameters())
    session = nonfinite_session(net, optimizer)
    micro = [batch(10 + i, turns_negative=i == 2) for i in range(4)]
    with session, pytest.raises(CheckViolationError) as caught:
        with session.step(global_step=0, micro_batches=4, inputs=micro):
            for x in micro:
                (loss_of(net(x)) / 4).backward()
            optimizer.step()
    error = caught.value
    assert error.replay.micro_batch == 2 and error.replay.inputs is micro[2]
    report = error.investigate(loss_fn=loss_of)
    assert (report.status, report.first_bad_thing.func) == ("found", "log")
    assert report.first_bad_thing.line == LOG_LINE


class MaskedLog(nn.Module):
    """``log(0.5 - dropout(h))`` on one unit ``h = 0.3``: log(0.5) when dropout drops it, log(-0.1)
    = NaN when it survives (scaled to 0.6): a NaN of one dropout mask in two."""

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return torch.log(0.5 - nn.functional.dropout(h, 0.5, self.training))


def rng_state_where(survives: bool) -> torch.Tensor:
    """A CPU RNG state under which a one-unit dropout keeps (or drops) its unit."""
    for seed in range(100):
        torch.manual_seed(seed)
        state = torch.get_rng_state()
        if bool(nn.functional.dropout(torch.ones(1), 0.5).item()) == survives:
            return state
    raise AssertionError("no seed below 100 gives that mask")


def test_a_nan_of_one_dropout_mask_is_reproduced_under_the_kept_rng_state_only() -> None:
    net = nn.Sequential(nn.Linear(1, 1), MaskedLog(), nn.Linear(1, 1))  # its weight's grad: NaN
    with torch.no_grad():
        net[0].weight.zero_()
        net[0].bias.fill_(0.3)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    session = nonfinite_session(net, optimizer)
    x = torch.ones(1, 1)
    torch.set_rng_state(rng_state_where(survives=True))
    with session, pytest.raises(CheckViolationError) as caught:
        with session.step(global_step=0, inputs=x):
            net(x).sum().backward()
            optimizer.step()
    torch.set_rng_state(rng_state_where(survives=False))  # the RNG has moved on since
    kept = caught.value.investigate(loss_fn=torch.sum)
    assert (kept.status, kept.first_bad_thing.func) == ("found", "log")
    changed = tl.debug.investigate(
        net, x, loss_fn=torch.sum, rng_state={"cpu": rng_state_where(survives=False)}
    )
    assert changed.status == "not_reproduced" and changed.first_bad_thing is None
