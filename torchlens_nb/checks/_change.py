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
"""

from __future__ import annotations

from ..report import Finding, Where
from ..report._checks import Action
from ._check import Check
from ._evidence import Attempt
from ._params import Roster
from ._update_ratio import UpdateSample
from ._window import Emission, SustainedWindow, validate_window

_FOLLOW_UP = (
    "trace = tl.trace(model, batch, capture=tl.options.CaptureOptions("
    "save_grads=True, backward_ready=True)); trace.backward(loss); "
    "tl.debug.grad_health(trace)"
)


class _ParamTrack:
    """Per-parameter state of the change check."""

    __slots__ = (
        "first_flagged",
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
        self.first_flagged: int | None = None
        self.movement_last: float | None = None
        self.seen_moving_at: int | None = None
        self.moved_after = 0


class ChangeCheck(Check):
    """``param_received_no_gradient`` on an M-of-N window of the gradient fact."""

    name = "change"
    site = "S-A"
    needs_norms = True

    def __init__(self, roster: Roster, *, window: int, min_hits: int, action: Action) -> None:
        validate_window(window, min_hits)
        super().__init__(roster, action, {"window": window, "min_hits": min_hits})
        self._tracks = [_ParamTrack(window, min_hits) for _ in range(len(roster))]
        self._emission = Emission(window)
        self._labels = ("pre_clip_unscaled", "unscaled")

    def on_attempt(self, attempt: Attempt) -> Finding | None:
        self.evaluations += 1
        self._labels = (attempt.stage, attempt.scale_provenance)
        any_hit = False
        any_sustained = False
        for index, track in enumerate(self._tracks):
            fact = attempt.fact(index)
            if fact == "unmeasured":
                continue
            is_hit = fact in ("none", "zero")
            any_hit |= is_hit
            track.last_fact = fact
            if is_hit and track.no_gradient_since is None:
                track.no_gradient_since = attempt.index
            elif not is_hit:
                track.no_gradient_since = None
            if track.window.push(is_hit):
                any_sustained = True
                if track.first_flagged is None:
                    track.first_flagged = attempt.index
        if self.is_due(self._emission, any_sustained, not any_hit):
            return self.act(self.findings()[0])
        return None

    def on_written(self, attempt: Attempt, sample: UpdateSample | None) -> Finding | None:
        """Corroboration only: record movement of parameters that currently get no gradient."""
        if sample is None:
            return None
        for index, track in enumerate(self._tracks):
            ratio = sample.ratio(index)
            track.movement_last = ratio
            if track.no_gradient_since is not None and ratio:
                track.seen_moving_at = attempt.index
                track.moved_after += 1
        return None

    def findings(self) -> list[Finding]:
        flagged = [(i, t) for i, t in enumerate(self._tracks) if t.first_flagged is not None]
        if not flagged:
            return []
        rows = []
        for index, track in flagged:
            lag = None
            if track.seen_moving_at is not None and track.no_gradient_since is not None:
                lag = track.seen_moving_at - track.no_gradient_since
            rows.append(
                {
                    "param": self.roster.infos[index].name,
                    "grad_fact": track.last_fact,
                    "hits": track.window.hits,
                    "window": track.window.length,
                    "first_flagged_attempt": track.first_flagged,
                    "no_gradient_since_attempt": track.no_gradient_since,
                    "movement_ratio_last": track.movement_last,
                    "movement_seen_after_no_gradient": track.moved_after,
                    "movement_lag_attempts": lag,
                    "stage": self._labels[0],
                    "scale_provenance": self._labels[1],
                }
            )
        names = [str(row["param"]) for row in rows]
        window, min_hits = self.options["window"], self.options["min_hits"]
        moving = sum(1 for row in rows if row["movement_seen_after_no_gradient"])
        corroboration = (
            f" {moving} of them still moved after their gradient stopped "
            "(optimizer momentum / weight decay), so parameter movement alone "
            "would not have named them."
            if moving
            else ""
        )
        return [
            Finding(
                "param_received_no_gradient",
                "warning",
                f"{len(names)} parameter(s) received no gradient (None or norm 0) on >= {min_hits} "
                f"of {window} attempts: "
                + ", ".join(names[:5])
                + (f" and {len(names) - 5} more." if len(names) > 5 else ".")
                + corroboration,
                where=Where(module=self.roster.infos[flagged[0][0]].module),
                remedy="The list is the cone upstream of where the gradient stops; the frontier "
                "column of grad_health names the layer: " + _FOLLOW_UP,
                fields={
                    "code": "param_received_no_gradient",
                    "params": rows,
                    "follow_up": "tl.debug.grad_health",
                    "window": window,
                    "min_hits": min_hits,
                },
            )
        ]
