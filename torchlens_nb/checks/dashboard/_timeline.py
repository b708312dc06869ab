"""The timeline recorder: per-attempt, per-layer values a session's checks already read.

The stability check hands it host floats it has just read for its own judgement (block gradient
norms, sampled block update ratios, the probe's per-layer max attention logits and activation
RMS, each attempt's loss): recording adds no device work and no host read (the activation RMS
is the probe's own, one reduction per block on probed forwards). Memory is fixed: ``COLUMNS``
columns per layer; when an attempt falls past the last column, neighbouring columns
are merged in place (cell max, loss min and max) and each column then covers twice as many
attempts, so a 10,000-attempt run uses 157 columns of 64 attempts.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ...report import Finding
from ...report._timeline import (
    TIMELINE_METRICS,
    CheckTimeline,
    TimelineMap,
    TimelineMark,
    TimelineMetric,
)

COLUMNS = 256
"""Columns kept per layer: a notebook cell is about 900 px wide, so 256 columns are 3 px or more
each, and the live payload stays bounded however long the run (``benchmarks/bench_panel_size.py``
measures it at 10,000 attempts)."""
MAX_LAYERS = 96
"""Rows kept per metric (a 48-block transformer's blocks plus its attentions); later layers are
counted in ``layers_dropped``."""

LIVE_INTERVAL_S = 0.5
"""At most 2 timelines per second in the live increments (the counters keep the feed's 10 per
second): a 16-layer run's timeline is 87 KB as base64, so about 174 KB/s at most; the final
report carries the last state whatever the interval."""

NOT_MEASURED: Mapping[str, str] = {
    "grad_norm": "no block gradient norm was read (the stability check reads them where the "
    "session does, else on probed attempts)",
    "update_ratio": "no upcoming update was sampled (the stability check samples the first "
    "attempt and one in adam_every, for Adam-like optimizers and SGD)",
    "activation_rms": "no probed forward ran through a numbered block (the stability check's "
    "probe measures the output RMS of blocks such as blocks.0)",
    "attention_logit": "no self-attention softmax or scaled_dot_product_attention ran in a "
    "probed forward",
}


class TimelineRecorder:
    """Fixed-size per-layer columns plus the loss envelope (see the module docstring)."""

    def __init__(
        self, order: Iterable[str] = (), columns: int = COLUMNS, max_layers: int = MAX_LAYERS
    ) -> None:
        """``order``: layer names in the model's order (rows are drawn in it; others after)."""
        if columns < 2 or columns % 2:
            raise ValueError(f"columns must be an even number >= 2, got {columns}")
        self._rank: dict[str, int] = {}
        for name in order:
            self._rank.setdefault(name, len(self._rank))
        self.columns = columns
        self.max_layers = max_layers
        self.attempts_per_column = 1
        self.last_attempt = -1
        self.layers_dropped = 0
        self._cells: dict[TimelineMetric, dict[str, list[float]]] = {
            m: {} for m in TIMELINE_METRICS
        }
        self._loss_low = [math.nan] * columns
        self._loss_high = [math.nan] * columns
        self.version = 0
        """Bumped by every record: the live feed sends the timeline only when it changed."""
        self._taken_version = 0
        self._taken_at = -math.inf

    def add(self, metric: TimelineMetric, attempt: int, values: Mapping[str, float]) -> None:
        """Record ``values`` (layer -> value) of ``attempt``: each cell keeps its max."""
        if not values or attempt < 0:
            return
        column = self._column(attempt)
        rows = self._cells[metric]
        for layer, value in values.items():
            row = rows.get(layer)
            if row is None:
                if len(rows) >= self.max_layers:
                    self.layers_dropped += 1
                    continue
                row = rows[layer] = [math.nan] * self.columns
            row[column] = _larger(row[column], value if math.isfinite(value) else math.inf)
        self.version += 1

    def has(self, metric: TimelineMetric) -> bool:
        """Whether any layer's ``metric`` was recorded."""
        return bool(self._cells[metric])

    def add_loss(self, attempt: int, loss: float) -> None:
        """Record one attempt's loss (the column keeps its min and max)."""
        if attempt < 0:
            return
        column = self._column(attempt)
        high = loss if math.isfinite(loss) else math.inf
        self._loss_high[column] = _larger(self._loss_high[column], high)
        if math.isfinite(loss):
            low = self._loss_low[column]
            self._loss_low[column] = loss if math.isnan(low) else min(low, loss)
        self.version += 1

    def _column(self, attempt: int) -> int:
        while attempt >= self.columns * self.attempts_per_column:
            self._fold()
        self.last_attempt = max(self.last_attempt, attempt)
        return attempt // self.attempts_per_column

    def _fold(self) -> None:
        """Merge column pairs in place: column j now holds old columns 2j and 2j+1."""
        half = self.columns // 2
        for rows in self._cells.values():
            for row in rows.values():
                _fold(row, half, _larger)
        _fold(self._loss_high, half, _larger)
        _fold(self._loss_low, half, _smaller)
        self.attempts_per_column *= 2

    def timeline(self, findings: Iterable[Finding] = ()) -> CheckTimeline | None:
        """The frozen timeline now, with ``findings`` that name an attempt as marks; None
        before the first record."""
        if self.last_attempt < 0:
            return None
        used = self.last_attempt // self.attempts_per_column + 1
        maps = tuple(
            TimelineMap(metric, layers, tuple(tuple(rows[n][:used]) for n in layers))
            for metric, rows in self._cells.items()
            if rows
            for layers in (self._ordered(rows),)
        )
        measured = {m.metric for m in maps}
        marks = []
        for index, finding in enumerate(findings):
            attempt = _attempt_of(finding)
            if attempt is not None and 0 <= attempt <= self.last_attempt:
                column = attempt // self.attempts_per_column
                marks.append(TimelineMark(attempt, column, finding.code, finding.severity, index))
        return CheckTimeline(
            attempts_per_column=self.attempts_per_column,
            columns=used,
            maps=maps,
            not_measured={m: NOT_MEASURED[m] for m in TIMELINE_METRICS if m not in measured},
            loss_low=tuple(self._loss_low[:used]),
            loss_high=tuple(self._loss_high[:used]),
            marks=tuple(marks),
            layers_dropped=self.layers_dropped,
        )

    def _ordered(self, rows: Mapping[str, Any]) -> tuple[str, ...]:
        last = len(self._rank)
        return tuple(sorted(rows, key=lambda name: self._rank.get(name, last)))

    def take_changed(
        self, findings: Iterable[Finding] = (), clock: Callable[[], float] = time.monotonic
    ) -> CheckTimeline | None:
        """The timeline if it changed since the last call and :data:`LIVE_INTERVAL_S` passed
        (the live feed's increment)."""
        now = clock()
        if self.version == self._taken_version or now - self._taken_at < LIVE_INTERVAL_S:
            return None
        self._taken_version = self.version
        self._taken_at = now
        return self.timeline(findings)


def live_timeline(timeline: CheckTimeline) -> dict[str, Any]:
    """A timeline as a dashboard increment carries it: the summary plus the array specs (the
    widget encodes their values as compact float32 bytes)."""
    return {"summary": timeline.summary(), "arrays": timeline.arrays()}


def _attempt_of(finding: Finding) -> int | None:
    fields = finding.fields or {}
    for key in ("first_attempt", "attempt"):
        value = fields.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def _larger(old: float, new: float) -> float:
    """Max where NaN means "no value yet" (``max(nan, x)`` would depend on argument order)."""
    if math.isnan(old):
        return new
    if math.isnan(new):
        return old
    return max(old, new)


def _smaller(old: float, new: float) -> float:
    if math.isnan(old):
        return new
    if math.isnan(new):
        return old
    return min(old, new)


def _fold(row: list[float], half: int, merge: Any) -> None:
    for j in range(half):
        row[j] = merge(row[2 * j], row[2 * j + 1])
    for j in range(half, len(row)):
        row[j] = math.nan
