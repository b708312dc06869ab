"""The ``trace.audit()`` roll-up: what each trace-local diagnostic found, and what it skipped.

Built by ``debug/audit/``; findings of every diagnostic that ran are merged, each carrying
``fields["check"]``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ._base import Report, Unavailable
from ._status import tones


@dataclass(frozen=True)
class CheckOutcome:
    """How one diagnostic of ``trace.audit()`` ended."""

    check: str
    """Diagnostic name, e.g. ``"dtype_range"``."""
    report_type: str
    """``report_type`` of the diagnostic's own report."""
    status: str
    """That report's status."""
    lead: str
    """That report's lead sentence."""
    num_findings: int
    """How many findings that report made."""


HealthStatus = Literal["found", "clean", "partial"]
"""The statuses of :class:`HealthReport`."""


@dataclass(frozen=True, kw_only=True, repr=False)
class HealthReport(Report):
    """What ``trace.audit()`` ran, what each found, and what it skipped (never counted as run).

    ``findings`` merge the findings of every diagnostic that ran; each carries
    ``fields["check"]``. The full sub-report of a check opens with
    ``run_action("open", check=name)``.
    """

    report_type = "health"
    status_tones = tones({"found": "findings", "clean": "ok", "partial": "warning"})
    status: HealthStatus
    """``partial``: clean where checked, some values were not (an unsaved op, no backward)."""
    checks_run: tuple[str, ...] = ()
    """The diagnostics that ran on this trace, in order."""
    outcomes: tuple[CheckOutcome, ...] = ()
    """How each diagnostic that ran ended."""

    @property
    def skipped(self) -> tuple[Unavailable, ...]:
        """Diagnostics not run on this trace, each with its reason (``check``, ``reason``)."""
        return self.unavailable
