"""No stability warning on the healthy corpus (``tests/corpus``: ports of public training
loops, their recipes unchanged): every loop under ``ChecksSession(model, optimizer)`` with its
defaults, the stability check on; and every loop run past the check's warm-up with the upcoming
update (and Adam's second-moment lag) sampled at every attempt."""

from __future__ import annotations

import typing
import warnings

import pytest

import torchlens_nb as tl
from tests.corpus import LOOPS, HealthyLoop
from torchlens_nb.checks.stability._stability import SEVERITY, Mechanism
from torchlens_nb.errors import DiagnosticArgumentError, TorchlensNbWarning

STABILITY_WARNINGS = {m for m in typing.get_args(Mechanism) if SEVERITY[m] == "warning"}


@pytest.mark.parametrize("entry", LOOPS, ids=lambda e: e.name)
def test_a_healthy_loop_gets_no_stability_warning(entry: HealthyLoop) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", TorchlensNbWarning)
        try:
            run = entry.run(
                entry.steps,
                attach=lambda model, optimizer: tl.debug.ChecksSession(model, optimizer),
                planted=False,
            )
        except DiagnosticArgumentError as refused:  # the session's own scope (issue 42)
            pytest.skip(f"this branch's session refuses the loop's optimizer: {refused}")
    assert run.finite, f"{entry.name}: {run.losses}"
    found = [f.code for s in run.attached for f in s.report().findings]
    assert [c for c in found if c in STABILITY_WARNINGS] == [], f"{entry.name}: {found}"
    emitted = [str(w.message).split(":")[0] for w in caught]
    assert [c for c in emitted if c in STABILITY_WARNINGS] == []
    assert all(s.report().checks_run for s in run.attached)
    assert any(r.name == "stability" for s in run.attached for r in s.report().checks_run)


DENSE_STEPS = 30
"""Past :data:`~torchlens_nb.checks.stability._stability.WARM_ATTEMPTS` (the Adam second
moment's lag is judged from attempt 20 on; the corpus loops' own step counts are shorter)."""


@pytest.mark.parametrize("entry", LOOPS, ids=lambda e: e.name)
def test_a_healthy_loop_sampled_at_every_attempt_gets_no_stability_warning(
    entry: HealthyLoop,
) -> None:
    def attach(model, optimizer):
        session = tl.debug.ChecksSession(model, optimizer, stability=False)
        session.register_stability_check(adam_every=1, action="collect")
        return session

    try:
        run = entry.run(DENSE_STEPS, attach=attach, planted=False)
    except DiagnosticArgumentError as refused:
        pytest.skip(f"this branch's session refuses the loop's optimizer: {refused}")
    assert run.finite, f"{entry.name}: {run.losses}"
    found = [f.code for s in run.attached for f in s.report().findings]
    assert [c for c in found if c in STABILITY_WARNINGS] == [], f"{entry.name}: {found}"
