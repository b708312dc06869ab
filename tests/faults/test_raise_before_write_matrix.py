"""The raise-before-write matrix: loop shapes people write, each turning a gradient non-finite
in its own way between the backward and ``optimizer.step()``.

Each row trains three healthy steps under a session with the non-finite check (after three
identical backwards S-A settles on its two lean hooks), then runs a step whose gradient the loop
makes non-finite. The kit must raise from ``optimizer.step()`` before it writes (weights and
optimizer state bitwise as they were, :func:`~tests.faults._guards.untouched`) and count what the
loop did: three accepted attempts, one raised, nothing skipped.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch
from torch import nn

import torchlens_nb as tl
from tests import models
from tests.checks.conftest import hook_counts, poison_next_backward
from tests.faults._guards import untouched
from torchlens_nb.errors import CheckViolationError

pytestmark = pytest.mark.fault("no_corruption")

Step = Callable[[nn.Module, torch.optim.Optimizer, torch.Tensor, bool], None]


def _backward(model: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor) -> None:
    optimizer.zero_grad()
    model(x).square().mean().backward()


def renorm_through_data(model, optimizer, x, is_bad) -> None:
    """Old-style renormalisation: ``p.grad.data.div_(total_norm)``; an all-zero batch of a
    bias-free model gives total_norm 0 and every gradient 0 / 0 = NaN."""
    _backward(model, optimizer, torch.zeros_like(x) if is_bad else x)
    grads = [p.grad for p in model.parameters()]
    total_norm = torch.linalg.vector_norm(torch.stack([g.norm() for g in grads]))
    for p in model.parameters():
        p.grad.data.div_(total_norm)
    optimizer.step()


def masked_write_through_data(model, optimizer, x, is_bad) -> None:
    """``p.grad.data[mask] = value``: no ``_version`` bump."""
    _backward(model, optimizer, x)
    if is_bad:
        weight = model[0].weight
        weight.grad.data[weight.grad.data.abs() > 0] = math.nan
    optimizer.step()


def assigned(model, optimizer, x, is_bad) -> None:
    """``p.grad[0, 0] = nan`` (an indexed assignment)."""
    _backward(model, optimizer, x)
    if is_bad:
        model[0].weight.grad[0, 0] = math.inf
    optimizer.step()


def foreach_scaled(model, optimizer, x, is_bad) -> None:
    """``torch._foreach_mul_(grads, factor)`` with a factor that is NaN on the bad step."""
    _backward(model, optimizer, x)
    grads = [p.grad for p in model.parameters()]
    torch._foreach_mul_(grads, math.nan if is_bad else 0.5)
    optimizer.step()


def poisoned_backward(model, optimizer, x, is_bad) -> None:
    """A NaN born in the backward of the first layer's weight."""
    if is_bad:
        poison_next_backward(model[0].weight, math.nan)
    _backward(model, optimizer, x)
    optimizer.step()


@dataclass(frozen=True)
class Loop:
    """One row: how the model is built, the session's ``scaler=``, the step."""

    name: str
    step: Step
    model: Callable[[], nn.Module] = models.mlp
    dtype: torch.dtype = torch.float32
    scaler: Callable[[], object | None] = lambda: None


def bias_free() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16, bias=False), nn.ReLU(), nn.Linear(16, 4, bias=False))


def complex_mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 4).to(torch.complex64))


def complex_imaginary_nan(model, optimizer, x, is_bad) -> None:
    """A complex parameter whose gradient has a NaN imaginary part only."""
    optimizer.zero_grad()
    model(x).abs().square().mean().backward()
    if is_bad:
        model[0].weight.grad[0, 0] = complex(1.0, math.nan)
    optimizer.step()


def scaler_steps(unscale_then_write: bool) -> Step:
    """The AMP recipe ``scaler.scale(loss).backward(); scaler.step(opt); scaler.update()`` (a
    disabled scaler, or one whose ``unscale_`` ran before the loop wrote the NaN)."""

    def step(model, optimizer, x, is_bad) -> None:
        scaler = SCALERS[id(optimizer)]
        optimizer.zero_grad()
        scaler.scale(model(x).square().mean()).backward()
        if unscale_then_write:
            scaler.unscale_(optimizer)
        if is_bad:
            model[0].weight.grad.data[0, 0] = math.nan
        scaler.step(optimizer)
        scaler.update()

    return step


SCALERS: dict[int, torch.amp.GradScaler] = {}
"""The scaler of each row's optimizer (the step functions take the loop's four arguments)."""

LOOPS = [
    Loop("renorm-through-data", renorm_through_data, model=bias_free),
    Loop("masked-write-through-data", masked_write_through_data),
    Loop("indexed-assignment", assigned),
    Loop("foreach-mul", foreach_scaled),
    Loop("nan-born-in-backward", poisoned_backward),
    Loop("complex-parameter", complex_imaginary_nan, model=complex_mlp, dtype=torch.complex64),
    Loop(
        "disabled-gradscaler",
        scaler_steps(unscale_then_write=False),
        scaler=lambda: torch.amp.GradScaler("cpu", enabled=False),
    ),
    Loop(
        "nan-written-after-unscale",
        scaler_steps(unscale_then_write=True),
        scaler=lambda: torch.amp.GradScaler("cpu", init_scale=2.0**4),
    ),
]


@pytest.mark.parametrize("loop", LOOPS, ids=[loop.name for loop in LOOPS])
@pytest.mark.parametrize("boundary", [False, True], ids=["hook-only", "boundary"])
def test_the_kit_raises_before_the_write_whatever_the_loop_did(loop: Loop, boundary: bool) -> None:
    model = loop.model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scaler = loop.scaler()
    if scaler is not None:
        SCALERS[id(optimizer)] = scaler
    session = tl.debug.ChecksSession(model, optimizer, scaler=scaler)
    session.register_nonfinite_grad_check()
    torch.manual_seed(1)
    batches = [torch.randn(4, 8, dtype=loop.dtype) for _ in range(4)]

    def run(index: int) -> None:
        if boundary:
            with session.step(global_step=index):
                loop.step(model, optimizer, batches[index], index == 3)
        else:
            loop.step(model, optimizer, batches[index], index == 3)

    with session:
        for index in range(3):  # AdamW state exists from the first step on
            run(index)
        with pytest.raises(CheckViolationError) as caught:
            with untouched([model], [optimizer], grads=False):
                run(3)
    SCALERS.pop(id(optimizer), None)
    assert hook_counts(model, optimizer) == (0, 0, 0)  # every hook removed at the scope's exit
    assert caught.value.code == "nonfinite_grad"
    assert caught.value.fields["attempt"] == 3
    counters = session.report().counters
    assert (counters["accepted"], counters["raised"], counters["skipped"]) == (3, 1, 0)
    assert all(torch.isfinite(p).all() for p in model.parameters())  # complex: both parts


def test_a_gan_with_two_sessions_counts_what_each_optimizer_did_and_stops_a_nan() -> None:
    # one session per optimizer, boundary mode, the standard loop: D steps on D(G(z).detach()),
    # G on D(G(z)), whose backward also lands in D's .grad (outside D's step blocks)
    torch.manual_seed(0)
    gen = nn.Sequential(nn.Linear(2, 8), nn.ReLU(), nn.Linear(8, 4))
    disc = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    opt_g = torch.optim.Adam(gen.parameters(), lr=1e-3)
    opt_d = torch.optim.Adam(disc.parameters(), lr=1e-3)
    sessions = {}
    for name, model, optimizer in (("G", gen, opt_g), ("D", disc, opt_d)):
        sessions[name] = tl.debug.ChecksSession(model, optimizer, scaler=None)
        sessions[name].register_nonfinite_grad_check()
    bce = nn.BCEWithLogitsLoss()
    batches = [(torch.randn(8, 4), torch.randn(8, 2)) for _ in range(5)]

    def iteration(i: int) -> None:
        real, z = batches[i]
        with sessions["D"].step(global_step=i):
            opt_d.zero_grad()
            fake = gen(z).detach()
            (bce(disc(real), torch.ones(8, 1)) + bce(disc(fake), torch.zeros(8, 1))).backward()
            opt_d.step()
        with sessions["G"].step(global_step=i):
            opt_g.zero_grad()
            if i == 4:
                poison_next_backward(gen[0].weight, math.nan)
            bce(disc(gen(z)), torch.ones(8, 1)).backward()
            opt_g.step()

    with sessions["G"], sessions["D"]:
        for i in range(4):
            iteration(i)
        with pytest.raises(CheckViolationError) as caught:
            with untouched([gen], [opt_g], grads=False):
                iteration(4)
    assert (caught.value.fields["culprit"], caught.value.fields["attempt"]) == ("0.weight", 4)
    d_report, g_report = sessions["D"].report(), sessions["G"].report()
    names = ("attempts", "accepted", "skipped", "raised")
    assert tuple(d_report.counters[n] for n in names) == (5, 5, 0, 0)
    assert tuple(g_report.counters[n] for n in names) == (5, 4, 0, 1)
    # G's backward reached D's gradients in each of the 5 iterations; 4 were reset by D's
    # zero_grad (the 5th is still in D's .grad when the sessions end)
    assert d_report.counters["backwards_outside_steps"] == 4
    assert any("outside every session.step() block" in d for d in d_report.disclosures)


@pytest.mark.fault("no_false_clean")
@pytest.mark.parametrize("skips", [10, 30])
def test_hook_only_gradscaler_skips_are_one_attempt_each_and_a_nan_after_them_is_stopped(
    skips: int,
) -> None:
    model = models.mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**40)
    session = tl.debug.ChecksSession(model, optimizer, scaler=scaler)
    session.register_nonfinite_grad_check()
    session.register_no_accepted_steps_check(threshold_attempts=100)
    torch.manual_seed(1)
    batches = [torch.randn(4, 8) for _ in range(skips + 1)]

    def amp_step(x: torch.Tensor, *, is_inf: bool, written_nan: bool = False) -> None:
        optimizer.zero_grad()
        if is_inf:
            poison_next_backward(model[0].weight, math.inf)
        scaler.scale(model(x).square().mean()).backward()
        scaler.unscale_(optimizer)
        if written_nan:
            model[2].weight.grad.data[0, 0] = math.nan
        scaler.step(optimizer)
        scaler.update()

    with session:
        for x in batches[:skips]:
            amp_step(x, is_inf=True)  # the scaler skips each one and halves its scale
        counters = session.report().counters
        assert (counters["attempts"], counters["skipped_by_scaler"]) == (skips, skips)
        with pytest.raises(CheckViolationError):
            with untouched([model], [optimizer], grads=False):
                amp_step(batches[skips], is_inf=False, written_nan=True)
    report = session.report()
    assert report.ledgers["scale"]["skipped"] == skips
    assert (report.counters["skipped"], report.counters["raised"]) == (skips, 1)
    assert not any("skip ledger counts" in d for d in report.disclosures)
