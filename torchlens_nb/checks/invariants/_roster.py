"""The optimizer holds something to train, and everything trained is in an optimizer.

* ``optimizer_has_nothing_to_train`` (critical): no parameter of the optimizer requires grad
  (it holds only frozen parameters, e.g. built over ``model.backbone`` after the backbone was
  frozen) while the model trains. Acted on at construction when the model has parameters that
  require grad outside the optimizer, else at the first step whose backward reached the model.
  An optimizer built over a backbone frozen for a warm-up phase holds nothing to train until
  the unfreezing, and nothing of the model gets a gradient meanwhile: that is no finding, and
  once it holds a trainable parameter, it never was (issue 42). One that never held anything to
  train through the session is reported at the end (no action: nothing was seen to go wrong).
* ``params_trained_by_no_optimizer`` (warning): parameters that require grad and RECEIVED a
  gradient in an attempt, but are in none of this optimizer's param groups (an optimizer built
  before a layer was replaced, or over one submodule, or a frozen layer unfrozen without
  ``add_param_group``: the roster watches the model's frozen parameters and takes them in when
  they start to require grad). Parameters the user declared frozen are exempt; a parameter that
  requires grad but never gets one is not named (unused branches).

Cost: host metadata at S-B (the roster is synced there anyway); no tensor read. Cannot see: a
second optimizer that trains the "outside" parameters (a GAN's discriminator when the session
is given the whole GAN): pass the session the module its optimizer trains.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...report import Finding, Unavailable, Where
from ...report._checks import Action
from ..session._evidence import Attempt
from ..session._params import Roster
from ..session._tally import Tally
from ._invariant import Declared, InvariantCheck, listing, names


class RosterCheck(InvariantCheck):
    """``optimizer_has_nothing_to_train`` and ``params_trained_by_no_optimizer``."""

    name = "optimizer_roster"
    site = "S-B"

    def __init__(self, roster: Roster, *, action: Action, declared: Declared) -> None:
        super().__init__(roster, action, {}, declared)
        self._empty = self.tally(
            "optimizer_has_nothing_to_train",
            "critical",
            _empty_message,
            remedy="Build the optimizer over the parameters you train, after freezing: "
            "torch.optim.AdamW(p for p in model.parameters() if p.requires_grad).",
        )
        self._outside = self.tally(
            "params_trained_by_no_optimizer",
            "warning",
            _outside_message,
            remedy="Add them to the optimizer (optimizer.add_param_group({'params': [...]}) or "
            "rebuild it after changing the model), or freeze them (requires_grad_(False)); "
            "declare parameters frozen on purpose with session.expect_frozen(...).",
        )
        self._idle = Tally("optimizer_has_nothing_to_train", "critical", _empty_message)
        """Construction and steps that held nothing to train while nothing of the model got a
        gradient (a frozen phase): reported only if the optimizer never trains."""
        self._has_trained = False
        self.not_running: list[Unavailable] = []
        """The other invariants that cannot run on this set-up (set by the session): the
        roster check runs everywhere, so it carries their ``unavailable`` entries."""
        self.on_construction()

    def on_construction(self) -> Finding | None:
        """The roster at construction: metadata only."""
        self.evaluations += 1
        if self.roster.optimized:
            self._has_trained = True
            return None
        if self.roster.outside:  # the model trains something this optimizer does not hold
            return self.occur(self._empty, None, None, {"frozen_in_optimizer": True})
        self._idle.add(None, None, {"frozen_in_optimizer": True})
        return None

    def on_attempt(self, attempt: Attempt) -> Finding | None:
        self.evaluations += 1
        violation = None
        if self.roster.optimized:
            self._has_trained = True
        elif attempt.fired:
            violation = self.occur(
                self._empty, attempt.index, attempt.global_step, {"frozen_in_optimizer": True}
            )
        else:
            self._idle.add(attempt.index, attempt.global_step, {"frozen_in_optimizer": True})
        tensors, infos = self.roster.tensors, self.roster.infos
        outside = sorted(
            i
            for i in attempt.fired
            if infos[i].group is None and id(tensors[i]) not in self.declared.frozen
        )
        if outside:
            found = names(self.roster, outside)
            violation = (
                self.occur(
                    self._outside,
                    attempt.index,
                    attempt.global_step,
                    {"params": found[:20], "param_count": len(found)},
                    Where(module=infos[outside[0]].module),
                )
                or violation
            )
        return violation

    def unavailable(self) -> list[Unavailable]:
        return list(self.not_running)

    def findings(self) -> list[Finding]:
        found = super().findings()
        idle = self._idle.finding()
        if idle is not None and not self._has_trained and self._empty.count == 0:
            found.insert(0, idle)
        return found


def _empty_message(fields: Mapping[str, Any]) -> str:
    first = fields["first_attempt"]
    return (
        "the optimizer holds no parameter that requires grad: every step leaves the model as "
        f"it was (first {'at construction' if first is None else f'at attempt {first}'}, "
        f"{fields['count']} time(s))."
    )


def _outside_message(fields: Mapping[str, Any]) -> str:
    return (
        f"{fields['param_count']} parameter(s) received a gradient but are in no param group "
        f"of this optimizer, so nothing trains them: {listing(fields['params'])} (first at "
        f"attempt {fields['first_attempt']}, {fields['count']} attempt(s))."
    )
