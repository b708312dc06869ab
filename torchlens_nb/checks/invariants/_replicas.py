"""Replicas agree (DistributedDataParallel, or a loop that all-reduces its gradients itself):
every rank holds the same weights and, before the step, the same reduced gradients.

At the S-B agreement the session already makes (one ``all_reduce`` per step,
``_distributed.RankContext.agree``), each rank adds a fingerprint to its row: the 2-norm of
every optimizer parameter (the weights the previous step wrote) and of every gradient the step
is about to apply (after the all-reduce, DDP's or the loop's own, and any clipping; -1 for a
missing gradient),
reduced on the device in one batched kernel and carried as float64 bits. Every rank then reads
every rank's fingerprint from the same table and reaches the same verdict. Healthy replicas
are bitwise equal (same averaged gradients, same update), so any difference beyond
:data:`RELATIVE_TOLERANCE` is the finding ``replicas_disagree`` (critical): the first parameter
that disagrees (weights first: they diverged at an earlier step), the attempt, and the value
on each rank. A gradient that disagrees is seen before any rank writes it.

Catches: a step that calls the raw module (``ddp.module(x)``: no all-reduce), a gradient
bucket lost on one rank, a rank-dependent clipping coefficient, replicas whose weights drifted
(a hand-written loop that skips its average on some steps: issue 42).

Without DDP the comparison starts at the first step whose gradients the loop all-reduces
itself (``distributed/_grad_reduce.py``): until then it is not armed, its fingerprint is not
sent, and a report made before is an ``unavailable`` entry (``replicas_not_compared``): ranks
that never all-reduce a gradient may differ on purpose (model or pipeline parallel).
Cost: one norm per parameter and per gradient per ``every`` steps, and ``16 x P`` more bytes
per rank in the agreement (P optimizer parameters). Cannot see: a difference that keeps every
norm (a permutation of a tensor's values, a sign flip), and parameters outside the optimizer.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch

from ..._validate import check_int
from ...report import Finding, Unavailable, Where
from ...report._checks import Action
from ..session._evidence import Attempt
from ..session._params import Roster
from ._invariant import Declared, InvariantCheck

RELATIVE_TOLERANCE = 1e-6
"""Fingerprints that differ by less (relative to the larger) agree."""


class ReplicaCheck(InvariantCheck):
    """``replicas_disagree``: the per-rank fingerprints of weights or gradients differ."""

    name = "replicas"
    site = "S-B"

    def __init__(
        self,
        roster: Roster,
        *,
        every: int,
        action: Action,
        declared: Declared,
        waiting: str | None = None,
    ) -> None:
        check_int("every", every, low=1, expect=">= 1 steps", hint="every=1 checks each step")
        super().__init__(roster, action, {"every": every}, declared)
        self._waiting = waiting
        """Why the replicas are not compared yet (the ``unavailable`` reason until
        :meth:`arm`); None: armed."""
        self._calls = 0
        self._indices: tuple[int, ...] = ()
        self._attempt: int | None = None
        self._disagree = self.tally(
            "replicas_disagree",
            "critical",
            _message,
            remedy="Call the DistributedDataParallel wrapper, not its .module, in the step; "
            "move or cast the model before wrapping it; a loop that averages the gradients "
            "itself all-reduces every gradient at every step; make clipping and any comm hook "
            "the same on every rank. tl.debug.ChecksSession(..., distributed=True) on every rank "
            "and session.report(gather=True) show each rank's evidence.",
        )

    def on_attempt(self, attempt: Attempt) -> Finding | None:
        self._attempt = attempt.index
        return None

    def arm(self) -> None:
        """Compare from the next agreement on (the loop's own gradient all-reduce was seen)."""
        self._waiting = None

    def unavailable(self) -> list[Unavailable]:
        if self._waiting is None:
            return []
        return [Unavailable(self.name, self._waiting, code="replicas_not_compared")]

    def payload(self) -> torch.Tensor | None:
        """This rank's fingerprint (float64, on the parameters' device), None when not due or
        not armed. Every rank calls it at the same agreement, so every rank is due at the same
        ones."""
        if self._waiting is not None:
            return None
        self._calls += 1
        if (self._calls - 1) % self.options["every"]:
            return None
        self._indices = self.roster.optimized
        tensors = [self.roster.tensors[i] for i in self._indices]
        if not tensors:
            return None
        with torch.no_grad():
            weights = torch.stack(torch._foreach_norm([t.detach() for t in tensors]))
            fingerprint = torch.full(
                (2 * len(tensors),), -1.0, dtype=torch.float64, device=weights.device
            )
            fingerprint[: len(tensors)] = weights.to(torch.float64)
            present = [k for k, t in enumerate(tensors) if t.grad is not None]
            if present:
                grads = [tensors[k].grad.detach() for k in present]  # type: ignore[union-attr]
                norms = torch.stack(torch._foreach_norm(grads)).to(torch.float64)
                fingerprint[torch.tensor(present, device=weights.device) + len(tensors)] = norms
        return fingerprint

    def compare(self, rows: list[list[float]]) -> Finding | None:
        """Every rank's fingerprint (same table on every rank): the first disagreement."""
        self.evaluations += 1
        count = len(self._indices)
        for position in range(2 * count):
            values = [row[position] for row in rows]
            low, high = min(values), max(values)
            scale = max(abs(low), abs(high))
            if not all(map(math.isfinite, values)) or high - low <= RELATIVE_TOLERANCE * scale:
                continue  # a non-finite value is the non-finite check's
            info = self.roster.infos[self._indices[position % count]]
            what = "weights" if position < count else "reduced gradient"
            return self.occur(
                self._disagree,
                self._attempt,
                None,
                {"param": info.name, "what": what, "norm_per_rank": values},
                Where(module=info.module),
            )
        return None


def _message(fields: Mapping[str, Any]) -> str:
    norms = ", ".join(f"rank {r}: {v:.6g}" for r, v in enumerate(fields["norm_per_rank"]))
    return (
        f"the replicas disagree: the {fields['what']} of {fields['param']} differ across ranks "
        f"({norms}) at attempt {fields['first_attempt']} ({fields['count']} step(s)). The "
        "ranks train different models."
    )
