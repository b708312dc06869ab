"""The base of every session check: the severity/action axes and the check's state.

Severity (critical/warning/info) is a property of the evidence and is set by the check for each
finding; action (raise/warn/collect) is control flow and is chosen per registration. A check
returns a finding from ``on_attempt`` / ``on_written`` only to ask the session to RAISE it; the
session raises at the site it is in (S-B before the optimizer writes, S-C after it wrote).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, get_args

from ...errors import DiagnosticArgumentError, warn
from ...report import Finding, Unavailable
from ...report._checks import Action, CheckRun, CheckState, Site
from ._window import Emission

if TYPE_CHECKING:
    from ..gradients._update_ratio import UpdateSample
    from ._evidence import Attempt
    from ._ledger import StepLedger
    from ._params import Roster


def validate_action(action: str) -> None:
    """Refuse an unknown action before anything is registered."""
    if action not in get_args(Action):
        raise DiagnosticArgumentError(
            f"action must be one of {list(get_args(Action))}, got {action!r}."
        )


class Check:
    """One registered check. Subclasses set ``name``, ``site`` and the hooks they need."""

    name: ClassVar[str]
    site: Site
    """The site whose evidence the check judges (an instance may override the class value)."""
    needs_norms: ClassVar[bool] = False
    """Whether the check reads S-A gradient norms (arms the one batched norm per backward)."""

    def __init__(self, roster: Roster, action: Action, options: Mapping[str, Any]) -> None:
        validate_action(action)
        self.roster = roster
        self.action: Action = action
        self.options = dict(options)
        self.evaluations = 0
        self.has_raised = False
        self.is_warning_active = False

    def install(self, stack: contextlib.ExitStack) -> None:
        """``attach()``: install the check's own hooks (none by default); every removal goes to
        ``stack``."""

    # ----- site callbacks (the session calls these) ----------------------------------------
    def on_backward(self, ledger: StepLedger) -> Finding | None:
        """S-D, counting tier: no tensor values available."""
        return None

    def on_loss(self, attempt: Attempt) -> None:
        """The attempt's loss was read (``attempt.loss``): at its own step site before
        ``on_attempt``, or up to ``LOSS_READ_EVERY`` attempts later where the read waited."""

    def on_attempt(self, attempt: Attempt) -> Finding | None:
        """S-B, before the optimizer writes: judge the attempt's S-A evidence."""
        return None

    def on_reevaluated(self, attempt: Attempt) -> Finding | None:
        """Inside ``step(closure)``: a re-evaluation's gradients, before the optimizer uses them
        (``attempt.is_mid_step``)."""
        return None

    def on_skipped(self, attempt: Attempt) -> None:
        """An attempt that never reached the write (S-B never fired); ``attempt.skip_cause``
        says who skipped it."""

    def on_outside_steps(self, attempt: Attempt) -> None:
        """Boundary mode: backwards that ran outside every ``session.step()`` block and were
        reset before a step used them; ``attempt`` holds their evidence (no attempt number of
        its own: ``attempt.index`` is the next attempt's)."""

    def on_written(self, attempt: Attempt, sample: UpdateSample | None) -> Finding | None:
        """S-C, after the optimizer wrote."""
        return None

    def on_pause(self) -> None:
        """The session stopped observing (``disable()``): drop state carried between sites."""

    # ----- results ----------------------------------------------------------------------------
    def findings(self) -> list[Finding]:
        """Frozen findings built from the check's state now."""
        return []

    def unavailable(self) -> list[Unavailable]:
        """Typed entries for evidence this check could not obtain."""
        return []

    def state(self) -> CheckState:
        if self.has_raised:
            return "raised"
        if self.is_warning_active:
            return "warned"
        if self.unavailable() and not self.evaluations:
            return "unavailable"
        if not self.evaluations or self.findings():
            return "collecting"
        return "clean"

    def run(self) -> CheckRun:
        """The ``checks_run`` entry."""
        return CheckRun(
            self.name,
            self.site,
            self.action,
            self.state(),
            self.evaluations,
            len(self.findings()),
            self.options,
        )

    def is_due(self, emission: Emission, is_sustained: bool, is_clean: bool) -> bool:
        """Advance the (check, site) emission; True when a sustained episode must be emitted."""
        is_due = emission.step(is_sustained, is_clean)
        if emission.is_armed:
            self.is_warning_active = False
        return is_due

    def act(self, finding: Finding) -> Finding | None:
        """Apply the action axis to a sustained or exact finding; return it to be raised."""
        if self.action == "raise":
            self.has_raised = True
            return finding
        if self.action == "warn":
            self.is_warning_active = True
            warn(f"{finding.code}: {finding.message}")
        return None
