"""The non-finite gradient check: collect at S-A, raise at S-B before the weights are written.

At S-A a non-finite gradient is only COLLECTED: under fp16 + GradScaler it is the mechanism
working (the scaler skips the attempt and S-B never fires; those attempts are counted as
``skipped_by_scaler``). At S-B, the last point before ``optimizer.step()`` writes, a non-finite
pre-clip gradient in the attempt RAISES ``CheckViolationError`` (default action): without a
scaler (fp32, bf16) one NaN would otherwise reach every parameter through the optimizer.

The finding names the culprit AND the clipping collateral. ``clip_grad_norm_`` without
``error_if_nonfinite=True`` computes a non-finite total norm: with an Inf (and no NaN) its clip
coefficient is 0, which ZEROES every healthy gradient and turns the Inf into NaN; with a NaN the
coefficient is NaN, which poisons every gradient. ``clipping_collateral`` counts those healthy
gradients (finite and non-zero at S-A), and ``observed_at_step_site`` counts what the step site
actually holds (zeroed / non-finite / intact), read with one batched norm on this raise path
only. When ``smear_min_params`` or more parameters are non-finite the NaN has spread through the
backward and no single parameter is to blame: ``attribution="smeared"`` and ``culprit`` is None.
"""

from __future__ import annotations

import math
from typing import Any

from ..errors import DiagnosticArgumentError
from ..report import Finding, Where
from ..report._checks import Action
from ._check import Check
from ._evidence import Attempt
from ._params import Roster
from ._scan import device_norms, read_host

MAX_EVENTS = 64
"""Events kept in full; later ones are only counted (a loop that catches and goes on)."""

_REMEDY = (
    "Skip or re-run this batch. To stop at the clip without the kit, pass "
    "error_if_nonfinite=True to torch.nn.utils.clip_grad_norm_; to find where the value "
    "was born, trace this batch with save_grads=True and run "
    "tl.debug.bisect_nan_backward(trace)."
)


class NonfiniteGradCheck(Check):
    """Non-finite pre-clip gradients: collected at S-A, raised at S-B (pre-write)."""

    name = "nonfinite_grad"
    site = "S-A"
    needs_norms = True

    def __init__(self, roster: Roster, *, action: Action, smear_min_params: int) -> None:
        if smear_min_params < 2:
            raise DiagnosticArgumentError(
                f"smear_min_params must be >= 2 (one non-finite parameter is isolated by "
                f"definition), got {smear_min_params}."
            )
        super().__init__(roster, action, {"smear_min_params": smear_min_params})
        self.events: list[dict[str, Any]] = []
        self.events_dropped = 0
        self.skipped_by_scaler = 0

    def on_skipped(self, attempt: Attempt) -> None:
        self.skipped_by_scaler += bool(attempt.nonfinite())

    def on_attempt(self, attempt: Attempt) -> Finding | None:
        self.evaluations += 1
        culprits = attempt.nonfinite()
        if not culprits:
            return None
        event = self._event(attempt, culprits)
        if len(self.events) < MAX_EVENTS:
            self.events.append(event)
        else:
            self.events_dropped += 1
        return self.act(self._finding(event))

    def _event(self, attempt: Attempt, culprits: list[int]) -> dict[str, Any]:
        infos = self.roster.infos
        healthy = [i for i, n in attempt.final_norms.items() if math.isfinite(n) and n > 0]
        has_nan = any(math.isnan(attempt.final_norms[i]) for i in culprits)
        is_smeared = len(culprits) >= self.options["smear_min_params"]
        return {
            "code": "nonfinite_grad",
            "attempt": attempt.index,
            "global_step": attempt.global_step,
            "backwards": [record.index for record in attempt.backwards],
            "params": [
                {
                    "param": infos[i].name,
                    "kind": "nan" if math.isnan(attempt.final_norms[i]) else "inf",
                    "first_backward": attempt.first_nonfinite_backward(i),
                }
                for i in culprits
            ],
            "culprit": None if is_smeared else infos[culprits[0]].name,
            "attribution": "smeared" if is_smeared else "isolated",
            "healthy_params": len(healthy),
            "clipping_collateral": len(healthy),
            "clipping_collateral_effect": "nan_poisoned" if has_nan else "zeroed",
            "observed_at_step_site": self._observe(healthy),
            "stage": attempt.stage,
            "scale_provenance": attempt.scale_provenance,
            "action": self.action,
            "is_step_stopped": self.action == "raise",
        }

    def _observe(self, healthy: list[int]) -> dict[str, int]:
        """What the healthy gradients hold at S-B now (post-clip if the loop clipped)."""
        tensors = self.roster.tensors
        grads = [(i, tensors[i].grad) for i in healthy]
        present = [(i, g) for i, g in grads if g is not None]
        if not present:
            return {"zeroed": 0, "nonfinite": 0, "intact": 0}
        groups = device_norms([g for _, g in present], [i for i, _ in present])
        values = read_host([norms for _, norms in groups])
        zeroed = sum(v == 0.0 for v in values)
        nonfinite = sum(not math.isfinite(v) for v in values)
        return {
            "zeroed": zeroed,
            "nonfinite": nonfinite,
            "intact": len(values) - zeroed - nonfinite,
        }

    def _finding(self, event: dict[str, Any]) -> Finding:
        params = event["params"]
        if event["culprit"] is not None:
            subject = f"non-finite gradient ({params[0]['kind']}) in {event['culprit']}"
            where = Where(module=self.roster.infos[self._index(event["culprit"])].module)
        else:
            subject = (
                f"non-finite gradients in {len(params)} parameters (smeared through the "
                "backward; no single parameter is named)"
            )
            where = None
        stopped = (
            "optimizer.step() was stopped before it wrote: weights and optimizer state "
            "are unchanged"
            if event["is_step_stopped"]
            else f"action={event['action']}: the optimizer step was not stopped"
        )
        effect = "zeroed" if event["clipping_collateral_effect"] == "zeroed" else "turned into NaN"
        return Finding(
            "nonfinite_grad",
            "critical",
            f"{subject} at attempt {event['attempt']}; {stopped}. The clip recipe "
            f"(clip_grad_norm_ without error_if_nonfinite) would have {effect} "
            f"{event['clipping_collateral']} healthy gradient(s).",
            where=where,
            remedy=_REMEDY,
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
