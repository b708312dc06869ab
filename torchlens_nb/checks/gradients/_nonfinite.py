"""The non-finite gradient check: collect at S-A, raise at S-B before the weights are written.

At S-A a non-finite gradient is only COLLECTED: under fp16 + GradScaler it is the mechanism
working (the scaler skips the attempt and S-B never fires; those attempts are counted as
``skipped_by_scaler``). At S-B, the last point before ``optimizer.step()`` writes, a non-finite
value in a gradient the optimizer is about to use RAISES ``CheckViolationError`` (default
action): without a scaler (fp32, bf16) one NaN would otherwise reach every parameter through the
optimizer. "About to use" is exact: every parameter of the optimizer's param groups at that step
whose ``.grad`` is set, judged on the value it holds then (``Attempt.step_norms``).

The finding names the culprit AND the clipping collateral. The culprit is the parameter whose
gradient first ARRIVED non-finite (S-A, pre-clip), the optimizer's or not: a NaN in a parameter
outside the optimizer reaches every optimizer gradient through ``clip_grad_norm_`` over
``model.parameters()``. ``clip_grad_norm_`` without ``error_if_nonfinite=True`` computes a
non-finite total norm: with an Inf (and no NaN) its clip coefficient is 0, which ZEROES every
healthy gradient and turns the Inf into NaN; with a NaN the coefficient is NaN, which poisons
every gradient. ``clipping_collateral`` counts those healthy gradients (finite and non-zero at
S-A), and ``observed_at_step_site`` counts what the optimizer's gradients hold at the step site
(zeroed / non-finite / intact). When ``smear_min_params`` or more parameters are non-finite the
NaN has spread through the backward and no single parameter is to blame:
``attribution="smeared"`` and ``culprit`` is None.

The next step named in the message replays the batch with ``tl.debug.investigate``, which finds
a forward-born NaN as well as a backward-born one: ``err.investigate()`` when the session kept
the batch (``session.step(inputs=...)``), else the call to type with the batch.

Under FSDP2 (sharded parameters) a gradient that arrived non-finite on this rank raises even when
this rank's shard is finite at the step: the reduce-scatter has put the value into another rank's
shard, which that rank's optimizer is about to write (``_sharded.py``).

Attempts that never reached the write are reported by who skipped them: the GradScaler (info:
the mechanism working), the loop's own guard (warning: non-finite gradients arrived and the loop
dropped them), or unknown (no ``scaler=`` declared). Attempts whose gradients arrived
non-finite but reached the step finite (the loop repaired them, or the parameter is outside the
optimizer) are a warning too: nothing non-finite was written, but something produced it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Literal

import torch.distributed as dist

from ..._validate import check_int
from ...report import Finding, Where
from ...report._checks import Action
from ..session._check import Check
from ..session._evidence import Attempt
from ..session._params import Roster
from ..session._tally import Tally

MAX_EVENTS = 64
"""Events kept in full; later ones are only counted (a loop that catches and goes on)."""

INVESTIGATE_KEPT = "err.investigate()"
INVESTIGATE_CALL = "tl.debug.investigate(model, batch, loss_fn=...)"


def _remedy(next_step: str) -> str:
    replay = (
        f"{next_step} replays this attempt's kept micro-batch on the untouched weights under its "
        "saved RNG state and names where the value was born, in the forward or the backward."
        if next_step == INVESTIGATE_KEPT
        else f"{next_step} replays a batch and names where the value was born, in the forward or "
        "the backward (or keep the batch with `with session.step(global_step=i, inputs=batch):` "
        "and call err.investigate())."
    )
    return (
        "Skip or re-run this batch. To stop at the clip without the kit, pass "
        "error_if_nonfinite=True to torch.nn.utils.clip_grad_norm_. " + replay
    )


class NonfiniteGradCheck(Check):
    """Non-finite gradients: collected at S-A, raised at S-B (pre-write)."""

    name = "nonfinite_grad"
    site = "S-A"
    needs_norms = True

    def __init__(self, roster: Roster, *, action: Action, smear_min_params: int) -> None:
        check_int(
            "smear_min_params",
            smear_min_params,
            low=2,
            expect=">= 2 (one non-finite parameter is isolated by definition)",
        )
        super().__init__(roster, action, {"smear_min_params": smear_min_params})
        self.events: list[dict[str, Any]] = []
        self.events_dropped = 0
        self.skipped_by_scaler = 0
        self._loop_skips = Tally(
            "nonfinite_grad_skipped_by_loop",
            "warning",
            lambda f: _skip_message(f, "the loop skipped them itself"),
            remedy="Nothing non-finite was written. Find what produces it: "
            + INVESTIGATE_CALL
            + " on the skipped batch.",
        )
        self._unknown_skips = Tally(
            "nonfinite_grad_skipped",
            "warning",
            lambda f: _skip_message(
                f,
                "they were skipped before any write, by the loop or by a GradScaler the "
                "session was not told about (pass scaler=your_scaler, or scaler=None)",
            ),
            remedy="Declare the scaler to tell the two apart; find what produces the value: "
            + INVESTIGATE_CALL
            + ".",
        )
        self._not_written = Tally(
            "nonfinite_grad_not_written",
            "warning",
            _not_written_message,
            remedy="Find what produces it: " + INVESTIGATE_CALL + ".",
        )

    def on_skipped(self, attempt: Attempt) -> None:
        culprits = attempt.nonfinite()
        if not culprits:
            return
        if attempt.skip_cause == "scaler":
            self.skipped_by_scaler += 1
            return
        tally = self._loop_skips if attempt.skip_cause == "loop" else self._unknown_skips
        tally.add(attempt.index, attempt.global_step, self._culprit_fields(attempt, culprits))

    def on_outside_steps(self, attempt: Attempt) -> None:
        culprits = attempt.nonfinite()
        if culprits:
            fields = self._culprit_fields(attempt, culprits)
            self._not_written.add(attempt.index, attempt.global_step, fields)

    def on_attempt(self, attempt: Attempt) -> Finding | None:
        self.evaluations += 1
        return self._judge(attempt)

    def on_reevaluated(self, attempt: Attempt) -> Finding | None:
        return self._judge(attempt)

    def _judge(self, attempt: Attempt) -> Finding | None:
        at_step = attempt.step_nonfinite()
        arrived = attempt.nonfinite()
        if not at_step and not (arrived and self.roster.is_sharded):
            if arrived:
                fields = self._culprit_fields(attempt, arrived)
                self._not_written.add(attempt.index, attempt.global_step, fields)
            return None
        event = self._event(attempt, arrived, at_step)
        if len(self.events) < MAX_EVENTS:
            self.events.append(event)
        else:
            self.events_dropped += 1
        return self.act(self._finding(event))

    def _culprit_fields(self, attempt: Attempt, culprits: list[int]) -> dict[str, Any]:
        ordered = sorted(culprits, key=lambda i: (attempt.first_nonfinite.get(i, -1), i))
        is_smeared = len(ordered) >= self.options["smear_min_params"]
        return {
            "culprit": None if is_smeared else self.roster.infos[ordered[0]].name,
            "attribution": "smeared" if is_smeared else "isolated",
            "nonfinite_params": [self.roster.infos[i].name for i in ordered[:8]],
            "nonfinite_param_count": len(ordered),
        }

    def _event(self, attempt: Attempt, arrived: list[int], at_step: list[int]) -> dict[str, Any]:
        infos = self.roster.infos
        norms = attempt.final_norms
        culprits = arrived or at_step
        culprits = sorted(culprits, key=lambda i: (attempt.first_nonfinite.get(i, -1), i))
        healthy = [i for i, n in norms.items() if math.isfinite(n) and n > 0]
        kinds = {i: _kind(norms.get(i), attempt.step_norms.get(i)) for i in culprits}
        has_nan = "nan" in kinds.values()
        is_smeared = len(culprits) >= self.options["smear_min_params"]
        culprit = None if is_smeared else culprits[0]
        optimized = set(self.roster.optimized)
        next_step = (
            INVESTIGATE_KEPT if attempt.has_replay and self.action == "raise" else INVESTIGATE_CALL
        )
        return {
            "code": "nonfinite_grad",
            "attempt": attempt.index,
            "global_step": attempt.global_step,
            "backwards": list(attempt.backward_indices),
            "params": [
                {
                    "param": infos[i].name,
                    "kind": kinds[i],
                    "first_backward": attempt.first_nonfinite_backward(i),
                }
                for i in culprits
            ],
            "culprit": None if culprit is None else infos[culprit].name,
            "culprit_in_optimizer": None if culprit is None else culprit in optimized,
            "culprit_site": "S-A" if arrived else "S-B",
            # under DDP every rank's step site reads the all-reduced gradient
            "is_all_reduced": dist.is_available() and dist.is_initialized(),
            "attribution": "smeared" if is_smeared else "isolated",
            "first_nonfinite_micro_batch": attempt.first_nonfinite_micro_batch,
            "healthy_params": len(healthy),
            "clipping_collateral": len(healthy),
            "clipping_collateral_effect": "nan_poisoned" if has_nan else "zeroed",
            "observed_at_step_site": _observe(attempt.step_norms, healthy),
            "stage": attempt.stage,
            "scale_provenance": attempt.scale_provenance,
            "action": self.action,
            "is_step_stopped": self.action == "raise",
            "is_mid_step": attempt.is_mid_step,
            "has_kept_batch": attempt.has_replay,
            "next_step": next_step,
        }

    def _finding(self, event: dict[str, Any]) -> Finding:
        params = event["params"]
        if event["culprit"] is not None:
            subject = f"non-finite gradient ({params[0]['kind']}) in {event['culprit']}"
            if event["culprit_site"] == "S-B" and self.roster.is_sharded:
                subject += (
                    " in this rank's shard at the step site (it arrived finite on this rank: "
                    "the reduce-scatter brought it from another rank's gradient, or the loop "
                    "changed it between backward and step)"
                )
            elif event["culprit_site"] == "S-B" and event["is_all_reduced"]:
                subject += (
                    " at the step site (it arrived finite or unobserved on this rank: the "
                    "all-reduce brought it from another rank's gradient, or the loop changed it "
                    "between backward and step)"
                )
            elif event["culprit_site"] == "S-B":
                subject += (
                    " at the step site (it arrived finite or unobserved; the loop changed it "
                    "between backward and step)"
                )
            elif not event["culprit_in_optimizer"]:
                subject += (
                    " (not in the optimizer: clipping over every parameter spread it into the "
                    "gradients the optimizer uses)"
                )
            where = Where(module=self.roster.infos[self._index(event["culprit"])].module)
        else:
            subject = (
                f"non-finite gradients in {len(params)} parameters (smeared: the value reached "
                "them all through the forward or the backward; no single parameter is named)"
            )
            where = None
        if not event["is_step_stopped"]:
            stopped = f"action={event['action']}: the optimizer step was not stopped"
        elif event["is_mid_step"]:
            stopped = (
                "optimizer.step(closure) was stopped when it re-evaluated its closure, before it "
                "used this gradient; the optimizer had already written its own finite iterate of "
                "this step, so the weights are not the pre-step ones"
            )
        else:
            stopped = (
                "optimizer.step() was stopped before it wrote: weights and optimizer state "
                "are unchanged"
            )
        effect = "zeroed" if event["clipping_collateral_effect"] == "zeroed" else "turned into NaN"
        collateral = event["clipping_collateral"]
        clip = (
            f"would have {effect} {collateral} healthy gradient(s)"
            if collateral
            else "would have had no healthy gradient left to spoil (none was finite and non-zero)"
        )
        return Finding(
            "nonfinite_grad",
            "critical",
            f"{subject} at attempt {event['attempt']}; {stopped}. The clip recipe "
            f"(clip_grad_norm_ without error_if_nonfinite) {clip}.",
            where=where,
            remedy=_remedy(event["next_step"]),
            fields=event,
        )

    def _index(self, name: str) -> int:
        return next(info.index for info in self.roster.infos if info.name == name)

    def findings(self) -> list[Finding]:
        found = [self._finding(event) for event in self.events]
        if self.skipped_by_scaler:
            found.append(
                Finding(
                    "nonfinite_grad_skipped_by_scaler",
                    "info",
                    f"{self.skipped_by_scaler} attempt(s) had non-finite scaled gradients at S-A and "
                    "were skipped by the GradScaler before any write (the mechanism working).",
                    fields={
                        "code": "nonfinite_grad_skipped_by_scaler",
                        "attempts": self.skipped_by_scaler,
                    },
                )
            )
        for tally in (self._loop_skips, self._unknown_skips, self._not_written):
            finding = tally.finding()
            if finding is not None:
                found.append(finding)
        if self.events_dropped:
            found.append(
                Finding(
                    "nonfinite_grad_events_dropped",
                    "info",
                    f"{self.events_dropped} more attempt(s) with non-finite gradients were counted "
                    f"but not kept (the first {MAX_EVENTS} are above).",
                    fields={
                        "code": "nonfinite_grad_events_dropped",
                        "attempts": self.events_dropped,
                    },
                )
            )
        return found


def _kind(arrived: float | None, at_step: float | None) -> Literal["nan", "inf"]:
    """What a culprit's gradient held: as it arrived when it arrived non-finite (the clip then
    turns an inf into NaN), else as the step site read it (a value written after the
    backward)."""
    value = arrived if arrived is not None and not math.isfinite(arrived) else at_step
    return "nan" if value is None or math.isnan(value) else "inf"


def _observe(step_norms: Mapping[int, float], healthy: list[int]) -> dict[str, int]:
    """What the healthy gradients the optimizer uses hold at the step site (post-clip if the
    loop clipped)."""
    values = [step_norms[i] for i in healthy if i in step_norms]
    zeroed = sum(v == 0.0 for v in values)
    nonfinite = sum(not math.isfinite(v) for v in values)
    return {"zeroed": zeroed, "nonfinite": nonfinite, "intact": len(values) - zeroed - nonfinite}


def _skip_message(fields: Mapping[str, Any], who: str) -> str:
    culprit = fields["culprit"] or f"{fields['nonfinite_param_count']} parameters (smeared)"
    return (
        f"{fields['count']} attempt(s) had non-finite gradients (first in {culprit}) and {who}: "
        f"no optimizer step ran for them, nothing non-finite was written; first at attempt "
        f"{fields['first_attempt']}, last at attempt {fields['last_attempt']}."
    )


def _not_written_message(fields: Mapping[str, Any]) -> str:
    culprit = fields["culprit"] or f"{fields['nonfinite_param_count']} parameters (smeared)"
    return (
        f"{fields['count']} attempt(s) had gradients that arrived non-finite (first in "
        f"{culprit}) while every gradient the optimizer used was finite (the loop repaired or "
        f"dropped them, or the parameter is outside the optimizer): nothing non-finite was "
        f"written; first at attempt {fields['first_attempt']}, last at attempt "
        f"{fields['last_attempt']}."
    )
