"""The shared argument checks: one argument order, typed errors that name the value and the fix."""

from __future__ import annotations

import math

import pytest

from torchlens_nb._validate import check_bool, check_int, check_number
from torchlens_nb.errors import CaptureOptionsError, DiagnosticArgumentError


def test_an_int_within_bounds_is_returned() -> None:
    assert check_int("runs", 3, low=2) == 3
    assert check_int("bwd", 0, low=0, high=1) == 0


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (True, r"runs must be an int >= 2, got True\."),  # a bool is never a count
        (1, r"runs must be an int >= 2, got 1\."),
        (2.0, r"runs must be an int >= 2, got 2\.0\."),
    ],
    ids=["bool", "too-small", "float"],
)
def test_a_bad_int_is_refused_with_the_value(value: object, message: str) -> None:
    with pytest.raises(DiagnosticArgumentError, match=message):
        check_int("runs", value, low=2)


def test_expect_hint_and_error_type_are_the_callers() -> None:
    with pytest.raises(
        CaptureOptionsError,
        match=r"^max_nodes must be an int >= 1, got 0; "
        r"the default is 20000\.$",
    ):
        check_int("max_nodes", 0, low=1, hint="the default is 20000", error=CaptureOptionsError)
    with pytest.raises(
        DiagnosticArgumentError,
        match=r"runs must be an int >= 2 \(run 0 is the "
        r"reference\), got 1\.",
    ):
        check_int("runs", 1, low=2, expect="an int >= 2 (run 0 is the reference)")


def test_an_int_bound_is_printed_whole() -> None:
    with pytest.raises(
        DiagnosticArgumentError, match=r"^size must be an int in \[1, 6291456\], got 0\.$"
    ):
        check_int("size", 0, low=1, high=6 * 2**20)


def test_numbers_are_finite_unless_told_and_never_nan() -> None:
    assert check_number("rtol", 1e-5, low=0) == 1e-5
    assert check_number("high", math.inf, finite=False) == math.inf
    for bad in (math.nan, math.inf, -1.0, "1", False):
        with pytest.raises(DiagnosticArgumentError, match="rtol must be a finite number >= 0"):
            check_number("rtol", bad, low=0)


def test_open_bounds_exclude_the_bound() -> None:
    assert check_number("fraction", 1.0, low=0, high=1, low_open=True) == 1.0
    with pytest.raises(
        DiagnosticArgumentError,
        match=r"fraction must be a finite number in "
        r"\(0, 1\], got 0",
    ):
        check_number("fraction", 0, low=0, high=1, low_open=True)


def test_a_flag_must_be_a_bool() -> None:
    assert check_bool("include_buffers", False) is False
    with pytest.raises(
        DiagnosticArgumentError, match="include_buffers must be True or False, got 1"
    ):
        check_bool("include_buffers", 1)


def test_a_tri_state_flag_names_none_in_its_expectation() -> None:
    with pytest.raises(
        DiagnosticArgumentError, match=r"^live must be True, False or None, got 'yes'\.$"
    ):
        check_bool("live", "yes", expect="True, False or None")
