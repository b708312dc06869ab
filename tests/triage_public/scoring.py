"""Run triage on a public case and its fix, and score what it said against the ground truth.

A bug is *named* when a warning or critical finding carries one of its ``named_by`` codes; the
cause is *named first* when the root cause's code names one of the case's bugs. The fix is
*accused* when any row is warn/fail or any finding is a warning or critical. A crash is any
exception out of ``tl.recipes.triage`` (a check that cannot run must be a skipped row).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

import torchlens_nb as tl
from torchlens_nb.report import TriageReport

from ._kit import PublicCase

ACCUSING = ("warning", "critical")


@dataclass(frozen=True)
class CaseScore:
    """What triage said about one case (bug and fix)."""

    name: str
    bugs: int
    named: int
    """Bugs of the case named by a warning or critical finding."""
    named_first: bool
    fix_accused: tuple[str, ...]
    """``check.code`` of every warning/critical finding on the accepted fix."""
    root: str | None
    crash: str | None
    seconds: float


def accusing_codes(report: TriageReport) -> set[str]:
    return {f.code for f in report.findings if f.severity in ACCUSING}


def run_triage(case: PublicCase, broken: bool) -> TriageReport:
    torch.manual_seed(0)
    return tl.recipes.triage(**case.hand_over(broken), live=False)


def score(case: PublicCase) -> CaseScore:
    began = time.monotonic()
    try:
        bug = run_triage(case, broken=True)
        fix = run_triage(case, broken=False)
    except Exception as error:  # a crash is a result here: the bench counts it
        return CaseScore(
            case.name,
            len(case.mistakes),
            0,
            False,
            (),
            None,
            f"{type(error).__name__}: {error}",
            time.monotonic() - began,
        )
    codes = accusing_codes(bug)
    named = sum(bool(m.named_by & codes) for m in case.mistakes)
    every = frozenset().union(*(m.named_by for m in case.mistakes))
    root = bug.root_cause
    accused = tuple(
        f"{f.fields.get('check')}.{f.code}" for f in fix.findings if f.severity in ACCUSING
    )
    accused += tuple(f"{r.check}.row" for r in fix.rows if r.status in ("warn", "fail"))
    return CaseScore(
        case.name,
        len(case.mistakes),
        named,
        root is not None and root.code in every,
        accused,
        None if root is None else f"{root.check}.{root.code}",
        None,
        time.monotonic() - began,
    )
