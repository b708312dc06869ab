"""The death-spiral watchdog ``no_accepted_steps`` (counting tier, site S-D).

Under fp16 + GradScaler a loss scale that keeps backing off skips every attempt; retrospective
checks that wait for an accepted step then stay silent forever. The watchdog counts backwards
since the last accepted step (no tensor read) and warns once they exceed
``K x threshold_attempts``, where K is the declared ``micro_batches`` or the recovered
accumulation factor (1 until known). It re-arms at the next accepted step.

Default ``threshold_attempts=20``: the default ``init_scale`` 2**16 reaches 1.0 after 16
back-offs, so 20 consecutive skips means the scale is below 1/16, past any warm-up.
"""

from __future__ import annotations

from typing import Any

from ..errors import DiagnosticArgumentError
from ..report import Finding
from ..report._checks import Action
from ._check import Check
from ._evidence import Attempt
from ._ledger import StepLedger
from ._params import Roster
from ._update_ratio import UpdateSample


class NoAcceptedStepsCheck(Check):
    """``no_accepted_steps``: N backwards with no accepted optimizer step."""

    name = "no_accepted_steps"
    site = "S-D"

    def __init__(self, roster: Roster, *, threshold_attempts: int, action: Action) -> None:
        if (
            isinstance(threshold_attempts, bool)
            or not isinstance(threshold_attempts, int)
            or threshold_attempts < 1
        ):
            raise DiagnosticArgumentError(
                f"threshold_attempts must be >= 1, got {threshold_attempts!r}; pass an int "
                "(the default is 20)."
            )
        super().__init__(roster, action, {"threshold_attempts": threshold_attempts})
        self._is_armed = True
        self.events: list[dict[str, Any]] = []

    def on_backward(self, ledger: StepLedger) -> Finding | None:
        self.evaluations += 1
        factor = ledger.accumulation_factor() or 1
        limit = factor * self.options["threshold_attempts"]
        if not self._is_armed or ledger.backwards_since_accepted <= limit:
            return None
        self._is_armed = False
        self.events.append(
            {
                "code": "no_accepted_steps",
                "backwards_since_accepted": ledger.backwards_since_accepted,
                "limit": limit,
                "accumulation_factor": factor,
                "accepted_total": ledger.accepted,
            }
        )
        return self.act(self.findings()[-1])

    def on_written(self, attempt: Attempt, sample: UpdateSample | None) -> Finding | None:
        self._is_armed = True
        self.is_warning_active = False
        return None

    def findings(self) -> list[Finding]:
        return [
            Finding(
                "no_accepted_steps",
                "warning",
                f"{event['backwards_since_accepted']} backwards passed without an accepted "
                f"optimizer step (limit {event['limit']} = K {event['accumulation_factor']} x "
                f"{self.options['threshold_attempts']} attempts); a GradScaler whose scale keeps "
                "backing off skips every attempt.",
                remedy="Read report.ledgers['scale'] for the scale history; a scale collapsing "
                "toward 0 means the forward produces non-finite values at any scale: find "
                "them with tl.debug.nonfinite_origin(model, batch).",
                fields=event,
            )
            for event in self.events
        ]
