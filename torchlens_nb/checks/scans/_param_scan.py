"""The session's scheduled scan ``param_scan``: ``param_health`` rules at S-C every N steps.

Runs the same batched scan kernel and the same rules as ``tl.debug.param_health`` over the
roster parameters right after the optimizer wrote them (site S-C), every ``every`` accepted
steps. A finding is kept once per (rule, tensor) with the attempt it was first seen at and how
many scans repeated it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...report import Finding
from ...report._checks import Action, ParamHealthKind
from ..gradients._update_ratio import UpdateSample
from ..session._check import Check
from ..session._evidence import Attempt
from ..session._params import Roster
from ._health_rules import health_findings
from ._param_health import check_fractions, scan_rows

if TYPE_CHECKING:
    import torch


class ParamScanCheck(Check):
    """Scheduled ``param_health`` of the roster parameters (site S-C)."""

    name = "param_scan"
    site = "S-C"

    def __init__(
        self,
        roster: Roster,
        *,
        every: int,
        max_fraction: float,
        subnormal_fraction_threshold: float,
        action: Action,
    ) -> None:
        check_fractions(max_fraction, subnormal_fraction_threshold)  # refused at registration
        super().__init__(
            roster,
            action,
            {
                "every": every,
                "max_fraction": max_fraction,
                "subnormal_fraction_threshold": subnormal_fraction_threshold,
            },
        )
        self._accepted = 0
        self._seen: dict[tuple[str, str], tuple[Finding, int, int]] = {}

    def on_written(self, attempt: Attempt, sample: UpdateSample | None) -> Finding | None:
        due = self._accepted % self.options["every"] == 0
        self._accepted += 1
        if not due:
            return None
        self.evaluations += 1
        infos, tensors = self.roster.infos, self.roster.tensors
        entries: list[tuple[str, ParamHealthKind, torch.Tensor]] = [
            (infos[i].name, "parameter", tensors[i]) for i in self.roster.optimized
        ]
        rows = scan_rows(entries, lambda name: None)
        new = []
        for finding in health_findings(
            rows, self.options["max_fraction"], self.options["subnormal_fraction_threshold"]
        ):
            key = (finding.code, finding.fields["tensor"])
            first, at, repeats = self._seen.get(key, (finding, attempt.index, 0))
            self._seen[key] = (first, at, repeats + 1)
            if repeats == 0:
                new.append(finding)
        return self.act(new[0]) if new else None

    def findings(self) -> list[Finding]:
        found = []
        for first, at, repeats in self._seen.values():
            fields: dict[str, Any] = {**first.fields, "first_attempt": at, "scans_seen": repeats}
            found.append(
                Finding(
                    first.code, first.severity, first.message, first.where, first.remedy, fields
                )
            )
        return found
