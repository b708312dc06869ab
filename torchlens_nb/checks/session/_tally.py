"""Repeated findings collapse into one: a count, the first and last attempt, a bounded histogram.

A session runs for as many steps as the loop does; a finding that recurs every step (a block that
runs other than its declared micro-batches, an attempt the loop skips) must not grow the report
with the run (8,000 steps once gave 8,000 ``micro_batches_mismatch`` findings and 4 MB of JSON).
A :class:`Tally` keeps the first occurrence's fields, the count, the first and last attempt and
global step, and how often each value of one field was seen (``<field>_counts``: at most
:data:`MAX_VALUES` distinct values; the rest are counted under ``"other"``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from ...report import Finding, Where
from ...report._base import Severity

MAX_VALUES = 16
"""Distinct values of the histogram field kept by name."""


class Tally:
    """One finding standing for every occurrence of a repeated event.

    Args:
        code: the finding code (also ``fields["code"]``).
        severity: the finding's severity.
        message: builds the message from the collapsed fields.
        remedy: the finding's remedy.
        histogram: the name of a per-occurrence field whose values are counted (in
            ``fields["<name>_counts"]``; ``fields["<name>"]`` keeps the first occurrence's).
    """

    def __init__(
        self,
        code: str,
        severity: Severity,
        message: Callable[[Mapping[str, Any]], str],
        remedy: str | None = None,
        histogram: str | None = None,
    ) -> None:
        self._code = code
        self._severity = severity
        self._message = message
        self._remedy = remedy
        self._histogram_field = histogram
        self._first: dict[str, Any] | None = None
        self._where: Where | None = None
        self._histogram: Counter[str] = Counter()
        self.count = 0
        self._last: tuple[int | None, int | None] = (None, None)

    def add(
        self,
        attempt: int | None,
        global_step: int | None,
        fields: Mapping[str, Any],
        where: Where | None = None,
    ) -> None:
        """Record one occurrence (its ``fields`` are kept only for the first one)."""
        self.count += 1
        if self._first is None:
            self._first = {**fields, "first_attempt": attempt, "first_global_step": global_step}
            self._where = where
        self._last = (attempt, global_step)
        if self._histogram_field is not None:
            value = str(fields.get(self._histogram_field))
            if value in self._histogram or len(self._histogram) < MAX_VALUES:
                self._histogram[value] += 1
            else:
                self._histogram["other"] += 1

    def finding(self) -> Finding | None:
        """The collapsed finding, None before the first occurrence."""
        if self._first is None:
            return None
        fields: dict[str, Any] = {
            "code": self._code,
            **self._first,
            "count": self.count,
            "last_attempt": self._last[0],
            "last_global_step": self._last[1],
        }
        if self._histogram_field is not None:
            fields[f"{self._histogram_field}_counts"] = dict(self._histogram)
        return Finding(
            self._code,
            self._severity,
            self._message(fields),
            where=self._where,
            remedy=self._remedy,
            fields=fields,
        )
