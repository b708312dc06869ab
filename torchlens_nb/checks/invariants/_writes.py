"""Parameters are written by the optimizer step only: nothing writes them between two steps.

At S-C the check records ``_version`` of every optimizer parameter; at the next S-B (before the
step writes) it reads them again. A version that moved was written in place by something other
than the optimizer's step: weights initialised again (``model.apply(init_weights)`` inside the
loop, ``reset_parameters()`` in ``forward``), a checkpoint loaded mid-run, weights clamped after
the step. The finding (``param_written_outside_step``, warning) names the parameters and the
attempt, before the step writes; its message lists what such writes usually are, since the
session cannot tell which one it was. Code that writes the weights on purpose between steps (an
EMA swap for evaluation, weight clipping) runs inside ``with session.paused():``; a wrapper
optimizer's own writes (SAM's perturbation, reached through ``base_optimizer``) are followed
and are not outside the step.

Cost: one ``_version`` read per optimizer parameter at S-C and at S-B (host metadata, no sync).
Cannot see: writes through ``.data`` (no version bump), and writes to parameters outside the
optimizer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...report import Finding, Where
from ...report._checks import Action
from ..gradients._update_ratio import UpdateSample
from ..session._evidence import Attempt
from ..session._params import Roster
from ._invariant import Declared, InvariantCheck, listing, names, versions


class WritesCheck(InvariantCheck):
    """``param_written_outside_step``: a parameter written in place between two steps."""

    name = "outside_writes"
    site = "S-B"

    def __init__(self, roster: Roster, *, action: Action, declared: Declared) -> None:
        super().__init__(roster, action, {}, declared)
        self._after: tuple[tuple[int, ...], list[int]] | None = None
        self._written = self.tally(
            "param_written_outside_step",
            "warning",
            _message,
            remedy="Find what writes the weights between steps (an init or reset_parameters() "
            "call inside the loop or forward, a load_state_dict); run writes made on purpose "
            "(an EMA swap, weight clipping) inside `with session.paused():`.",
        )

    def on_attempt(self, attempt: Attempt) -> Finding | None:
        self.evaluations += 1
        after, self._after = self._after, None
        if after is None:
            return None
        indices, before = after
        tensors = self.roster.tensors
        written = [i for i, v in zip(indices, before) if tensors[i]._version != v]
        if not written:
            return None
        found = names(self.roster, written)
        return self.occur(
            self._written,
            attempt.index,
            attempt.global_step,
            {"params": found[:20], "param_count": len(found)},
            Where(module=self.roster.infos[written[0]].module),
        )

    def on_written(self, attempt: Attempt, sample: UpdateSample | None) -> Finding | None:
        self._record_versions()
        return None

    def rebase(self) -> None:
        """Writes up to now are the optimizer's own (a wrapper's method, e.g. SAM's
        ``first_step``, returned): compare from the versions now."""
        if self._after is not None:
            self._record_versions()

    def _record_versions(self) -> None:
        indices = self.roster.optimized
        self._after = (indices, versions(self.roster.tensors, indices))

    def on_pause(self) -> None:
        self._after = None


def _message(fields: Mapping[str, Any]) -> str:
    return (
        f"{fields['param_count']} parameter(s) were written in place between two optimizer "
        f"steps, by something other than the optimizer: {listing(fields['params'])} (first "
        f"before attempt {fields['first_attempt']}, {fields['count']} time(s)). What wrote "
        "them is not known to the session: an init or reset_parameters() call (weights "
        "initialised again never train), a load_state_dict, a clamp or max-norm constraint, "
        "an averaged copy swapped in; the next step starts from what it wrote."
    )
