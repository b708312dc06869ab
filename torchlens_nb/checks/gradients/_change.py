"""The change check: parameters that receive no gradient on a sustained window.

Primary evidence is the GRADIENT FACT at S-A: the parameter's gradient did not arrive in the
attempt (``grad is None``) or its accumulated norm is exactly 0. A parameter meeting it on
``min_hits`` of its last ``window`` attempts yields ``param_received_no_gradient``. Single
zero-gradient attempts are legitimate (MoE routing, untaken branches, embedding rows absent from
a batch), hence the window.

Parameter movement is NOT the detector: under default AdamW (weight_decay=0.01) every step
rescales every parameter, and Adam's moments keep a parameter moving for many steps after its
gradient stopped (``tests/checks/test_change_check.py`` shows both on a model whose first layer
stops receiving gradient). Movement, when the update sampler measured it, is attached to each
flagged parameter as a corroborating fact with its measured lag: how many attempts after its
gradient stopped it was still seen moving.

The finding names the whole cone of parameters upstream of where the gradient stopped; its
``follow_up`` points at ``tl.debug.grad_health``, whose ``is_frontier`` column resolves the layer.

One finding per EPISODE: an episode opens when the check emits (sustained while armed), lasts
while windows stay sustained, and closes when a clean window re-arms the check. A later episode
is a second finding (``fields["episode"]``), never folded into the first; the last
``MAX_EPISODES`` closed ones are kept, older ones counted.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from ...report import Finding, Where
from ...report._checks import Action
from ..session._check import Check
from ..session._evidence import Attempt
from ..session._params import Roster
from ..session._window import Emission, SustainedWindow, validate_window
from ._update_ratio import UpdateSample

_FOLLOW_UP = (
    "trace = tl.trace(model, batch, capture=tl.options.CaptureOptions("
    "save_grads=True, backward_ready=True)); trace.backward(loss); "
    "tl.debug.grad_health(trace)"
)


MAX_EPISODES = 16
"""Closed episodes kept in full (the open one is always kept)."""


class _ParamTrack:
    """Per-parameter state of the change check."""

    __slots__ = (
        "last_fact",
        "moved_after",
        "movement_last",
        "no_gradient_since",
        "seen_moving_at",
        "window",
    )

    def __init__(self, window: int, min_hits: int) -> None:
        self.window = SustainedWindow(window, min_hits)
        self.last_fact = "unmeasured"
        self.no_gradient_since: int | None = None
        self.movement_last: float | None = None
        self.seen_moving_at: int | None = None
        self.moved_after = 0


class _Episode:
    """One emitted episode: the parameters flagged in it and its attempt range."""

    __slots__ = ("first_attempt", "flagged", "last_attempt", "number", "rearmed_attempt", "rows")

    def __init__(self, number: int, attempt: int) -> None:
        self.number = number
        self.first_attempt = attempt
        self.last_attempt = attempt
        self.rearmed_attempt: int | None = None
        self.flagged: dict[int, int] = {}
        """Roster index -> attempt where its window first was sustained in this episode."""
        self.rows: list[dict[str, Any]] | None = None
        """Frozen at close; built from the live tracks while open."""


class ChangeCheck(Check):
    """``param_received_no_gradient`` on an M-of-N window of the gradient fact."""

    name = "change"
    site = "S-A"
    needs_norms = True

    def __init__(self, roster: Roster, *, window: int, min_hits: int, action: Action) -> None:
        validate_window(window, min_hits)
        super().__init__(roster, action, {"window": window, "min_hits": min_hits})
        self._tracks: dict[int, _ParamTrack] = {}
        self._emission = Emission(window)
        self._open: _Episode | None = None
        self._closed: deque[_Episode] = deque(maxlen=MAX_EPISODES)
        self._episodes = 0
        self._labels = ("pre_clip_unscaled", "unscaled")

    def _track(self, index: int) -> _ParamTrack:
        track = self._tracks.get(index)
        if track is None:
            track = self._tracks[index] = _ParamTrack(*self._window_options)
        return track

    @property
    def _window_options(self) -> tuple[int, int]:
        return self.options["window"], self.options["min_hits"]

    def on_attempt(self, attempt: Attempt) -> Finding | None:
        self.evaluations += 1
        self._labels = (attempt.stage, attempt.scale_provenance)
        any_hit = False
        sustained: list[int] = []
        for index in self.roster.optimized:
            fact = attempt.fact(index)
            if fact == "unmeasured":
                continue
            track = self._track(index)
            is_hit = fact in ("none", "zero")
            any_hit |= is_hit
            track.last_fact = fact
            if is_hit and track.no_gradient_since is None:
                track.no_gradient_since = attempt.index
            elif not is_hit:
                track.no_gradient_since = None
                track.seen_moving_at, track.moved_after = None, 0
            if track.window.push(is_hit):
                sustained.append(index)
        was_armed = self._emission.is_armed
        is_due = self.is_due(self._emission, bool(sustained), not any_hit)
        if self._open is not None and not was_armed and self._emission.is_armed:
            self._close_episode(attempt.index)
        if is_due:
            self._episodes += 1
            self._open = _Episode(self._episodes, attempt.index)
        if self._open is not None and sustained:
            self._open.last_attempt = attempt.index
            for index in sustained:
                self._open.flagged.setdefault(index, attempt.index)
        return self.act(self.findings()[-1]) if is_due else None

    def _close_episode(self, attempt: int) -> None:
        episode = self._open
        assert episode is not None
        episode.rearmed_attempt = attempt
        episode.rows = self._rows(episode)
        self._closed.append(episode)
        self._open = None

    def on_written(self, attempt: Attempt, sample: UpdateSample | None) -> Finding | None:
        """Corroboration only: record movement of parameters that currently get no gradient."""
        if sample is None:
            return None
        for index, track in self._tracks.items():
            ratio = sample.ratio(index)
            track.movement_last = ratio
            if track.no_gradient_since is not None and ratio:
                track.seen_moving_at = attempt.index
                track.moved_after += 1
        return None

    def _rows(self, episode: _Episode) -> list[dict[str, Any]]:
        rows = []
        for index, first in episode.flagged.items():
            track = self._tracks[index]
            lag = None
            if track.seen_moving_at is not None and track.no_gradient_since is not None:
                lag = track.seen_moving_at - track.no_gradient_since
            rows.append(
                {
                    "param": self.roster.infos[index].name,
                    "grad_fact": track.last_fact,
                    "hits": track.window.hits,
                    "window": track.window.length,
                    "first_flagged_attempt": first,
                    "no_gradient_since_attempt": track.no_gradient_since,
                    "movement_ratio_last": track.movement_last,
                    "movement_seen_after_no_gradient": track.moved_after,
                    "movement_lag_attempts": lag,
                    "stage": self._labels[0],
                    "scale_provenance": self._labels[1],
                }
            )
        return rows

    def findings(self) -> list[Finding]:
        episodes = list(self._closed) + ([self._open] if self._open is not None else [])
        dropped = self._episodes - len(episodes)
        return [self._finding(episode, dropped) for episode in episodes if episode.flagged]

    def _finding(self, episode: _Episode, dropped: int) -> Finding:
        rows = episode.rows if episode.rows is not None else self._rows(episode)
        names = [str(row["param"]) for row in rows]
        window, min_hits = self._window_options
        moving = sum(1 for row in rows if row["movement_seen_after_no_gradient"])
        corroboration = (
            f" {moving} of them still moved after their gradient stopped "
            "(optimizer momentum / weight decay), so parameter movement alone "
            "would not have named them."
            if moving
            else ""
        )
        span = (
            f" (episode {episode.number}: attempts {episode.first_attempt}-"
            f"{episode.last_attempt}, re-armed at {episode.rearmed_attempt})"
            if episode.rearmed_attempt is not None
            else f" (episode {episode.number}, since attempt {episode.first_attempt})"
            if episode.number > 1
            else ""
        )
        return Finding(
            "param_received_no_gradient",
            "warning",
            f"{len(names)} parameter(s) received no gradient (None or norm 0) on >= {min_hits} "
            f"of {window} attempts: "
            + ", ".join(names[:5])
            + (f" and {len(names) - 5} more" if len(names) > 5 else "")
            + f"{span}."
            + corroboration,
            where=Where(module=self.roster.infos[next(iter(episode.flagged))].module),
            remedy="The list is the cone upstream of where the gradient stops; the frontier "
            "column of grad_health names the layer: " + _FOLLOW_UP,
            fields={
                "code": "param_received_no_gradient",
                "params": rows,
                "follow_up": "tl.debug.grad_health",
                "window": window,
                "min_hits": min_hits,
                "episode": episode.number,
                "first_attempt": episode.first_attempt,
                "last_attempt": episode.last_attempt,
                "rearmed_attempt": episode.rearmed_attempt,
                "earlier_episodes_dropped": dropped,
            },
        )
