"""The closed status vocabulary of a report and the tone each status is shown in.

Every report class declares its statuses as a ``Literal`` (the type of its ``status`` field) and
maps each one to a tone in ``status_tones``; the tone travels in the payload and panels show the
tone they are given, mapping no words (``tests/test_report_contract.py`` checks every report
type). A tone rule is a tone, or ``"findings"``: the tone of the most severe finding (``ok`` when
there is none), for statuses such as ``found`` whose weight depends on what was found.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Literal

Tone = Literal["critical", "warning", "ok", "info"]
"""How a verdict is shown: ``critical`` (results are wrong or training was stopped),
``warning`` (likely wrong, or not fully observed), ``ok`` (observed and fine), ``info``."""
ToneRule = Tone | Literal["findings"]
TONES: tuple[Tone, ...] = ("critical", "warning", "ok", "info")

_SEVERITY_TONE: Mapping[str, Tone] = MappingProxyType(
    {"critical": "critical", "warning": "warning", "info": "info"}
)


FINITENESS_TONES: Mapping[str, Tone] = MappingProxyType(
    {"finite": "ok", "nonfinite": "critical", "unknown": "info"}
)
"""The ``row_tones`` of the reports that draw lineage nodes: one tone per finiteness word
(``report._lineage.Finiteness``)."""


def tones(mapping: Mapping[str, ToneRule]) -> Mapping[str, ToneRule]:
    """A read-only ``status -> tone rule`` table (the ``status_tones`` of a report class)."""
    return MappingProxyType(dict(mapping))


def resolve_tone(rule: ToneRule, severities: Iterable[str]) -> Tone:
    """The tone of ``rule``; ``"findings"`` takes the most severe of ``severities``."""
    if rule != "findings":
        return rule
    present = set(severities)
    for severity in ("critical", "warning", "info"):
        if severity in present:
            return _SEVERITY_TONE[severity]
    return "ok"


def status_phrase(status: str) -> str:
    """The status word as a phrase a person reads: ``none_flagged`` -> ``none flagged``."""
    return status.replace("_", " ")


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """``text`` with control characters escaped (``\\x1b`` for ESC): a module name or message
    holding terminal escape bytes must not reach the terminal through a text view."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)
