"""The silent-bug zoo (``tests/silent/zoo.py``): each port is caught within one step of its
trigger at the documented set-up, and its fixed twin trains free of warnings and critical
findings. The DDP ports are in ``tests/distributed/test_silent_ddp.py``."""

from __future__ import annotations

import pytest

from tests.silent.zoo import CASES, Case, spectral_norm_before_training

BLIND_SPOTS = {"spectral_norm_before_training"}
"""Ports nothing here detects (docs/training_checks.md says why); kept in the benchmark."""


@pytest.mark.parametrize(
    "case", [c for c in CASES if c.name not in BLIND_SPOTS], ids=lambda c: c.name
)
def test_the_bug_is_caught_within_one_step_of_its_trigger(case: Case) -> None:
    outcome = case.run(True)
    assert outcome.detected, f"{case.name}: {case.code} not among {outcome.serious}"
    assert outcome.steps_to_detection is not None and 0 <= outcome.steps_to_detection <= 1


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_the_fixed_twin_has_no_warning_and_no_critical_finding(case: Case) -> None:
    outcome = case.run(False)
    assert not outcome.detected
    assert outcome.serious == []


def test_spectral_norm_before_training_is_a_declared_blind_spot() -> None:
    # eval before any training forward is deterministic: eval_determinism has nothing to see
    assert not spectral_norm_before_training(True).detected
