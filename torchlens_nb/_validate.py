"""Argument checks shared by every public entry point: one home, one argument order.

Each check takes ``(name, value, ...)``, returns the value (as the checked type) when it is
acceptable, and otherwise raises a typed error (``DiagnosticArgumentError`` unless told) whose
message names the argument, what it must be, the value seen and, with ``hint``, the fix:
``"max_nodes must be an int >= 1, got 0; the default is 20000."``.
A ``bool`` is never accepted as a number (``True`` is an ``int`` in Python, never in a verdict).
"""

from __future__ import annotations

import math
import numbers
from typing import Any

from .errors import DiagnosticArgumentError, TorchlensNbError

MAX_REPEATS = 100_000
"""The most steps, trials or runs a diagnostic or recipe repeats (the defaults are 2 to 200): a
count above it is a slip (``steps=10**12``), refused at once instead of looping for ever."""

MAX_PROBE_SIZE = 2**16
"""The largest size of one dimension of a synthetic probe input (a batch, a channel count, a
sequence length; the defaults are 1 to 512): above it one probe tensor alone would not fit in
memory, and the allocation would fail deep inside torch instead of at the argument."""


def is_int(value: Any) -> bool:
    """An ``int`` that is not a ``bool``."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    """A real number (``int``, ``float``, numpy scalar) that is not a ``bool``."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _refuse(
    name: str, value: Any, expect: str, hint: str | None, error: type[TorchlensNbError]
) -> TorchlensNbError:
    tail = f"; {hint}" if hint else ""
    return error(f"{name} must be {expect}, got {value!r}{tail}.")


def _bound(value: float) -> str:
    """An int bound in full (``6291456``, not ``6.29146e+06``), a float one short (``1e-05``)."""
    return str(value) if is_int(value) else f"{value:g}"


def _bounds_text(low: float | None, high: float | None, low_open: bool, high_open: bool) -> str:
    if low is not None and high is not None:
        left, right = "(" if low_open else "[", ")" if high_open else "]"
        return f" in {left}{_bound(low)}, {_bound(high)}{right}"
    if low is not None:
        return f" {'>' if low_open else '>='} {_bound(low)}"
    if high is not None:
        return f" {'<' if high_open else '<='} {_bound(high)}"
    return ""


def _within(
    value: float, low: float | None, high: float | None, low_open: bool, high_open: bool
) -> bool:
    if low is not None and (value <= low if low_open else value < low):
        return False
    return not (high is not None and (value >= high if high_open else value > high))


def check_int(
    name: str,
    value: Any,
    *,
    low: int | None = None,
    high: int | None = None,
    expect: str | None = None,
    hint: str | None = None,
    error: type[TorchlensNbError] = DiagnosticArgumentError,
) -> int:
    """``value`` when it is an int in ``[low, high]`` (either bound optional).

    Example:
        >>> check_int("runs", 3, low=2)
        3
    """
    if not is_int(value) or not _within(value, low, high, False, False):
        text = expect or "an int" + _bounds_text(low, high, False, False)
        raise _refuse(name, value, text, hint, error)
    return int(value)


def check_number(
    name: str,
    value: Any,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
    finite: bool = True,
    expect: str | None = None,
    hint: str | None = None,
    error: type[TorchlensNbError] = DiagnosticArgumentError,
) -> float:
    """``value`` as a float when it is a number within the bounds (finite unless told).

    ``low_open`` / ``high_open`` exclude the bound itself; NaN is never accepted.

    Example:
        >>> check_number("rtol", 1e-5, low=0)
        1e-05
    """
    ok = is_number(value) and not math.isnan(value)
    ok = ok and (math.isfinite(value) or not finite)
    if not ok or not _within(float(value), low, high, low_open, high_open):
        default = ("a finite number" if finite else "a number") + _bounds_text(
            low, high, low_open, high_open
        )
        raise _refuse(name, value, expect or default, hint, error)
    return float(value)


def check_bool(
    name: str,
    value: Any,
    *,
    expect: str | None = None,
    hint: str | None = None,
    error: type[TorchlensNbError] = DiagnosticArgumentError,
) -> bool:
    """``value`` when it is ``True`` or ``False`` (not 0/1, not None).

    A tri-state flag checks only what is not None and says so in ``expect``:

    Example:
        >>> live = None
        >>> live is None or check_bool("live", live, expect="True, False or None")
        True
    """
    if not isinstance(value, bool):
        raise _refuse(name, value, expect or "True or False", hint, error)
    return value
