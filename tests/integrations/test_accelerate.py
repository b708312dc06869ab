"""``ChecksSession`` on what ``accelerate.Accelerator(cpu=True).prepare`` returns: the three-line
setup of docs/integrations/accelerate.md, with no adapter."""

from __future__ import annotations

import math

import pytest
import torch

import torchlens_nb as tl
from tests import models
from tests.checks.conftest import is_bitwise_equal, poison_next_backward, snapshot
from tests.integrations.conftest import all_hooks

accelerate = pytest.importorskip("accelerate")


def test_prepared_model_and_optimizer_raise_before_the_write() -> None:
    accelerator = accelerate.Accelerator(cpu=True)
    net = models.mlp()
    model, optimizer = accelerator.prepare(net, torch.optim.AdamW(net.parameters()))
    assert type(optimizer).__name__ == "AcceleratedOptimizer"
    # the three lines of the docs
    session = tl.debug.ChecksSession(model, optimizer, scaler=accelerator.scaler)
    session.register_nonfinite_grad_check()
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(0))
    with pytest.raises(tl.debug.CheckViolationError, match="0.weight") as caught:
        with session:
            for step in range(4):
                optimizer.zero_grad()
                if step == 3:
                    before = snapshot(model, optimizer.optimizer)
                    poison_next_backward(model[0].weight, math.nan)
                accelerator.backward(model(x).square().mean())
                optimizer.step()
    assert is_bitwise_equal(snapshot(model, optimizer.optimizer), before)
    assert caught.value.fields["culprit"] == "0.weight"
    report = session.report()
    assert (report.counters["accepted"], report.counters["raised"]) == (3, 1)
    assert report.ledgers["scale"]["method"] == "not_applicable"  # accelerator.scaler is None
    assert all_hooks(model, optimizer.optimizer) == (0, 0, 0)


def test_accelerates_gradient_accumulation_is_grouped_per_optimizer_step() -> None:
    # Accelerator(gradient_accumulation_steps=2): the wrapper's step() steps only on sync
    # micro-batches, so 6 backwards make 3 optimizer attempts of K=2
    accelerator = accelerate.Accelerator(cpu=True, gradient_accumulation_steps=2)
    net = models.mlp()
    model, optimizer = accelerator.prepare(net, torch.optim.SGD(net.parameters(), lr=0.1))
    session = tl.debug.ChecksSession(model, optimizer, scaler=accelerator.scaler)
    session.register_nonfinite_grad_check()
    with session:
        for _ in range(6):
            with accelerator.accumulate(model):
                accelerator.backward(model(torch.randn(4, 8)).square().mean())
                optimizer.step()
                optimizer.zero_grad()
    counters = session.report().counters
    assert (counters["attempts"], counters["backwards"], counters["accumulation_factor"]) == (
        3,
        6,
        2,
    )
