"""The DDP ports of the silent-bug zoo (issue 35), each with its fixed twin, on 2 gloo ranks.

Every scenario trains :data:`STEPS` steps of ``ranks.mlp()`` under DistributedDataParallel with
the session set up as ``docs/training_checks.md`` shows (``tests/silent/zoo.py``'s
``documented_session``) and returns each rank's findings (code, severity, first attempt) and
the warnings it emitted. ``ranks.launch(out, scenarios=SCENARIOS)`` runs them all in one
launch; ``benchmarks/bench_silent.py`` and ``tests/distributed/test_silent_ddp.py`` read them.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from functools import partial
from typing import Any

import torch
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.nn.parallel import DistributedDataParallel as DDP

from tests.distributed.ranks import batch, digest, mlp
from tests.silent.zoo import documented_session

STEPS = 4

DDP_CASES = {
    "ddp_raw_module": ("the step calls ddp.module, not the DDP wrapper", 0),
    "ddp_moved_after_wrap": ("the DDP model cast to float64 after wrapping", 0),
    "ddp_lost_bucket": ("a gradient bucket lost in communication on rank 1", 0),
    "ddp_rank_clip": ("a rank-dependent clipping coefficient", 0),
}
"""name -> (what the bug is, the attempt where it first takes effect)."""


def _lost_on_rank_1(rank, bucket):  # type: ignore[no-untyped-def]  # DDP refuses string annotations
    """The all-reduce runs on every rank (no collective is skipped), but rank 1 keeps its
    local bucket: the reduced values never land there (state: the rank)."""
    local = bucket.buffer().clone()
    future = allreduce_hook(None, bucket)
    if rank != 1:
        return future
    return future.then(lambda _: local)


def _scenario(name: str, buggy: bool, rank: int) -> dict[str, Any]:
    model = mlp()
    dtype = torch.float32
    if name == "ddp_moved_after_wrap" and not buggy:
        model = model.double()  # the fix: cast first, then wrap
    ddp = DDP(model)
    if name == "ddp_moved_after_wrap":
        dtype = torch.float64
        if buggy:
            ddp = ddp.to(torch.float64)  # the reducer keeps the float32 bucket views
    if name == "ddp_lost_bucket" and buggy:
        ddp.register_comm_hook(rank, _lost_on_rank_1)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        session = documented_session(ddp, optimizer)
        with session:
            for step in range(STEPS):
                optimizer.zero_grad()
                x = batch(rank, step).to(dtype)
                forward = ddp.module if name == "ddp_raw_module" and buggy else ddp
                forward(x).square().mean().backward()
                if name == "ddp_rank_clip":
                    max_norm = 0.01 * (1 + rank) if buggy else 0.01
                    torch.nn.utils.clip_grad_norm_(ddp.parameters(), max_norm)
                optimizer.step()
    report = session.report()
    return {
        "findings": [
            {"code": f.code, "severity": f.severity, "first_attempt": f.fields.get("first_attempt")}
            for f in report.findings
        ],
        "warnings": [str(w.message).split(":")[0] for w in caught],
        "weights": digest(p.float() for p in ddp.parameters()),
        "agreements": report.counters.get("agreements"),
    }


SCENARIOS: dict[str, Callable[[int], dict[str, Any]]] = {
    f"{name}:{'bug' if buggy else 'twin'}": partial(_scenario, name, buggy)
    for name in DDP_CASES
    for buggy in (True, False)
}
