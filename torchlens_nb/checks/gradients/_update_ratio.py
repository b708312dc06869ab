"""Weight-update ratios: the S-B snapshot, the S-C measurement, and the update-ratio check.

The update ratio of a parameter is ``||w_after - w_before|| / ||w_before||`` for one optimizer
step, measured at S-C (after the write) against a copy taken at S-B (just before it). The
lr-normalised column divides by the param group's learning rate read at S-B, so runs with
different schedules compare. A weight whose norm is 0 has no defined ratio: its ratio is None
(unknown), never 0 or "fine".

A snapshot copies every roster parameter (``session.estimated_snapshot_bytes``), so it is taken
on a schedule, every ``every`` accepted steps (first on the first one). A sampled step costs one
copy, three batched norms/subtractions and one host read at S-C.

On the CPU the snapshot's tensors are kept between sampled steps and copied into (a fresh copy
of GPT-2 small's 475 MiB is 122k page faults: measured side by side on one thread, a sampled
step took 2.08x a bare one with a fresh copy, the page faults and the allocator churn they
leave in the steps after it, and 1.08x with the kept one); they are freed when the session
detaches. On an accelerator the copy is made afresh each time: its caching allocator reuses the
block, and the memory stays free for activations between samples.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from ..._validate import check_int, is_number
from ...errors import DiagnosticArgumentError
from ...report import Finding, Where
from ...report._checks import Action
from ..distributed._dtensor import is_dtensor
from ..scans._norms import device_norms, read_host
from ..session._check import Check
from ..session._evidence import Attempt
from ..session._params import Roster
from ..session._window import Emission, SustainedWindow, validate_window

MAX_EPISODES = 64
"""Out-of-band episodes kept as rows (later ones are counted in the window, not listed)."""


@dataclass(frozen=True)
class UpdateSample:
    """Norms of one sampled optimizer step, per roster parameter."""

    attempt: int
    weight_norms: tuple[float, ...]
    """``||w_before||`` per roster index."""
    delta_norms: tuple[float, ...]
    """``||w_after - w_before||`` per roster index."""
    lrs: tuple[float, ...]
    """Learning rate of each param group at S-B."""

    def ratio(self, index: int) -> float | None:
        """Raw update ratio of roster parameter ``index``; None when undefined."""
        weight = self.weight_norms[index]
        if weight == 0.0 or not math.isfinite(weight):
            return None
        return self.delta_norms[index] / weight

    def group_ratio(self, members: tuple[int, ...]) -> float | None:
        """``sqrt(sum ||dw||^2) / sqrt(sum ||w||^2)`` over a param group."""
        weight = math.sqrt(sum(self.weight_norms[i] ** 2 for i in members))
        if weight == 0.0 or not math.isfinite(weight):
            return None
        return math.sqrt(sum(self.delta_norms[i] ** 2 for i in members)) / weight


def lr_normalized(ratio: float | None, lr: float) -> float | None:
    """``ratio / lr``; None when either is undefined or the lr is 0."""
    return None if ratio is None or lr == 0.0 else ratio / lr


class UpdateSampler:
    """Snapshot at S-B, measure at S-C, on a schedule of accepted steps."""

    def __init__(self, roster: Roster, every: int) -> None:
        check_int(
            "every", every, low=1, expect=">= 1 accepted steps", hint="every=1 samples each step"
        )
        self._roster = roster
        self.every = every
        self._snapshot: list[torch.Tensor] | None = None
        self._kept: list[torch.Tensor] = []
        """The CPU snapshot's tensors, kept between sampled steps (empty elsewhere)."""
        self._indices: tuple[int, ...] = ()
        self._lrs: tuple[float, ...] = ()
        self._attempt = -1

    def before_write(
        self, attempt: Attempt, accepted: int, optimizer: torch.optim.Optimizer
    ) -> None:
        """S-B: copy the parameters when this step is due (``accepted % every == 0``)."""
        self._snapshot = None
        if accepted % self.every:
            return
        self._indices = self._roster.optimized
        if not self._indices:  # nothing trainable in the optimizer (the roster check says so)
            return
        tensors = self._roster.tensors
        with torch.no_grad():
            self._snapshot = self._copy([tensors[i].detach() for i in self._indices])
        self._lrs = tuple(float(group["lr"]) for group in optimizer.param_groups)
        self._attempt = attempt.index

    def after_write(self) -> UpdateSample | None:
        """S-C: measure the sampled step (one host read); None when this step was not due."""
        if self._snapshot is None:
            return None
        snapshot, self._snapshot = self._snapshot, None
        tensors = self._roster.tensors
        with torch.no_grad():
            before = device_norms(snapshot, self._indices)
            torch._foreach_sub_(snapshot, [tensors[i].detach() for i in self._indices])
            delta = device_norms(snapshot, self._indices)
        values = read_host([n for _, n in before] + [n for _, n in delta])
        count, length = len(snapshot), len(self._roster)
        weight = _reorder(before, values[:count], length)
        moved = _reorder(delta, values[count:], length)
        return UpdateSample(self._attempt, weight, moved, self._lrs)

    def _copy(self, sources: list[torch.Tensor]) -> list[torch.Tensor]:
        """A copy of ``sources``; plain CPU tensors are copied into the kept snapshot."""
        if not all(s.device.type == "cpu" and not is_dtensor(s) for s in sources):
            return [s.clone() for s in sources]
        kept = self._kept
        if len(kept) != len(sources) or any(
            k.shape != s.shape or k.dtype != s.dtype for k, s in zip(kept, sources)
        ):
            self._kept = [s.clone() for s in sources]
            return list(self._kept)
        torch._foreach_copy_(kept, sources)
        return list(kept)

    def discard(self) -> None:
        self._snapshot = None

    def release(self) -> None:
        """Free the kept snapshot (the session detaches)."""
        self._snapshot = None
        self._kept = []


def _reorder(groups: Any, values: list[float], length: int) -> tuple[float, ...]:
    """Values by roster index (NaN for parameters the snapshot did not hold)."""
    ordered = [math.nan] * length
    cursor = 0
    for positions, _ in groups:
        for position in positions:
            ordered[position] = values[cursor]
            cursor += 1
    return tuple(ordered)


class UpdateRatioCheck(Check):
    """Raw and lr-normalised update ratios per parameter and param group (site S-C).

    Collects by default. With ``band=(low, high)`` a parameter whose raw ratio falls outside the
    band on ``min_hits`` of its last ``window`` sampled steps yields ``update_ratio_out_of_band``.
    Each episode (a parameter's window sustained, until it no longer is) is its own row, with
    the ratio of its own most out-of-band sample, not the latest one. There is no default band:
    AdamW's healthy first steps move 0.02-std embeddings by 0.027-0.038 of their norm (a 2-block
    GPT, lr 1e-3; ``tests/stability``), above the 1e-2 often quoted for the steady state.
    """

    name = "update_ratio"
    site = "S-C"

    def __init__(
        self,
        roster: Roster,
        *,
        every: int,
        band: tuple[float, float] | None,
        window: int,
        min_hits: int,
        action: Action,
    ) -> None:
        validate_window(window, min_hits)
        if band is not None and not (
            isinstance(band, (tuple, list))
            and len(band) == 2
            and all(is_number(b) for b in band)
            and 0 <= band[0] < band[1]
        ):
            raise DiagnosticArgumentError(
                f"band must be (low, high) with 0 <= low < high, got {band!r}; e.g. (1e-6, 1e-1) "
                "(AdamW's healthy first steps reach 0.038)."
            )
        super().__init__(
            roster, action, {"every": every, "band": band, "window": window, "min_hits": min_hits}
        )
        self.band = band
        self.last: dict[int, tuple[float | None, float | None, int]] = {}
        self.unknown = 0
        self._windows: dict[int, SustainedWindow] = {}
        self._emission = Emission(window)
        self._episodes: list[dict[str, Any]] = []
        """One row per episode, in the order they started (at most ``MAX_EPISODES``)."""
        self._open: dict[int, dict[str, Any]] = {}
        """Roster index -> the row of its episode still sustained."""

    def on_written(self, attempt: Attempt, sample: UpdateSample | None) -> Finding | None:
        if sample is None:
            return None
        self.evaluations += 1
        hits = []
        for index in self.roster.optimized:
            info = self.roster.infos[index]
            if info.group is None or info.group >= len(sample.lrs):
                continue
            ratio = sample.ratio(index)
            lr = sample.lrs[info.group]
            self.last[info.index] = (ratio, lr_normalized(ratio, lr), attempt.index)
            self.unknown += ratio is None
            if self.band is not None and ratio is not None:
                is_out = not self.band[0] <= ratio <= self.band[1]
                window = self._windows.get(index)
                if window is None:
                    window = self._windows[index] = SustainedWindow(
                        self.options["window"], self.options["min_hits"]
                    )
                if window.push(is_out):
                    self._extend_episode(info.index, attempt.index, ratio, lr)
                else:
                    self._open.pop(info.index, None)
                hits.append(is_out)
        if self.band is None:
            return None
        is_sustained = any(w.hits >= w.min_hits for w in self._windows.values())
        if self.is_due(self._emission, is_sustained, not any(hits)):
            return self.act(self.findings()[0])
        return None

    def _extend_episode(self, index: int, attempt: int, ratio: float, lr: float) -> None:
        """Open an episode for ``index`` or move its peak to ``ratio`` when further out."""
        assert self.band is not None
        row = self._open.get(index)
        if row is None:
            if len(self._episodes) >= MAX_EPISODES:
                return
            row = {
                "param": self.roster.infos[index].name,
                "first_attempt": attempt,
                "last_attempt": attempt,
                "update_ratio": ratio,
                "update_ratio_lr_normalized": lr_normalized(ratio, lr),
                "peak_attempt": attempt,
                "stage": "post_clip_applied",
                "scale_provenance": "unscaled",
            }
            self._open[index] = row
            self._episodes.append(row)
            return
        row["last_attempt"] = attempt
        if _distance(ratio, self.band) > _distance(row["update_ratio"], self.band):
            row.update(
                update_ratio=ratio,
                update_ratio_lr_normalized=lr_normalized(ratio, lr),
                peak_attempt=attempt,
            )

    def findings(self) -> list[Finding]:
        if not self._episodes or self.band is None:
            return []
        rows = [dict(row) for row in self._episodes]
        names = list(dict.fromkeys(row["param"] for row in rows))
        low, high = self.band
        return [
            Finding(
                "update_ratio_out_of_band",
                "warning",
                f"{len(names)} parameter(s) had an update ratio outside [{low:g}, {high:g}] on "
                f">= {self.options['min_hits']} of {self.options['window']} sampled steps "
                f"({len(rows)} episode(s); each row holds its episode's most out-of-band "
                "ratio): "
                + ", ".join(
                    f"{row['param']} {row['update_ratio']:.3g} at attempt {row['peak_attempt']}"
                    for row in rows[:5]
                )
                + (" ..." if len(rows) > 5 else ""),
                where=Where(module=rows[0]["param"].rpartition(".")[0]),
                remedy="Compare the lr-normalised column across param groups; a ratio far above "
                "the band usually means the learning rate is too high for that group.",
                fields={"code": "update_ratio_out_of_band", "params": rows, "band": [low, high]},
            )
        ]


def _distance(ratio: float, band: tuple[float, float]) -> float:
    """How far outside ``band`` a ratio lies, as a factor (0 inside)."""
    low, high = band
    if ratio > high:
        return ratio / high if high > 0 else math.inf
    if ratio < low:
        return low / ratio if ratio > 0 else math.inf
    return 0.0
