"""Gradients are fresh: the first backward after an accepted step does not add onto the
gradient that step used (a loop without ``optimizer.zero_grad()``).

At S-C (after the write) the check records, per optimizer parameter, a weak reference to its
gradient and the gradient's ``_version``. At the first gradient arrival of the next backward
(S-A, the post-accumulate hook of the parameter that opens it) it compares: the same tensor
whose version moved by exactly one is the old gradient with one ``grad += g`` on top. Reset
gradients are a new tensor (``zero_grad(set_to_none=True)``) or moved by two (``zero_()``, then
the accumulation). The finding (``grads_not_reset``, warning) names the parameter and the
attempt at the optimizer's next step-site, before it writes.

Cost: one weak reference and one ``_version`` read per optimizer parameter at S-C, one
comparison at S-A; no tensor read, no sync. Cannot see: a loop that resets some gradients and
not others (only the parameter that opens the backward is compared); a gradient reset through
``.data`` (no version bump) reads as fresh. Declared exception: ``expect_grads_carried_over()``.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from typing import Any

import torch

from ...report import Finding, Where
from ...report._checks import Action
from ..gradients._update_ratio import UpdateSample
from ..session._evidence import Attempt
from ..session._params import Roster
from ._invariant import Declared, InvariantCheck


class FreshGradsCheck(InvariantCheck):
    """``grads_not_reset``: a backward accumulated onto the gradient the last step used."""

    name = "fresh_grads"
    site = "S-A"

    def __init__(self, roster: Roster, *, action: Action, declared: Declared) -> None:
        super().__init__(roster, action, {}, declared)
        self._record: dict[int, tuple[weakref.ref[torch.Tensor], int]] | None = None
        self._stale: int | None = None
        self._stale_tally = self.tally(
            "grads_not_reset",
            "warning",
            _message,
            remedy="Call optimizer.zero_grad() once per optimizer step (before the backward or "
            "after the step); with gradient accumulation, after the step that uses them. A "
            "loop that carries gradients over steps on purpose declares it with "
            "session.expect_grads_carried_over().",
        )

    def on_open(self, index: int, param: torch.Tensor) -> None:
        """S-A: the first arrival of a backward; only the first backward after a step is
        compared."""
        record, self._record = self._record, None
        held = None if record is None else record.get(index)
        if held is None or self.declared.carries_grads:
            return
        grad = param.grad
        if grad is not None and grad is held[0]() and grad._version == held[1] + 1:
            self._stale = index

    def on_attempt(self, attempt: Attempt) -> Finding | None:
        self.evaluations += 1
        stale, self._stale = self._stale, None
        if stale is None:
            return None
        info = self.roster.infos[stale]
        return self.occur(
            self._stale_tally,
            attempt.index,
            attempt.global_step,
            {"param": info.name},
            Where(module=info.module),
        )

    def on_written(self, attempt: Attempt, sample: UpdateSample | None) -> Finding | None:
        tensors = self.roster.tensors
        record = {}
        for index in self.roster.optimized:
            grad = tensors[index].grad
            if grad is not None:
                record[index] = (weakref.ref(grad), grad._version)
        self._record = record
        return None

    def on_pause(self) -> None:
        self._record = None
        self._stale = None


def _message(fields: Mapping[str, Any]) -> str:
    return (
        f"the gradient of {fields['param']} still held what the previous optimizer step used "
        f"when the next backward added to it (no zero_grad between the steps): first at "
        f"attempt {fields['first_attempt']}, {fields['count']} attempt(s). Every step then "
        "applies the sum of all past gradients: it looks like a too-high learning rate."
    )
