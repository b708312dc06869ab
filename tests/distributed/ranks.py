"""Real multi-rank runs of the checks kit: gloo on CPU, one forked process per rank.

:func:`launch` starts ``world_size`` processes (``torch.multiprocessing.start_processes`` with
``start_method="fork"``: no re-import of torch, about 1 s per launch on this machine), each runs
every scenario of :data:`SCENARIOS` in one process group and writes
``<out>/rank<r>.json``; :func:`launch` returns ``{scenario: [rank 0 result, rank 1 result]}``.
The tests and ``notebooks/09_distributed.ipynb`` both read these results.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

import torchlens_nb as tl
from tests.checks.conftest import poison_next_backward
from torchlens_nb.widgets._dashboard import live_message

COLLECTIVES = (
    "all_reduce",
    "all_gather",
    "all_gather_object",
    "gather_object",
    "broadcast",
    "broadcast_object_list",
    "barrier",
    "reduce",
    "gather",
    "scatter",
)
"""The ``torch.distributed`` functions counted while a session runs (DDP's reducer talks to
the process group from C++, so only the session's own collectives reach these names)."""


def mlp(width: int = 16, depth: int = 1) -> nn.Sequential:
    torch.manual_seed(0)
    layers: list[nn.Module] = [nn.Linear(8, width), nn.ReLU()]
    for _ in range(depth - 1):
        layers += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(width, 4))


def batch(rank: int, step: int) -> torch.Tensor:
    """A different batch on every rank (so local gradients differ before the all-reduce)."""
    generator = torch.Generator().manual_seed(1000 * rank + step)
    return torch.randn(4, 8, generator=generator)


def digest(tensors: Any) -> str:
    """sha256 of the raw bytes: bitwise identity across ranks and across time."""
    sha = hashlib.sha256()
    for tensor in tensors:
        sha.update(tensor.detach().contiguous().numpy().tobytes())
    return sha.hexdigest()


class CollectiveCounter:
    """Counts calls of :data:`COLLECTIVES` while active (a wrapper, the call still runs)."""

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}
        self._saved: dict[str, Callable[..., Any]] = {}

    def __enter__(self) -> CollectiveCounter:
        for name in COLLECTIVES:
            original = getattr(dist, name)
            self._saved[name] = original

            def counted(
                *args: Any, _name: str = name, _original: Any = original, **kwargs: Any
            ) -> Any:
                self.calls[_name] = self.calls.get(_name, 0) + 1
                return _original(*args, **kwargs)

            setattr(dist, name, counted)
        return self

    def __exit__(self, *exc: Any) -> None:
        for name, original in self._saved.items():
            setattr(dist, name, original)


def sites_scenario(rank: int) -> dict[str, Any]:
    """3 clean steps: S-A/S-D norms versus the local and the all-reduced gradient."""
    ddp = DDP(mlp())
    optimizer = torch.optim.AdamW(ddp.parameters())
    session = tl.debug.ChecksSession(ddp, optimizer, scaler=None)
    session.register_nonfinite_grad_check()
    session.register_change_check()
    with session:
        for step in range(3):
            optimizer.zero_grad()
            ddp(batch(rank, step)).square().mean().backward()
            local = copy.deepcopy(ddp.module)  # the same weights, no DDP: the local gradient
            local(batch(rank, step)).square().mean().backward()
            local_norms = [p.grad.norm().item() for p in local.parameters()]
            reduced_norms = [p.grad.norm().item() for p in ddp.parameters()]
            optimizer.step()
    report = session.report()
    gathered = session.report(gather=True)
    return {
        "report": report.to_dict(),
        "local_norms": local_norms,
        "reduced_norms": reduced_norms,
        "gathered": gathered.to_dict() if rank == 0 else None,
        "weights": digest(ddp.parameters()),
    }


def nan_scenario(rank: int) -> dict[str, Any]:
    """Rank 1's gradient of ``module.0.weight`` turns NaN at the third step (before the
    all-reduce); every rank must stop before writing."""
    ddp = DDP(mlp())
    optimizer = torch.optim.AdamW(ddp.parameters())
    session = tl.debug.ChecksSession(ddp, optimizer, scaler=None)
    session.register_nonfinite_grad_check()
    error = None
    smeared_here = None
    with CollectiveCounter() as counter:
        try:
            with session:
                for step in range(3):
                    optimizer.zero_grad()
                    if step == 2:
                        before = digest([*ddp.parameters(), *_adam_state(optimizer)])
                        if rank == 1:
                            poison_next_backward(ddp.module[0].weight, math.nan)
                    ddp(batch(rank, step)).square().mean().backward()
                    smeared_here = not bool(torch.isfinite(ddp.module[0].weight.grad).all())
                    optimizer.step()
        except tl.debug.CheckViolationError as caught:
            error = {"code": caught.code, "fields": _plain(caught.fields)}
    after = digest([*ddp.parameters(), *_adam_state(optimizer)])
    weights = [None] * dist.get_world_size()
    dist.all_gather_object(weights, digest(ddp.parameters()))
    gathered = session.report(gather=True)
    return {
        "error": error,
        "unchanged": after == before,
        "replicas_identical": len(set(weights)) == 1,
        "post_allreduce_grad_nonfinite": smeared_here,
        "collectives_in_loop": counter.calls,
        "report": session.report().to_dict(),
        "gathered": gathered.to_dict() if rank == 0 else None,
    }


def accumulation_scenario(rank: int) -> dict[str, Any]:
    """K=4 with ``no_sync()`` and a CPU GradScaler, 6 attempts; rank 1 writes Inf into one
    micro-step of attempt 2 (inside no_sync), so the scaler skips that attempt on every rank."""
    ddp = DDP(mlp())
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
    session = tl.debug.ChecksSession(ddp, optimizer, scaler=scaler)
    session.register_nonfinite_grad_check()
    session.register_change_check()
    session.register_no_accepted_steps_check()
    with CollectiveCounter() as counter, session:
        for attempt in range(6):
            optimizer.zero_grad()
            for micro in range(4):
                if (attempt, micro) == (2, 1) and rank == 1:
                    poison_next_backward(ddp.module[2].weight, math.inf)
                x = batch(rank, 10 * attempt + micro)
                if micro < 3:
                    with ddp.no_sync():
                        scaler.scale(ddp(x).square().mean()).backward()
                else:
                    scaler.scale(ddp(x).square().mean()).backward()
            scaler.step(optimizer)
            scaler.update()
    report = session.report()
    return {
        "report": report.to_dict(),
        "collectives_in_loop": counter.calls,
        "weights": digest(ddp.parameters()),
        "final_scale": scaler.get_scale(),
    }


def cost_scenario(rank: int) -> dict[str, Any]:
    """Session collectives and time per step for a 4- and a 20-parameter model."""
    out: dict[str, Any] = {}
    for depth in (1, 9):
        ddp = DDP(mlp(depth=depth))
        optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01)
        session = tl.debug.ChecksSession(ddp, optimizer, scaler=None)
        session.register_nonfinite_grad_check()
        with CollectiveCounter() as counter, session:
            for step in range(5):
                optimizer.zero_grad()
                ddp(batch(rank, step)).square().mean().backward()
                optimizer.step()
        counters = session.report().counters
        out[str(len(list(ddp.parameters())))] = {
            "collectives": counter.calls,
            "steps": 5,
            "agreements": counters["agreements"],
            "agreement_ms_per_step": counters["agreement_ms"] / counters["agreements"],
        }
    return out


class Recorder:
    """A live view that keeps every increment the session's feed sends (the widget's stand-in
    outside a kernel)."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.snapshot: dict[str, Any] | None = None

    def open(self, snapshot: Any) -> Recorder:
        """What ``tl.report.live_dashboard`` would do: keep the snapshot's panel payload."""
        self.snapshot = tl.widgets.panel_payload(snapshot)
        return self

    def push(self, message: dict[str, Any]) -> None:
        self.messages.append(live_message(message))  # as LiveChecksWidget.push sends it

    def finish(self, report: Any) -> None:
        self.final = report.to_dict()


def live_scenario(rank: int) -> dict[str, Any]:
    """4 steps with the dashboard open on every rank; rank 1 runs one extra backward per step
    (accumulation K=2 there, K=1 on rank 0), so the two ranks' counters differ."""
    ddp = DDP(mlp())
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01)
    session = tl.debug.ChecksSession(ddp, optimizer, scaler=None)
    session.register_nonfinite_grad_check()
    recorder = Recorder()
    original = tl.checks.dashboard._live.live_dashboard, tl.checks.dashboard._feed.MIN_INTERVAL_S
    tl.checks.dashboard._live.live_dashboard = recorder.open
    tl.checks.dashboard._feed.MIN_INTERVAL_S = (
        0.0  # every offer is sent: the test sees each increment
    )
    try:
        session.dashboard()
        with CollectiveCounter() as counter, session:
            for step in range(4):
                optimizer.zero_grad()
                if rank == 1:
                    with ddp.no_sync():
                        ddp(batch(rank, 100 + step)).square().mean().backward()
                ddp(batch(rank, step)).square().mean().backward()
                optimizer.step()
    finally:
        tl.checks.dashboard._live.live_dashboard, tl.checks.dashboard._feed.MIN_INTERVAL_S = (
            original
        )
    return {
        "snapshot": recorder.snapshot,
        "increments": recorder.messages,
        "collectives_in_loop": counter.calls,
        "agreements": session.report().counters["agreements"],
    }


def fsdp_scenario(rank: int) -> dict[str, Any]:
    """What exists where under FSDP: FSDP1 (``device_id=cpu``, flat parameters) and FSDP2
    (``fully_shard``, DTensor shards), each with a session (``distributed=True``) and an S-A
    probe recording the gradient size the hook sees."""
    from torch.distributed.fsdp import FullyShardedDataParallel, fully_shard

    out: dict[str, Any] = {}
    wrappers = {
        "fsdp1": lambda m: FullyShardedDataParallel(m, device_id=torch.device("cpu")),
        "fsdp2": fully_shard,
    }
    for label, wrap in wrappers.items():
        seen: list[int] = []
        try:
            model = mlp()
            full_numel = sum(p.numel() for p in model.parameters())
            wrapped = wrap(model)
            optimizer = torch.optim.SGD(wrapped.parameters(), lr=0.01)
            for param in wrapped.parameters():
                param.register_post_accumulate_grad_hook(lambda p: seen.append(p.grad.numel()))
            session = tl.debug.ChecksSession(wrapped, optimizer, scaler=None, distributed=True)
            session.register_nonfinite_grad_check()
            with session:
                optimizer.zero_grad()
                wrapped(batch(rank, 0)).square().mean().backward()
                optimizer.step()
            report = session.report()
            out[label] = {
                "ran": True,
                "full_numel": full_numel,
                "optimizer_params": [
                    [n, list(p.shape), _local(p).numel()] for n, p in wrapped.named_parameters()
                ],
                "s_a_grad_numels": seen,
                "session_params": [row["param"] for row in report.table("params").dicts()],
                "counters": {
                    k: report.counters[k]
                    for k in ("backwards", "grad_arrivals", "attempts", "agreements")
                },
            }
        except Exception as error:
            out[label] = {
                "ran": False,
                "error": f"{type(error).__name__}: {error}"[:400],
                "s_a_grad_numels": seen,
            }
    return out


def _local(param: torch.Tensor) -> torch.Tensor:
    """The rank-local shard of a DTensor parameter (the tensor itself otherwise)."""
    return param.to_local() if hasattr(param, "to_local") else param


SCENARIOS: dict[str, Callable[[int], dict[str, Any]]] = {
    "sites": sites_scenario,
    "nan": nan_scenario,
    "accumulation": accumulation_scenario,
    "cost": cost_scenario,
    "fsdp": fsdp_scenario,
    "live": live_scenario,
}


def _adam_state(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    return [
        v for slot in optimizer.state.values() for v in slot.values() if isinstance(v, torch.Tensor)
    ]


def _plain(value: Any) -> Any:
    if hasattr(value, "items"):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _worker(
    rank: int,
    world_size: int,
    port: int,
    out: str,
    names: list[str],
    scenarios: dict[str, Callable[[int], dict[str, Any]]],
) -> None:
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    results: dict[str, Any] = {}
    try:
        for name in names:
            start = time.perf_counter()
            results[name] = scenarios[name](rank)
            results[name]["seconds"] = time.perf_counter() - start
            dist.barrier()
    finally:
        Path(out, f"rank{rank}.json").write_text(json.dumps(results, default=str))
        dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def launch(
    out: str | os.PathLike[str],
    names: list[str] | None = None,
    world_size: int = 2,
    scenarios: dict[str, Callable[[int], dict[str, Any]]] | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """Run ``names`` (default: every one) of ``scenarios`` (default: :data:`SCENARIOS`) on
    ``world_size`` gloo ranks; results per rank."""
    scenarios = SCENARIOS if scenarios is None else scenarios
    names = list(scenarios) if names is None else names
    torch.multiprocessing.start_processes(
        _worker,
        args=(world_size, free_port(), str(out), names, scenarios),
        nprocs=world_size,
        start_method="fork",
    )
    per_rank = [json.loads(Path(out, f"rank{r}.json").read_text()) for r in range(world_size)]
    return {name: [ranks[name] for ranks in per_rank] for name in names}
