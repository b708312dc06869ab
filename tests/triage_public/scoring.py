"""Run triage on a public case and its fix, and score what it said against the ground truth.

A bug is *named* when a warning or critical finding carries one of its ``named_by`` codes; the
cause is *named first* when the root cause's code names one of the case's bugs. The fix is
*accused* when any row is warn/fail or any finding is a warning or critical. A crash is any
exception out of ``tl.recipes.triage`` (a check that cannot run must be a skipped row).
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass

import torch

import torchlens_nb as tl
from tests.recipes.state import assert_untouched, snapshot
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
    """triage on what the user holds, asserting that their model (weights, buffers, .grad,
    modes), optimizer state, batch and RNG are bitwise what they were."""
    torch.manual_seed(0)
    args = case.hand_over(broken)
    before = snapshot(args["model"])
    state = copy.deepcopy(args["optimizer"].state_dict())
    kept = copy.deepcopy(args["batch"])
    report = tl.recipes.triage(**args, live=False)
    assert_untouched(before, args["model"])
    assert _equal(args["optimizer"].state_dict(), state)
    assert _equal(args["batch"], kept)
    return report


def _equal(a: object, b: object) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def score(case: PublicCase) -> CaseScore:
    began = time.monotonic()
    try:
        bug = run_triage(case, broken=True)
        fix = run_triage(case, broken=False)
    except AssertionError:
        raise  # the caller's objects changed: never a score
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


@dataclass(frozen=True)
class HalfScore:
    """One half of the zoo, scored."""

    cases: tuple[CaseScore, ...]

    @property
    def named_first(self) -> int:
        return sum(c.named_first for c in self.cases)

    @property
    def bugs(self) -> int:
        return sum(c.bugs for c in self.cases)

    @property
    def named(self) -> int:
        return sum(c.named for c in self.cases)

    @property
    def multi_all_named(self) -> tuple[int, int]:
        multi = [c for c in self.cases if c.bugs > 1]
        return sum(c.named == c.bugs for c in multi), len(multi)

    @property
    def fixes_accused(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.cases if c.fix_accused)

    @property
    def crashes(self) -> tuple[str, ...]:
        return tuple(f"{c.name}: {c.crash}" for c in self.cases if c.crash)


def score_half(cases: tuple[PublicCase, ...]) -> HalfScore:
    return HalfScore(tuple(score(case) for case in cases))
