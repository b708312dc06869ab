"""When the step site's read of the gradients also serves as their arrival read.

Each attempt needs two facts about its gradients: what they held when the backward left them
(the arrival, S-D: pre-clip, per micro-batch, the culprit of a NaN that clipping spreads) and
what they hold when the optimizer is about to use them (the step site, S-B: the pre-write
verdict). Each is one read of every gradient, and the read is bound by memory bandwidth: on
GPT-2 small's 148 gradients (124M float32, one CPU thread) ``_foreach_norm`` takes 28 ms and a
plain ``sum`` 27 ms, so no kernel makes a pass cheaper; two passes cost about 5% of a 0.8 s
1x32-token step (``benchmarks/bench_checks.py``), above the 1.03x the default checks may cost.

In a loop that leaves the gradients alone between ``backward()`` and ``optimizer.step()`` (one
backward per step, no clipping, no ``unscale_``, no write), the two reads see the same values,
so one read can be both. That is decided by observation, per session (:class:`ArrivalReads`):

* the first :data:`LEARNING_ATTEMPTS` attempts read both and compare: each must have exactly one
  backward, every arrived gradient must be at the step site the same tensor with the same
  ``_version``, and its two norms must be equal bit for bit (a write through ``.data``, which
  does not bump ``_version``, shows there);
* after that the S-D read is deferred to the step site, and one attempt in
  :data:`VERIFY_EVERY` reads both again;
* any attempt that breaks the rule (a second backward, a gradient changed in place or replaced,
  a ``.data`` write seen on a verified attempt) makes every later backward read its arrival
  eagerly, for the rest of the session, with the reason kept for the report.

What it cannot see: a loop that writes gradients through ``.data`` only on some attempts, none of
them a verified one, has those attempts' arrival read at the step site (after the write). A
deferred attempt whose gradients turn out changed in place at the step site (a clip that starts
late) has no arrival read for them: those gradients are "unmeasured" for that attempt, counted
in :attr:`ArrivalReads.unread_attempts`, and the report says so.
"""

from __future__ import annotations

from typing import Literal

LEARNING_ATTEMPTS = 3
"""Attempts read both ways before the arrival read is deferred."""

VERIFY_EVERY = 25
"""While deferring, one attempt in this many reads both ways again."""

Mode = Literal["learning", "deferring", "eager"]
Break = Literal["accumulates", "changes_in_place", "writes_through_data"]

BREAK_TEXT: dict[Break, str] = {
    "accumulates": "the loop runs more than one backward per optimizer step",
    "changes_in_place": "the loop changes or replaces gradients between backward and step "
    "(clipping, unscale_, an assignment)",
    "writes_through_data": "the loop writes gradients through .data between backward and step "
    "(their values changed, their _version did not)",
}


class ArrivalReads:
    """Whether the next attempt's first backward defers its S-D norm to the step site.

    Args:
        is_enabled: False keeps every arrival read eager (FSDP2 shards, whose S-A norms are
            launched per gradient while the unsharded gradient exists).
    """

    def __init__(self, *, is_enabled: bool) -> None:
        self.mode: Mode = "learning" if is_enabled else "eager"
        self.broken_by: Break | None = None
        """Why reads are eager for good (None while learning or deferring)."""
        self.broken_at: int | None = None
        """The attempt that showed it."""
        self.deferred_attempts = 0
        """Attempts whose arrival read was the step site's."""
        self.verified_attempts = 0
        """Attempts read both ways that kept the rule."""
        self.unread_attempts = 0
        """Deferred attempts with at least one gradient whose arrival could not be read."""
        self._since_verified = 0

    def defers_next(self) -> bool:
        """Whether the next attempt's first backward defers (False on a verifying attempt)."""
        if self.mode != "deferring":
            return False
        return self._since_verified + 1 < VERIFY_EVERY

    def observe_verified(self, attempt: int, broken: Break | None) -> None:
        """An attempt read both ways; ``broken`` is what it showed, None when it kept the rule."""
        if self.mode == "eager":
            return
        if broken is not None:
            self._break(attempt, broken)
            return
        self.verified_attempts += 1
        self._since_verified = 0
        if self.mode == "learning" and self.verified_attempts >= LEARNING_ATTEMPTS:
            self.mode = "deferring"

    def observe_deferred(self, attempt: int, broken: Break | None, *, has_unread: bool) -> None:
        """A deferred attempt reached the step site (or closed without one)."""
        self.deferred_attempts += 1
        self._since_verified += 1
        self.unread_attempts += has_unread
        if broken is not None:
            self._break(attempt, broken)

    def _break(self, attempt: int, broken: Break) -> None:
        self.mode, self.broken_by, self.broken_at = "eager", broken, attempt

    def note(self) -> str | None:
        """The report's disclosure of how arrival norms were read, None before any attempt."""
        if self.deferred_attempts == 0:  # every arrival was read when its backward ended
            return None
        text = (
            f"Arrival norms (S-D) of {self.deferred_attempts} attempt(s) were read at the step "
            f"site in the same pass as the pre-write verdict: on {self.verified_attempts} "
            "attempt(s) read both ways (the first ones, then 1 in "
            f"{VERIFY_EVERY}) the loop left every gradient exactly as its backward did. A loop "
            "that writes gradients through .data only between verified attempts is read after "
            "the write on those attempts."
        )
        if self.unread_attempts:
            text += (
                f" {self.unread_attempts} deferred attempt(s) had gradients changed in place "
                "before the step site: their arrival was not read (they are 'unmeasured' there)."
            )
        if self.broken_by is not None:
            text += (
                f" Since attempt {self.broken_at} every backward's arrival is read when it "
                f"ends: {BREAK_TEXT[self.broken_by]}."
            )
        return text
