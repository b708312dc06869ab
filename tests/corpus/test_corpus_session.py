"""The corpus under ``ChecksSession`` with its defaults (issue 42): every legitimate loop trains
and gets no warning or critical finding; every twin with its bug planted is caught."""

from __future__ import annotations

import pytest

from tests.corpus import LOOPS, HealthyLoop
from tests.corpus._verdict import judge


@pytest.mark.parametrize("entry", LOOPS, ids=lambda e: e.name)
def test_the_healthy_loop_trains_with_no_warning_and_no_critical_finding(
    entry: HealthyLoop,
) -> None:
    verdict = judge(entry, planted=False)
    assert verdict.learns, f"{entry.name} did not train: {verdict.run.losses}"
    assert verdict.serious == [], f"{entry.name} ({entry.source}): {verdict.serious}"


@pytest.mark.parametrize("entry", LOOPS, ids=lambda e: e.name)
def test_the_planted_twin_is_caught(entry: HealthyLoop) -> None:
    verdict = judge(entry, planted=True)
    assert entry.catches in verdict.codes, f"{entry.name} ({entry.bug}): {verdict.codes}"
    assert any(code == entry.catches for code in verdict.serious)
