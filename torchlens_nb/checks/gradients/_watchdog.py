"""The death-spiral watchdog ``no_accepted_steps`` (counting tier, site S-D), on by default.

Under fp16 + GradScaler a loss scale that keeps backing off skips every attempt; retrospective
checks that wait for an accepted step then stay silent forever. The watchdog counts backwards
since the last accepted step (no tensor read) and warns (finding ``check_no_accepted_steps``, the
spec's spelling) once they exceed ``K x threshold_attempts``, where K is the declared
``micro_batches`` or the accumulation factor recovered from the attempts closed so far: skipped
ones count, since the engine closes an attempt the moment the next backward starts from reset
gradients; until the first attempt closed, the open attempt's backwards are a lower bound on K. It re-arms at the next accepted step; repeated
episodes collapse into one finding with their count.

Default ``threshold_attempts=20``: the default ``init_scale`` 2**16 reaches 1.0 after 16
back-offs, so 20 consecutive skips means the scale is below 1/16, past any warm-up.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..._validate import check_int
from ...report import Finding
from ...report._checks import Action
from ..session._check import Check
from ..session._evidence import Attempt
from ..session._ledger import StepLedger
from ..session._params import Roster
from ..session._tally import Tally
from ._update_ratio import UpdateSample


class NoAcceptedStepsCheck(Check):
    """``no_accepted_steps``: N backwards with no accepted optimizer step."""

    name = "no_accepted_steps"
    site = "S-D"

    def __init__(self, roster: Roster, *, threshold_attempts: int, action: Action) -> None:
        check_int(
            "threshold_attempts",
            threshold_attempts,
            low=1,
            expect=">= 1",
            hint="pass an int (the default is 20)",
        )
        super().__init__(roster, action, {"threshold_attempts": threshold_attempts})
        self._is_armed = True
        self._episodes = Tally(
            "check_no_accepted_steps",
            "warning",
            self._message,
            remedy="Read report.ledgers['scale'] for the scale history; a scale collapsing "
            "toward 0 means the forward produces non-finite values at any scale: find "
            "them with tl.debug.nonfinite_origin(model, batch).",
        )

    def on_backward(self, ledger: StepLedger) -> Finding | None:
        self.evaluations += 1
        # before any attempt closed, the open one's backwards are a lower bound on K
        factor = ledger.accumulation_factor() or max(1, ledger.open_backwards)
        limit = factor * self.options["threshold_attempts"]
        if not self._is_armed or ledger.backwards_since_accepted <= limit:
            return None
        self._is_armed = False
        fields = {
            "backwards_since_accepted": ledger.backwards_since_accepted,
            "limit": limit,
            "accumulation_factor": factor,
            "accepted_total": ledger.accepted,
        }
        self._episodes.add(ledger.next_attempt, None, fields)
        return self.act(self.findings()[-1])

    def on_written(self, attempt: Attempt, sample: UpdateSample | None) -> Finding | None:
        self._is_armed = True
        self.is_warning_active = False
        return None

    def _message(self, fields: Mapping[str, Any]) -> str:
        repeated = (
            f" ({fields['count']} such episodes, the last before attempt {fields['last_attempt']})"
            if fields["count"] > 1
            else ""
        )
        return (
            f"{fields['backwards_since_accepted']} backwards passed without an accepted "
            f"optimizer step (limit {fields['limit']} = K {fields['accumulation_factor']} x "
            f"{self.options['threshold_attempts']} attempts){repeated}; a GradScaler whose scale "
            "keeps backing off skips every attempt."
        )

    def findings(self) -> list[Finding]:
        finding = self._episodes.finding()
        return [] if finding is None else [finding]
