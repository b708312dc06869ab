"""The session sees each attempt's loss: the backward's root, read with the step's host read."""

from __future__ import annotations

import pytest
import torch

import torchlens_nb as tl
from tests import models
from torchlens_nb.errors import DiagnosticArgumentError


def _losses(session: tl.debug.ChecksSession) -> list[float]:
    rows = session.report().table("series").dicts()
    return [r["loss"] for r in rows if r["group"] == 0]


def test_each_attempts_loss_is_the_root_of_its_backward() -> None:
    torch.manual_seed(0)
    model = models.mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    session = tl.debug.ChecksSession(model, optimizer, scaler=None)
    session.register_nonfinite_grad_check()
    seen = []
    original = torch.autograd.backward
    with session:
        for _ in range(3):
            optimizer.zero_grad()
            loss = model(torch.randn(4, 8)).square().mean()
            seen.append(loss.item())
            loss.backward()
            optimizer.step()
    assert _losses(session) == pytest.approx(seen, rel=1e-6)
    assert torch.autograd.backward is original  # the interposer left with the session


def test_accumulated_micro_batches_sum_and_a_grad_scaler_root_is_unscaled() -> None:
    torch.manual_seed(0)
    model = models.mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    session = tl.debug.ChecksSession(model, optimizer, scaler=scaler)
    session.register_nonfinite_grad_check()
    micro = []
    with session:
        optimizer.zero_grad()
        for _ in range(2):
            loss = model(torch.randn(4, 8)).square().mean() / 2
            micro.append(loss.item())
            scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    # the roots were 1024 x each micro loss; divided by the scale and summed: the batch loss
    assert _losses(session) == pytest.approx([sum(micro)], rel=1e-6)


def test_without_a_norm_reading_check_the_loss_is_still_read_on_the_cpu() -> None:
    torch.manual_seed(0)
    model = models.mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    session = tl.debug.ChecksSession(model, optimizer, scaler=None)
    reads_before = session._engine.host_reads
    with session:
        optimizer.zero_grad()
        loss = model(torch.randn(4, 8)).square().mean()
        loss.backward()
        optimizer.step()
    assert _losses(session) == pytest.approx([loss.item()], rel=1e-6)
    assert session._engine.host_reads - reads_before == 1  # one read, at the step site


def test_record_loss_replaces_the_root_and_refuses_a_vector() -> None:
    torch.manual_seed(0)
    model = models.mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    session = tl.debug.ChecksSession(model, optimizer, scaler=None)
    with session:
        optimizer.zero_grad()
        out = model(torch.randn(4, 8))
        (out.square().mean() * 3).backward()
        session.record_loss(out.square().mean().detach())
        with pytest.raises(DiagnosticArgumentError, match="one-element loss"):
            session.record_loss(out.detach())
        optimizer.step()
    assert _losses(session) == pytest.approx([out.square().mean().item()], rel=1e-6)


def test_the_interposer_is_removed_when_the_block_raises() -> None:
    original = torch.autograd.backward
    model = models.mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    with (
        pytest.raises(RuntimeError, match="boom"),
        tl.debug.ChecksSession(model, optimizer, scaler=None),
    ):
        assert torch.autograd.backward is not original
        raise RuntimeError("boom")
    assert torch.autograd.backward is original
