"""Parameters declared frozen stay frozen.

``session.expect_frozen(model.backbone)`` (or ``ChecksSession(..., expect_frozen=...)``)
declares parameters that must not change. At S-C the check reads their ``_version`` against
the one they had at the declaration (then at the last S-C): a version that moved is the
finding ``frozen_param_changed`` (critical), at the first step that wrote them. The typical
cause: the freeze runs in a method the runner never calls (``train()`` overridden to freeze),
so the "frozen" stage requires grad, sits in the optimizer and trains.

Cost: one ``_version`` read per declared parameter at S-C (host metadata, no sync). Cannot
see: writes through ``.data`` (no version bump).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...report import Finding, Where
from ...report._checks import Action
from ..gradients._update_ratio import UpdateSample
from ..session._evidence import Attempt
from ..session._params import Roster
from ._invariant import Declared, InvariantCheck, listing


class FrozenCheck(InvariantCheck):
    """``frozen_param_changed``: a parameter declared frozen was written."""

    name = "frozen"
    site = "S-C"

    def __init__(self, roster: Roster, *, action: Action, declared: Declared) -> None:
        super().__init__(roster, action, {}, declared)
        self._versions = {key: t._version for key, (_, t) in declared.frozen.items()}
        self._changed = self.tally(
            "frozen_param_changed",
            "critical",
            _message,
            remedy="Freeze where it always runs (requires_grad_(False) before building the "
            "optimizer, not inside train() or a callback the runner may skip), and build the "
            "optimizer over the parameters that require grad.",
        )

    def declare(self) -> None:
        """Take the versions of parameters declared since (``expect_frozen`` again)."""
        for key, (_, tensor) in self.declared.frozen.items():
            self._versions.setdefault(key, tensor._version)

    def on_written(self, attempt: Attempt, sample: UpdateSample | None) -> Finding | None:
        self.evaluations += 1
        changed = []
        for key, (name, tensor) in self.declared.frozen.items():
            version = tensor._version
            if version != self._versions.get(key, version):
                changed.append(name)
            self._versions[key] = version
        if not changed:
            return None
        return self.occur(
            self._changed,
            attempt.index,
            attempt.global_step,
            {"params": changed[:20], "param_count": len(changed)},
            Where(module=changed[0].rpartition(".")[0]),
        )


def _message(fields: Mapping[str, Any]) -> str:
    return (
        f"{fields['param_count']} parameter(s) declared frozen were written: "
        f"{listing(fields['params'])} (first by attempt {fields['first_attempt']}, "
        f"{fields['count']} step(s)). The frozen stage is being trained."
    )
