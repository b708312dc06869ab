"""Per-attempt, per-param-group numbers for the report's ``series`` table and the live chart.

Rows hold host numbers the checks already read (the S-A norms of the attempt, the sampled update
ratios): building them costs no device work. ``grad_norm`` is the group's total pre-clip norm
divided by the scale it carries when that scale is known (``grad_norm_raw`` keeps the value as
read); with an unknown scale it stays raw and says so in ``grad_scale_provenance``. ``loss`` is
the attempt's loss read at the step site (``_loss.py``; None when no backward root was seen), the
same on every group's row.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any

from ..gradients._update_ratio import UpdateSample, lr_normalized
from ._evidence import Attempt
from ._params import Roster

MAX_SERIES_ROWS = 4096
"""Rows kept (the oldest are dropped): 4096 rows are 512 attempts of an 8-group optimizer."""

SERIES_COLUMNS = (
    "attempt",
    "global_step",
    "group",
    "status",
    "grad_norm",
    "grad_norm_raw",
    "grad_stage",
    "grad_scale_provenance",
    "update_ratio",
    "update_ratio_lr_normalized",
    "lr",
    "loss",
)


class Series:
    """Bounded rows plus the rows added since the dashboard last took them."""

    def __init__(self, roster: Roster, loss_scale: float | None) -> None:
        self._roster = roster
        self._loss_scale = loss_scale
        self.rows: deque[dict[str, Any]] = deque(maxlen=MAX_SERIES_ROWS)
        self._by_attempt: dict[int, list[dict[str, Any]]] = {}
        self.fresh: list[dict[str, Any]] = []
        self.is_feeding = False
        """Keep ``fresh`` rows only while a dashboard takes them."""

    def add_attempt(self, attempt: Attempt) -> None:
        """One row per param group from the attempt's S-A norms (None when not measured)."""
        divisor = {"gradscaler": attempt.scale, "explicit": self._loss_scale, "unscaled": 1.0}.get(
            attempt.scale_provenance
        )
        rows = []
        for group, members in enumerate(self._roster.group_members()):
            raw = _total(attempt.final_norms, members) if attempt.has_norms else None
            row = {
                "attempt": attempt.index,
                "global_step": attempt.global_step,
                "group": group,
                "status": attempt.status,
                "grad_norm_raw": raw,
                "grad_norm": raw if raw is None or not divisor else raw / divisor,
                "grad_stage": attempt.stage,
                "grad_scale_provenance": attempt.scale_provenance,
                "update_ratio": None,
                "update_ratio_lr_normalized": None,
                "lr": None,
                "loss": attempt.loss,
            }
            rows.append(row)
        self._remember(attempt.index, rows)

    def set_status(self, attempt: Attempt) -> None:
        for row in self._by_attempt.get(attempt.index, ()):
            row["status"] = attempt.status

    def add_update(self, attempt: Attempt, sample: UpdateSample | None) -> None:
        """Fill the update-ratio columns of the attempt's rows from a sampled step."""
        if sample is None:
            return
        for row in self._by_attempt.get(attempt.index, ()):
            members = self._roster.group_members()[row["group"]]
            ratio = sample.group_ratio(members)
            lr = sample.lrs[row["group"]]
            row.update(
                update_ratio=ratio, update_ratio_lr_normalized=lr_normalized(ratio, lr), lr=lr
            )

    def take_fresh(self) -> list[dict[str, Any]]:
        """The rows added since the last call (the dashboard's increment)."""
        fresh, self.fresh = self.fresh, []
        return [dict(row) for row in fresh]

    def _remember(self, attempt_index: int, rows: list[dict[str, Any]]) -> None:
        if len(self.rows) + len(rows) > MAX_SERIES_ROWS:
            for _ in range(len(rows)):
                if self.rows:
                    dropped = self.rows.popleft()
                    self._by_attempt.pop(dropped["attempt"], None)
        self.rows.extend(rows)
        self._by_attempt[attempt_index] = rows
        if self.is_feeding:
            self.fresh.extend(rows)
            del self.fresh[:-MAX_SERIES_ROWS]


def _total(norms: dict[int, float], members: tuple[int, ...]) -> float | None:
    present = [norms[i] for i in members if i in norms]
    if not present:
        return None
    total = math.hypot(*present)  # one C call; hypot(inf, nan) is inf, a NaN norm stays NaN
    return math.nan if math.isinf(total) and any(math.isnan(n) for n in present) else total
