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
whose value did change was written through ``.data``: the version cannot see its writes, it is
not judged again, and an ``unavailable`` entry names it.

Cost: one ``_version`` read per parameter at S-B and S-C (host metadata, no sync). Only while
suspects exist: one copy of them at S-C and one ``torch.equal`` per suspect at the next S-C (a
host read). Cannot see: a write that leaves the value bitwise the same (an update below the
weight's precision, e.g. bf16 weights with a tiny lr): the sampled update ratio shows 0 there.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

from ..report import Finding, Unavailable, Where
from ..report._checks import Action
from ._evidence import Attempt
from ._invariant import Declared, InvariantCheck, listing, names, versions
from ._params import Roster
from ._update_ratio import UpdateSample


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
    ) -> None:
        super().__init__(roster, action, {}, declared)
        self._learning_rates = learning_rates
        """Each param group's ``lr`` now (read at S-B; a tensor lr is not read: no sync)."""
        self._given: list[int] = []
        self._before: list[int] = []
        self._suspects: dict[int, torch.Tensor] = {}
        self._blind: set[int] = set()
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
        unmoved, blind = self.declared.unmoved, self._blind
        lrs = self._learning_rates()
        given = []
        for index in self.roster.optimized:
            tensor = tensors[index]
            group = infos[index].group
            lr = lrs[group] if group is not None and group < len(lrs) else None
            if (
                tensor.grad is None
                or index not in attempt.fired
                or index in blind
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
        tensors = self.roster.tensors
        still = [i for i, v in zip(self._given, self._before) if tensors[i]._version == v]
        self._given, self._before = [], []
        suspects, self._suspects = self._suspects, {}
        confirmed = []
        with torch.no_grad():
            for index in still:
                copy = suspects.get(index)
                if copy is None:
                    self._suspects[index] = tensors[index].detach().clone()
                elif torch.equal(copy, tensors[index]):
                    confirmed.append(index)
                    self._suspects[index] = copy
                else:
                    self._blind.add(index)
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

    def unavailable(self) -> list[Unavailable]:
        if not self._blind:
            return []
        blind = names(self.roster, sorted(self._blind))
        return [
            Unavailable(
                self.name,
                f"the optimizer writes {len(blind)} parameter(s) through .data (their version "
                f"counter does not move), so whether its steps move them is not checked: "
                f"{listing(blind)}.",
                code="written_through_data",
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
