"""Data-parallel loops on 2 gloo ranks (launched by ``tests.distributed.ranks.launch``): DDP as
the PyTorch DDP tutorial writes it (github:pytorch/examples distributed/ddp/example.py), FSDP2
(``fully_shard``, distributed/FSDP2/example.py) and a hand-written ``all_reduce`` of the
gradients (``average_gradients`` of the PyTorch distributed tutorial,
github:pytorch/tutorials intermediate_source/dist_tuto.rst), and ranks that
each train their own model and all-reduce only the loss they log. Each returns the session's
findings, unavailable entries and status per rank; ``planted`` forgets
``optimizer.zero_grad()`` (or, for the hand-written loop, skips the average every other step:
the replicas drift)."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from functools import partial
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard
from torch.nn.parallel import DistributedDataParallel as DDP

import torchlens_nb as tl
from tests.distributed.ranks import batch, digest, mlp

STEPS = 4


def _ddp(planted: bool, rank: int) -> tuple[Any, torch.optim.Optimizer, Callable[[int], None]]:
    model = DDP(mlp())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    def step(i: int) -> None:
        if not planted:
            optimizer.zero_grad()
        model(batch(rank, i)).square().mean().backward()
        optimizer.step()

    return model, optimizer, step


def _fsdp2(planted: bool, rank: int) -> tuple[Any, torch.optim.Optimizer, Callable[[int], None]]:
    model = mlp()
    fully_shard(model)  # shards in place: the module is still the nn.Sequential
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step(i: int) -> None:
        if not planted:
            optimizer.zero_grad()
        model(batch(rank, i)).square().mean().backward()
        optimizer.step()

    return model, optimizer, step


def _fsdp2_accumulating(
    planted: bool, rank: int
) -> tuple[Any, torch.optim.Optimizer, Callable[[int], None]]:
    """FSDP2 with two micro-batches per step, each reduce-scattered and added onto the shard's
    gradient, reset with ``zero_grad(set_to_none=False)`` (zeros kept, not freed) of a
    ``foreach=True`` optimizer: one ``torch._foreach_zero_``, which bumps no version counter
    of a DTensor."""
    model = mlp()
    fully_shard(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)

    def step(i: int) -> None:
        if not planted:
            optimizer.zero_grad(set_to_none=False)
        for micro in range(2):
            (model(batch(rank, 2 * i + micro)).square().mean() / 2).backward()
        optimizer.step()

    return model, optimizer, step


def _all_reduce(
    planted: bool, rank: int
) -> tuple[Any, torch.optim.Optimizer, Callable[[int], None]]:
    model = mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    def step(i: int) -> None:
        optimizer.zero_grad()
        model(batch(rank, i)).square().mean().backward()
        if not planted or i % 2 == 0:  # the twin skips the average every other step
            for p in model.parameters():  # the tutorial's average_gradients, as written there
                assert p.grad is not None
                dist.all_reduce(p.grad.data, op=dist.ReduceOp.SUM)
                p.grad.data /= dist.get_world_size()
        optimizer.step()

    return model, optimizer, step


def _independent(
    planted: bool, rank: int
) -> tuple[Any, torch.optim.Optimizer, Callable[[int], None]]:
    """Each rank trains its own model on its own data (an ensemble; the replicas differ on
    purpose) and all-reduces only the loss it logs."""
    model = mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    def step(i: int) -> None:
        if not planted:
            optimizer.zero_grad()
        loss = model(batch(rank, i)).square().mean()
        loss.backward()
        logged = loss.detach().clone()
        dist.all_reduce(logged, op=dist.ReduceOp.SUM)
        optimizer.step()

    return model, optimizer, step


SETUPS = {
    "ddp": _ddp,
    "fsdp2": _fsdp2,
    "fsdp2_accumulating": _fsdp2_accumulating,
    "all_reduce": _all_reduce,
    "independent": _independent,
}


def _scenario(name: str, planted: bool, rank: int) -> dict[str, Any]:
    model, optimizer, step = SETUPS[name](planted, rank)
    all_reduce = dist.all_reduce
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        session = tl.debug.ChecksSession(model, optimizer)
        with session:
            for i in range(STEPS):
                step(i)
    report = session.report()
    local = [p.to_local() if hasattr(p, "to_local") else p for p in model.parameters()]
    return {
        "serious": [f.code for f in report.findings if f.severity != "info"],
        "codes": [f.code for f in report.findings],
        "unavailable": [f"{u.check}:{u.code}" for u in report.unavailable],
        "status": report.status,
        "warnings": [str(w.message).split(":")[0] for w in caught],
        "weights": digest(t.float() for t in local),
        "all_reduce_restored": dist.all_reduce is all_reduce,
    }


SCENARIOS: dict[str, Callable[[int], dict[str, Any]]] = {
    f"{name}:{'planted' if planted else 'healthy'}": partial(_scenario, name, planted)
    for name in SETUPS
    for planted in (False, True)
}
