"""Find the user's source line of an op: the first frame outside torch and torchlens_nb.

The internal/external verdict is cached per code object for the whole process (the roots never
change), so the walk costs one dict lookup per frame: one frame for a call written in a user
forward, about five for a call inside ``nn.Linear.forward`` reached from one.
"""

from __future__ import annotations

import os
from types import CodeType, FrameType

import torch

_INTERNAL_ROOTS = (
    os.path.dirname(torch.__file__) + os.sep,
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep,
    "<frozen",
)

MAX_CACHED_CODES = 100_000
"""The verdict cache is emptied past this many code objects (a notebook that redefines its
functions creates new code objects each time; the cache must not grow without bound)."""

_INTERNAL = ("", "")
"""Cache value of an internal code object (an external one maps to ``(file, function)``)."""

_codes: dict[CodeType, tuple[str, str]] = {}

Location = tuple[str | None, int | None, str | None]
NO_LOCATION: Location = (None, None, None)


def _classify(code: CodeType) -> tuple[str, str]:
    if len(_codes) >= MAX_CACHED_CODES:
        _codes.clear()
    internal = code.co_filename.startswith(_INTERNAL_ROOTS)
    verdict = _codes[code] = _INTERNAL if internal else (code.co_filename, code.co_name)
    return verdict


def locate(frame: FrameType | None) -> Location:
    """``(file, line, function)`` of the first frame at or above ``frame`` outside torch and
    torchlens_nb, or ``NO_LOCATION`` when every frame is internal."""
    codes = _codes
    while frame is not None:
        code = frame.f_code
        verdict = codes.get(code) or _classify(code)
        if verdict is not _INTERNAL:
            return verdict[0], frame.f_lineno, verdict[1]
        frame = frame.f_back
    return NO_LOCATION
