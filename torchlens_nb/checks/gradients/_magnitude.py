"""The gradient magnitude check (off by default; armed only by ``register_magnitude_check()``).

Absolute magnitude evidence lives only at S-A, before clipping: at the step site clipping pins
the total norm to ``max_norm``, so an "exploding" check mounted there cannot fire. The check
judges each parameter's pre-clip norm, divided by the scale it carries (the GradScaler scale
recorded for its backward, or the caller's ``loss_scale``): above ``high`` is exploding, strictly
between 0 and ``low`` vanishing (exactly 0 is the change check's gradient fact). With an
undeclared scaler the scale is unknown and the verdict is UNKNOWN, never a pass.

Registered with ``site="S-B"``, the check reads the step-site total norm (one extra batched norm
and host read per attempt) and compares it with the S-A total: when clipping lowered it the
attempt's magnitude evidence is censored and counted in a typed unavailable entry
(``censored_by_clipping``); unclipped attempts are judged on their S-A norms, which equal the
step-site ones.

A gradient that is zero by construction is never "vanishing": softmax is invariant to a
constant added to every key of a query, so an attention key projection's bias gets exactly zero
gradient, and so does a bias that a per-feature normalisation (BatchNorm) subtracts away. In
float32 such a gradient is round-off, not zero (measured on a 2-block GPT with key biases:
1e-9-1e-8 of its sibling weight's gradient norm). A parameter whose norm is below
:data:`ROUNDOFF_RATIO` of the largest gradient norm of another parameter of its own module is
counted as zero by construction (``zero_by_construction`` in the report), not judged: a
vanishing gradient shrinks a module's weight and bias together.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from ..._validate import is_number
from ...errors import DiagnosticArgumentError
from ...report import Finding, Unavailable, Where
from ...report._checks import Action
from ..scans._norms import device_norms, read_host
from ..session._check import Check
from ..session._evidence import Attempt
from ..session._params import Roster
from ..session._window import Emission, SustainedWindow, validate_window

ROUNDOFF_RATIO = 1e-5
"""A gradient norm below this fraction of a sibling parameter's (same module) is round-off of a
gradient that is zero by construction (float32's epsilon is 1.2e-7; sums of a few thousand
terms stay within 1e-5)."""

CLIP_TOLERANCE = 1e-3
"""Relative drop of the total norm between S-A and S-B that counts as clipping (float32
round-off of a 200-tensor norm stays below 1e-5)."""


class MagnitudeCheck(Check):
    """``grad_norm_exploding`` / ``grad_norm_vanishing`` on sustained windows."""

    name = "magnitude"
    needs_norms = True

    def __init__(
        self,
        roster: Roster,
        *,
        high: float,
        low: float,
        window: int,
        min_hits: int,
        site: Literal["S-A", "S-B"],
        loss_scale: float | None,
        action: Action,
    ) -> None:
        validate_window(window, min_hits)
        if not (is_number(low) and is_number(high) and 0 < low < high):
            raise DiagnosticArgumentError(
                f"need 0 < low < high, got low={low}, high={high}; defaults are 1e-7 and 1e4."
            )
        if site not in ("S-A", "S-B"):
            raise DiagnosticArgumentError(
                f"site must be 'S-A' (pre-clip, the default) or 'S-B', got {site!r}."
            )
        super().__init__(
            roster,
            action,
            {"high": high, "low": low, "window": window, "min_hits": min_hits, "site": site},
        )
        self.site = site
        self._loss_scale = loss_scale
        self._windows: dict[int, SustainedWindow] = {}
        self._emission = Emission(window)
        self._flagged: dict[int, dict[str, Any]] = {}
        self.unknown_attempts = 0
        self.censored_attempts = 0
        self.zero_by_construction: dict[int, int] = {}
        """Roster index -> attempts whose norm was round-off next to a sibling's."""
        self._siblings: dict[int, tuple[int, ...]] = {}
        self._siblings_of = 0

    def on_attempt(self, attempt: Attempt) -> Finding | None:
        divisor = self._divisor(attempt)
        if divisor is None:
            self.unknown_attempts += 1
            return None
        final = attempt.final_norms
        norms = {i: final[i] / divisor for i in self.roster.optimized if i in final}
        if self.site == "S-B" and self._is_clipped(norms):
            self.censored_attempts += 1
            return None
        self.evaluations += 1
        high, low = self.options["high"], self.options["low"]
        any_hit = any_sustained = False
        for index, norm in norms.items():
            if not math.isfinite(norm):
                continue
            verdict = "exploding" if norm > high else "vanishing" if 0 < norm < low else None
            if verdict == "vanishing" and self._is_roundoff(index, norm, norms):
                self.zero_by_construction[index] = self.zero_by_construction.get(index, 0) + 1
                verdict = None
            any_hit |= verdict is not None
            window = self._windows.get(index)
            if window is None:
                window = self._windows[index] = SustainedWindow(*self._window_options)
            if window.push(verdict is not None) and verdict is not None:
                any_sustained = True
                self._flagged.setdefault(
                    index,
                    {
                        "param": self.roster.infos[index].name,
                        "verdict": verdict,
                        "grad_norm": norm,
                        "grad_norm_raw": attempt.final_norms[index],
                        "first_attempt": attempt.index,
                        "stage": attempt.stage,
                        "scale_provenance": attempt.scale_provenance,
                    },
                )
        if self.is_due(self._emission, any_sustained, not any_hit):
            return self.act(self.findings()[0])
        return None

    def _is_roundoff(self, index: int, norm: float, norms: dict[int, float]) -> bool:
        """Whether ``norm`` is round-off next to another gradient of the same module."""
        if self._siblings_of != len(self.roster):
            modules: dict[str, list[int]] = {}
            for info in self.roster.infos:
                modules.setdefault(info.module, []).append(info.index)
            self._siblings = {
                i: tuple(j for j in members if j != i)
                for members in modules.values()
                for i in members
            }
            self._siblings_of = len(self.roster)
        largest = max((norms.get(j, 0.0) for j in self._siblings.get(index, ())), default=0.0)
        return math.isfinite(largest) and norm < ROUNDOFF_RATIO * largest

    @property
    def _window_options(self) -> tuple[int, int]:
        return self.options["window"], self.options["min_hits"]

    def _divisor(self, attempt: Attempt) -> float | None:
        if attempt.scale_provenance == "gradscaler":
            return attempt.scale
        if attempt.scale_provenance == "explicit":
            return self._loss_scale
        return 1.0 if attempt.scale_provenance == "unscaled" else None

    def _is_clipped(self, norms: dict[int, float]) -> bool:
        tensors = self.roster.tensors
        grads = [(i, tensors[i].grad) for i in norms]
        held = [(i, g) for i, g in grads if g is not None]
        present = [i for i, _ in held]
        groups = device_norms([g for _, g in held], present)
        step_site = math.sqrt(sum(v * v for v in read_host([n for _, n in groups])))
        pre_clip = math.sqrt(sum(norms[i] ** 2 for i in present))
        return step_site < pre_clip * (1 - CLIP_TOLERANCE)

    def findings(self) -> list[Finding]:
        found = []
        for verdict in ("exploding", "vanishing"):
            rows = [row for row in self._flagged.values() if row["verdict"] == verdict]
            if not rows:
                continue
            bound = self.options["high" if verdict == "exploding" else "low"]
            names = [row["param"] for row in rows]
            found.append(
                Finding(
                    f"grad_norm_{verdict}",
                    "warning",
                    f"{len(rows)} parameter(s) had a pre-clip gradient norm "
                    f"{'above' if verdict == 'exploding' else 'below'} {bound:g} on >= "
                    f"{self.options['min_hits']} of {self.options['window']} attempts: "
                    + ", ".join(names[:5])
                    + (" ..." if len(names) > 5 else ""),
                    where=Where(module=names[0].rpartition(".")[0]),
                    remedy="Inspect the per-layer profile with tl.debug.grad_health on a trace of a "
                    "recent batch; clip_grad_norm_ hides this at the step site.",
                    fields={"code": f"grad_norm_{verdict}", "params": rows, "bound": bound},
                )
            )
        if self.zero_by_construction:
            names = [self.roster.infos[i].name for i in self.zero_by_construction]
            found.append(
                Finding(
                    "grad_zero_by_construction",
                    "info",
                    f"{len(names)} parameter(s) had a gradient at round-off next to a sibling "
                    f"in their module (below {ROUNDOFF_RATIO:g} of it), not judged as vanishing: "
                    + ", ".join(names[:5])
                    + (" ..." if len(names) > 5 else "")
                    + ". An attention key bias (softmax ignores a per-query constant) or a bias "
                    "before a BatchNorm has zero gradient by construction.",
                    where=Where(module=names[0].rpartition(".")[0]),
                    remedy="Nothing to fix if the parameter is such a bias; it can be dropped "
                    "(bias=False) without changing what the model computes.",
                    fields={
                        "code": "grad_zero_by_construction",
                        "params": [
                            {"param": self.roster.infos[i].name, "attempts": n}
                            for i, n in self.zero_by_construction.items()
                        ],
                        "ratio": ROUNDOFF_RATIO,
                    },
                )
            )
        return found

    def unavailable(self) -> list[Unavailable]:
        entries = []
        if self.unknown_attempts:
            entries.append(
                Unavailable(
                    "magnitude",
                    f"the loss scale of {self.unknown_attempts} attempt(s) is unknown, "
                    "so their gradient magnitudes were not judged: pass scaler=your_scaler, "
                    "scaler=None, or loss_scale=... to ChecksSession",
                    "scale_unknown",
                )
            )
        if self.censored_attempts:
            entries.append(
                Unavailable(
                    "magnitude",
                    f"clipping censored the step-site gradient in "
                    f"{self.censored_attempts} attempt(s); register_magnitude_check(site='S-A') "
                    "judges the pre-clip evidence",
                    "censored_by_clipping",
                )
            )
        return entries
