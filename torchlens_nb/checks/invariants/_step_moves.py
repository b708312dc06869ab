"""An accepted step moves what it was given a gradient for.

At S-B the check records ``_version`` of every optimizer parameter the step is given a gradient
for (its gradient arrived in the attempt, not measured as exactly zero, its group's lr not 0, not declared with
``expect_unmoved``); at S-C it reads them again. A torch optimizer writes such a parameter in
place, which bumps the version (even an update of 0). A version that did not move is a SUSPECT:
the step wrote nothing through the tensor (a custom step that rebinds ``p = p - lr * g``, a
compiled step that stopped updating) or it wrote through ``.data`` (no bump).

A suspect is confirmed on its value: it is copied at that S-C and compared bitwise at the next
S-C. Still bitwise the same after another accepted step with a gradient is the finding
``step_did_not_move`` (critical), at that second step: within one step of the trigger. A suspect
whose value did change was written without a version bump (a fused optimizer kernel such as
``AdamW(fused=True)``, the Hugging Face Trainer's default, or writes through ``.data``): the
version cannot see its writes and it is judged on values only. On a step the update-ratio
check samples, every parameter is judged on its measured ``||w_after - w_before||`` instead: 0
is the finding at once, and a move with no version bump marks the parameter version-blind. Blind
parameters with no sampled step to judge them are an ``unavailable`` entry.

A parameter found bitwise unchanged (by either judgement) is confirmed only when the step could
have shown: its gradient at S-C has a non-zero element (an exactly zero gradient, a dead ReLU's,
gives an update of 0 under plain SGD: issue 45) and, for some element, the update the step
could make is at least half the weight's float spacing there (``eps(dtype) * |w|``). The update
a step could make is ``lr`` per element for an optimizer that normalises by a running second
moment (its state holds ``exp_avg_sq``, ``square_avg``, ``sum`` or ``exp_inf``: Adam, AdamW,
RMSprop, Adagrad, Adamax), else ``lr * |g|`` times 10 (momentum up to 0.9). Measured: the
Hugging Face Trainer's default (fused AdamW, lr 5e-5, 4,000 warmup steps) gives lr 1.25e-8 at
its first step, below the 6e-8 half-spacing of a LayerNorm weight at 1.0, and leaves it bitwise
unchanged (issue 42).

Cost: one ``_version`` read per parameter at S-B and S-C (host metadata, no sync). Only while
suspects exist: one copy of them at S-C and one ``torch.equal`` per suspect at the next S-C (a
host read); per confirmed one, the reads of its gradient and weight above. Cannot see: a step
that does nothing while its update is below the weight's precision (it could not show).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import torch

from ...report import Finding, Unavailable, Where
from ...report._checks import Action
from ..gradients._update_ratio import UpdateSample
from ..session._evidence import Attempt
from ..session._params import Roster
from ._invariant import Declared, InvariantCheck, listing, names, versions

_ADAPTIVE_STATE = ("exp_avg_sq", "square_avg", "sum", "exp_inf")
"""Optimizer state keys of an update normalised by a running second moment (about ``lr`` per
element): Adam / AdamW / NAdam / RAdam, RMSprop / Adadelta, Adagrad, Adamax."""
MOMENTUM_BOUND = 10.0
"""How far momentum can carry an un-normalised update past ``lr * |g|`` (1 / (1 - 0.9))."""


class StepMovesCheck(InvariantCheck):
    """``step_did_not_move``: a parameter with a gradient bitwise unchanged by accepted steps."""

    name = "step_moves"
    site = "S-C"

    def __init__(
        self,
        roster: Roster,
        *,
        action: Action,
        declared: Declared,
        learning_rates: Callable[[], list[Any]],
        state_of: Callable[[torch.Tensor], Mapping[str, Any]],
    ) -> None:
        super().__init__(roster, action, {}, declared)
        self._learning_rates = learning_rates
        """Each param group's ``lr`` now (read at S-B; a tensor lr is not read: no sync)."""
        self._state_of = state_of
        """The optimizer's state of a parameter (read only for a parameter found unchanged)."""
        self._given: list[int] = []
        self._before: list[int] = []
        self._suspects: dict[int, torch.Tensor] = {}
        self._blind: set[int] = set()
        """Parameters the optimizer writes without a version bump (fused kernel, ``.data``)."""
        self._is_blind_judged = False
        """Whether a sampled step has judged the version-blind parameters on their values."""
        self._tally_still = self.tally(
            "step_did_not_move",
            "critical",
            _message,
            remedy="Check that optimizer.step() writes the parameters in place (p.add_(...), "
            "not p = p - lr * g) and that a compiled or custom step still updates after an "
            "iteration with no gradients. Updates masked on purpose are declared with "
            "session.expect_unmoved(params).",
        )

    def on_attempt(self, attempt: Attempt) -> Finding | None:
        tensors, infos = self.roster.tensors, self.roster.infos
        unmoved = self.declared.unmoved
        lrs = self._learning_rates()
        given = []
        for index in self.roster.optimized:
            tensor = tensors[index]
            group = infos[index].group
            lr = lrs[group] if group is not None and group < len(lrs) else None
            if (
                tensor.grad is None
                or index not in attempt.fired
                or id(tensor) in unmoved
                or attempt.fact(index) == "zero"
                or (not isinstance(lr, torch.Tensor) and lr == 0)
            ):
                continue
            given.append(index)
        self._given = given
        self._before = versions(tensors, given)
        return None

    def on_written(self, attempt: Attempt, sample: UpdateSample | None) -> Finding | None:
        self.evaluations += 1
        given, before = self._given, self._before
        self._given, self._before = [], []
        if sample is not None:
            confirmed = self._judge_sample(given, before, sample)
        else:
            confirmed = self._judge_versions(given, before)
        if not confirmed:
            return None
        found = names(self.roster, confirmed)
        return self.occur(
            self._tally_still,
            attempt.index,
            attempt.global_step,
            {"params": found[:20], "param_count": len(found)},
            Where(module=self.roster.infos[confirmed[0]].module),
        )

    def _judge_sample(self, given: list[int], before: list[int], sample: UpdateSample) -> list[int]:
        """A sampled step measured ``||w_after - w_before||``: 0 is bitwise unchanged; a move
        the version counter did not see makes the parameter version-blind."""
        tensors = self.roster.tensors
        confirmed = []
        for index, version in zip(given, before):
            delta = sample.delta_norms[index]
            if delta == 0.0:
                if self._could_show(index):
                    confirmed.append(index)
            elif math.isfinite(delta) and tensors[index]._version == version:
                self._blind.add(index)
        self._suspects = {}
        self._is_blind_judged |= bool(self._blind)
        return confirmed

    def _judge_versions(self, given: list[int], before: list[int]) -> list[int]:
        """An unsampled step: a version that did not move makes a suspect (copied now),
        confirmed bitwise at the next step or cleared (version-blind) when its value moved."""
        tensors, blind = self.roster.tensors, self._blind
        still = [i for i, v in zip(given, before) if i not in blind and tensors[i]._version == v]
        suspects, self._suspects = self._suspects, {}
        confirmed = []
        with torch.no_grad():
            for index in still:
                copy = suspects.get(index)
                if copy is None:
                    self._suspects[index] = tensors[index].detach().clone()
                elif torch.equal(copy, tensors[index]):
                    if self._could_show(index):
                        confirmed.append(index)
                    self._suspects[index] = copy
                else:
                    blind.add(index)
        return confirmed

    def _could_show(self, index: int) -> bool:
        """Whether this step's update of parameter ``index`` could change some element of it
        at its precision (module docstring); reads its gradient and weight (a host read)."""
        param = self.roster.tensors[index]
        grad = param.grad
        group = self.roster.infos[index].group
        lrs = self._learning_rates()
        if grad is None or group is None or group >= len(lrs):
            return False
        with torch.no_grad():
            magnitude = grad.detach().abs().float()
            if not bool(magnitude.any()):
                return False  # an exactly zero gradient: nothing for the step to apply
            lr = float(lrs[group])
            state = self._state_of(param)
            if any(key in state for key in _ADAPTIVE_STATE):
                update = torch.full_like(magnitude, lr)
            else:
                update = magnitude * (lr * MOMENTUM_BOUND)
            spacing = param.detach().abs().float() * torch.finfo(param.dtype).eps
            return bool((update >= spacing / 2).any())

    def unavailable(self) -> list[Unavailable]:
        if not self._blind or self._is_blind_judged:
            return []
        blind = names(self.roster, sorted(self._blind))
        return [
            Unavailable(
                self.name,
                f"the optimizer writes {len(blind)} parameter(s) without bumping their version "
                f"counter (a fused kernel, or writes through .data), so whether its steps move "
                f"them is judged only on the update-ratio check's sampled steps, and none ran "
                f"since: {listing(blind)}; register_update_ratio_check() judges them.",
                code="written_without_version_bump",
            )
        ]

    def on_pause(self) -> None:
        self._given, self._before, self._suspects = [], [], {}


def _message(fields: Mapping[str, Any]) -> str:
    return (
        f"{fields['param_count']} parameter(s) were given a non-zero gradient and stayed "
        f"bitwise unchanged through an accepted optimizer step: {listing(fields['params'])} "
        f"(confirmed at attempt {fields['first_attempt']}, {fields['count']} step(s)). The "
        "optimizer step does nothing for them."
    )
