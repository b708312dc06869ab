"""One corpus loop under ``tl.debug.ChecksSession`` with its defaults, as a new user writes it
(``ChecksSession(model, optimizer)``, nothing registered): what the session said."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import torchlens_nb as tl
from torchlens_nb.errors import TorchlensNbWarning

from ._loop import HealthyLoop, LoopRun


@dataclass
class Verdict:
    run: LoopRun
    serious: list[str] = field(default_factory=list)
    """Codes of the warning / critical findings of every session, then each warning emitted."""
    codes: list[str] = field(default_factory=list)
    """Codes of every finding of every session."""
    unavailable: list[str] = field(default_factory=list)
    """``check:code`` of every unavailable entry."""

    @property
    def learns(self) -> bool:
        """The loop did its job: it trains (supervised), or its losses stay finite (GAN, RL, a
        trainer's few steps inside a 4,000-step warm-up)."""
        return self.run.trains if self.kind_trains else self.run.finite

    kind_trains: bool = True


def judge(entry: HealthyLoop, *, planted: bool, steps: int | None = None) -> Verdict:
    """Run ``entry`` (its twin when ``planted``) under default sessions, one per pair."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", TorchlensNbWarning)
        run = entry.run(
            entry.steps if steps is None else steps,
            attach=lambda model, optimizer: tl.debug.ChecksSession(model, optimizer),
            planted=planted,
        )
    reports = [session.report() for session in run.attached]
    verdict = Verdict(run, kind_trains=entry.kind not in ("gan", "rl", "trainer"))
    for report in reports:
        verdict.codes += [f.code for f in report.findings]
        verdict.serious += [f.code for f in report.findings if f.severity != "info"]
        verdict.unavailable += [f"{u.check}:{u.code}" for u in report.unavailable]
    verdict.serious += [
        f"warning: {str(w.message).split(':')[0]}"
        for w in caught
        if issubclass(w.category, TorchlensNbWarning)
    ]
    return verdict
