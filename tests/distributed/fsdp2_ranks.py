"""FSDP2 (``fully_shard``) scenarios of the checks kit, run on gloo ranks by ``ranks.launch``.

The model is ``ranks.mlp()`` (``0.weight`` (16, 8), ``0.bias`` (16,), ``2.weight`` (4, 16),
``2.bias`` (4,)), sharded on dim 0 over 2 ranks; each rank trains on its own batches.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.distributed.fsdp import fully_shard

import torchlens_nb as tl
from tests.checks.conftest import poison_next_backward
from tests.distributed.ranks import CollectiveCounter, _adam_state, _plain, batch, digest, mlp

NAN_STEP = 2
"""0-based step whose backward gets the NaN on rank 1 (the third step)."""


def sharded() -> tuple[nn.Module, torch.optim.Optimizer]:
    model = fully_shard(mlp())
    return model, torch.optim.AdamW(model.parameters())


def local_shards(model: nn.Module, optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """This rank's shards of every parameter and of AdamW's state (no communication)."""
    tensors = [*model.parameters(), *_adam_state(optimizer)]
    return [t.to_local() if hasattr(t, "to_local") else t for t in tensors]


def poison_unsharded_next_forward(module: nn.Module, value: float) -> None:
    """At ``module``'s next forward, write ``value`` into element 0 of the next gradient of the
    parameter it then holds as ``weight``: FSDP2's UNSHARDED parameter, so the NaN is born in
    this rank's local gradient, before the reduce-scatter."""

    def pre_forward(mod: nn.Module, _args: Any) -> None:
        handle.remove()
        weight = mod._parameters["weight"]
        assert weight is not None and type(weight) is nn.Parameter  # unsharded, not a DTensor
        poison_next_backward(weight, value)

    handle = module.register_forward_pre_hook(pre_forward)


def fsdp2_sites_scenario(rank: int) -> dict[str, Any]:
    """One clean step: the session's S-A norms versus a local (unsharded, non-FSDP) replica."""
    model, optimizer = sharded()
    session = tl.debug.ChecksSession(model, optimizer, scaler=None)
    session.register_nonfinite_grad_check()
    replica = mlp()  # the same seeded weights, never sharded: the local gradient
    replica(batch(rank, 0)).square().mean().backward()
    with CollectiveCounter() as counter, session:
        optimizer.zero_grad()
        model(batch(rank, 0)).square().mean().backward()
        shard_norms = [p.grad.to_local().norm().item() for p in model.parameters()]
        optimizer.step()
    report = session.report()
    return {
        "report": report.to_dict(),
        "local_norms": [p.grad.norm().item() for p in replica.parameters()],
        "shard_norms": shard_norms,
        "host_reads": session._engine.host_reads,
        "collectives_in_loop": counter.calls,
        "names": [n for n, _ in model.named_parameters()],
    }


def fsdp2_nan_scenario(rank: int) -> dict[str, Any]:
    """Rank 1's local gradient of ``0.weight`` turns NaN at step :data:`NAN_STEP`, before the
    reduce-scatter; the averaged NaN lands in rank 0's shard (rows 0-7)."""
    model, optimizer = sharded()
    session = tl.debug.ChecksSession(model, optimizer, scaler=None)
    session.register_nonfinite_grad_check()
    error = None
    shard_nonfinite = None
    with CollectiveCounter() as counter:
        try:
            with session:
                for step in range(3):
                    optimizer.zero_grad()
                    if step == NAN_STEP:
                        before = digest(local_shards(model, optimizer))
                        if rank == 1:
                            poison_unsharded_next_forward(model[0], math.nan)
                    model(batch(rank, step)).square().mean().backward()
                    weight_shard = model[0].weight.grad.to_local()
                    shard_nonfinite = not bool(torch.isfinite(weight_shard).all())
                    optimizer.step()
        except tl.debug.CheckViolationError as caught:
            error = {"code": caught.code, "fields": _plain(caught.fields)}
    after = digest(local_shards(model, optimizer))
    full_finite = all(bool(torch.isfinite(p.full_tensor()).all()) for p in model.parameters())
    return {
        "error": error,
        "unchanged": after == before,
        "full_weights_finite": full_finite,
        "own_shard_nonfinite": shard_nonfinite,
        "collectives_in_loop": counter.calls,
        "host_reads": session._engine.host_reads,
        "report": session.report().to_dict(),
    }


def fsdp2_gather_scenario(rank: int) -> dict[str, Any]:
    """The NaN scenario's report gathered on rank 0 (one ``gather_object``)."""
    model, optimizer = sharded()
    session = tl.debug.ChecksSession(model, optimizer, scaler=None)
    session.register_nonfinite_grad_check()
    try:
        with session:
            for step in range(2):
                optimizer.zero_grad()
                if step == 1 and rank == 1:
                    poison_unsharded_next_forward(model[2], math.inf)
                model(batch(rank, step)).square().mean().backward()
                optimizer.step()
    except tl.debug.CheckViolationError:
        pass
    gathered = session.report(gather=True)
    return {"gathered": gathered.to_dict() if rank == 0 else None}


FSDP2_SCENARIOS: dict[str, Callable[[int], dict[str, Any]]] = {
    "fsdp2_sites": fsdp2_sites_scenario,
    "fsdp2_nan": fsdp2_nan_scenario,
    "fsdp2_gather": fsdp2_gather_scenario,
}
