"""Step accounting: attempts, accepted and skipped steps, and the GradScaler skip ledger.

The skip ledger counts GradScaler scale DECREMENTS. ``scaler.update()`` multiplies the scale by
``backoff_factor`` exactly once per skipped attempt and never otherwise (growth multiplies by
``growth_factor`` > 1), so ``round(log(new / old) / log(backoff_factor))`` decrements between two
observations are exactly that many skipped attempts, whatever the accumulation factor K. The
naive count (backwards minus optimizer-step fires) is wrong under accumulation by construction:
at K=4, six attempts with one skip give 24 - 5 = 19 (``tests/checks/test_amp_ledger.py`` asserts
the difference so that count can never come back).
"""

from __future__ import annotations

import math
from collections import Counter, deque
from typing import Any, Literal

from ...report._checks import StepProvenance
from ._evidence import Attempt

MAX_LEDGER_RECORDS = 1024
"""Per-attempt records kept in ``ledgers["steps"]`` (the oldest are dropped and counted)."""

ScalerKind = Literal["gradscaler", "declared_none", "disabled", "undeclared"]
"""``disabled``: a GradScaler built with ``enabled=False`` (AMP off), a session without one."""


class ScaleLedger:
    """Observed GradScaler scales and the decrements between them."""

    def __init__(self, kind: ScalerKind, backoff_factor: float | None) -> None:
        self.kind = kind
        self.backoff_factor = backoff_factor
        self.last: float | None = None
        self.decrements = 0
        self.growths = 0
        self.observations = 0
        self.events: deque[dict[str, Any]] = deque(maxlen=MAX_LEDGER_RECORDS)

    def observe(self, scale: float | None, after_backward: int | None) -> int:
        """Record the scale seen after backward ``after_backward``; return new decrements."""
        if scale is None or self.backoff_factor is None:
            return 0
        self.observations += 1
        previous, self.last = self.last, scale
        if previous is None or scale == previous:
            return 0
        if scale > previous:
            self.growths += 1
            return 0
        count = max(1, round(math.log(scale / previous) / math.log(self.backoff_factor)))
        self.decrements += count
        self.events.append(
            {
                "after_backward": after_backward,
                "from_scale": previous,
                "to_scale": scale,
                "skipped_attempts": count,
            }
        )
        return count

    def to_dict(self, attempts: int, skipped: int) -> dict[str, Any]:
        """``ledgers["scale"]``: method, counts and the decrement events.

        ``attempts`` and ``skipped`` are the closed attempts and those closed without an
        optimizer step. With no ``scaler=`` declared they are what is known: when every
        attempt stepped, nothing was skipped (``method: "observed"``), and the user with no
        AMP has nothing to do; only attempts that ended without a step leave the cause unknown,
        and only then does the reason ask for ``scaler=``.
        """
        if self.kind == "gradscaler":
            return {
                "method": "scale_decrements",
                "skipped": self.decrements,
                "growths": self.growths,
                "current_scale": self.last,
                "backoff_factor": self.backoff_factor,
                "observations": self.observations,
                "decrements": list(self.events),
            }
        if self.kind == "undeclared":
            if attempts and not skipped:
                return {
                    "method": "observed",
                    "skipped": 0,
                    "reason": "every attempt stepped the optimizer: none was skipped",
                }
            return {
                "method": "unknown",
                "skipped": None,
                "reason": f"{skipped} attempt(s) ended without an optimizer step and no scaler= "
                "was declared: if a GradScaler skipped them, pass scaler=your_scaler so they "
                "count as its skips"
                if skipped
                else "no attempt has closed yet: whether one is skipped is not known",
            }
        reasons = {
            "declared_none": "scaler=None declared: no GradScaler runs, so no attempt is "
            "skipped by one",
            "disabled": "the GradScaler was built with enabled=False (AMP off): it never scales "
            "the loss nor skips an attempt, so the session runs as with scaler=None",
        }
        return {"method": "not_applicable", "skipped": 0, "reason": reasons[self.kind]}


class StepLedger:
    """Counters of every site plus one record per closed attempt."""

    def __init__(self) -> None:
        self.step_pre_fires = 0
        self.step_post_fires = 0
        self.accepted = 0
        self.skipped = 0
        self.raised = 0
        self.failed = 0
        self.skipped_by: Counter[str] = Counter()
        """Skipped attempts per :data:`~torchlens_nb.report._checks.SkipCause`."""
        self.backwards_since_accepted = 0
        self.backwards_outside_steps = 0
        """Boundary mode: backwards outside every block, reset before a step used them."""
        self.open_backwards = 0
        """Backwards of the attempt still open (the engine keeps it current)."""
        self._provenances: Counter[str] = Counter()
        self.declared_micro_batches: int | None = None
        self._per_attempt: Counter[int] = Counter()
        self.records: deque[dict[str, Any]] = deque(maxlen=MAX_LEDGER_RECORDS)
        self.records_dropped = 0
        self.next_attempt = 0

    @property
    def attempts(self) -> int:
        return self.accepted + self.skipped + self.raised + self.failed

    def close(self, attempt: Attempt) -> None:
        """Count a closed attempt and keep its record."""
        if attempt.status == "accepted":
            self.accepted += 1
            self.backwards_since_accepted = 0
        elif attempt.status == "skipped":
            self.skipped += 1
            self.skipped_by[attempt.skip_cause or "unknown"] += 1
        elif attempt.status == "raised":
            self.raised += 1
        elif attempt.status == "failed":
            self.failed += 1
        self._per_attempt[attempt.backward_count] += 1
        self._provenances[attempt.provenance] += 1
        if len(self.records) == self.records.maxlen:
            self.records_dropped += 1
        self.records.append(
            {
                "attempt": attempt.index,
                "global_step": attempt.global_step,
                "status": attempt.status,
                "backwards": attempt.backward_count,
                "micro_batches": attempt.micro_batches,
                "scale": attempt.scale,
                "step_provenance": attempt.provenance,
                "skip_cause": attempt.skip_cause,
            }
        )

    @property
    def provenance(self) -> StepProvenance:
        """``explicit`` only when every closed attempt came from ``session.step()``."""
        return "explicit" if set(self._provenances) == {"explicit"} else "inferred"

    def accumulation_factor(self) -> int | None:
        """Backwards per attempt K: declared, or recovered when every closed attempt had the
        same number."""
        if self.declared_micro_batches is not None:
            return self.declared_micro_batches
        if len(self._per_attempt) == 1:
            return next(iter(self._per_attempt))
        return None

    def counters(self, backwards: int, arrivals: int, pending_backwards: int) -> dict[str, Any]:
        """``report.counters``."""
        return {
            "attempts": self.attempts,
            "accepted": self.accepted,
            "skipped": self.skipped,
            "skipped_by_scaler": self.skipped_by["scaler"],
            "skipped_by_loop": self.skipped_by["loop"],
            "skipped_by_unknown": self.skipped_by["unknown"],
            "raised": self.raised,
            "failed": self.failed,
            "pending_backwards": pending_backwards,
            "backwards": backwards,
            "grad_arrivals": arrivals,
            "step_pre_fires": self.step_pre_fires,
            "step_post_fires": self.step_post_fires,
            "backwards_since_accepted": self.backwards_since_accepted,
            "backwards_outside_steps": self.backwards_outside_steps,
            "accumulation_factor": self.accumulation_factor(),
            "backwards_per_attempt": {str(k): v for k, v in sorted(self._per_attempt.items())},
            "step_provenance": self.provenance,
        }
