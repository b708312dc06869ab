"""Find the user's source line of an op: the first frame outside torch and torchlens_nb.

The internal/external verdict is cached per code object for the whole process (the roots never
change), so the walk costs one dict lookup per frame: one frame for a call written in a user
forward, about five for a call inside ``nn.Linear.forward`` reached from one. The cache is keyed
by the code object's identity, not by the code object: code objects compare equal across files
(their ``__eq__`` ignores ``co_filename``), so byte-identical functions in two files, such as
transformers' modular copies ``modeling_roberta.py`` / ``modeling_xlm_roberta.py``, got the
first file's name (``tests/capture/test_source_lines.py``). Each entry holds its code object, so
an id is never reused while it is cached.
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

_codes: dict[int, tuple[CodeType, str | None, str]] = {}
"""``id(code)`` -> (the code object, its file or None when it is internal, its function)."""

Location = tuple[str | None, int | None, str | None]
NO_LOCATION: Location = (None, None, None)


def _classify(code: CodeType) -> tuple[CodeType, str | None, str]:
    if len(_codes) >= MAX_CACHED_CODES:
        _codes.clear()
    file = None if code.co_filename.startswith(_INTERNAL_ROOTS) else code.co_filename
    entry = _codes[id(code)] = (code, file, code.co_name)
    return entry


def locate(frame: FrameType | None) -> Location:
    """``(file, line, function)`` of the first frame at or above ``frame`` outside torch and
    torchlens_nb, or ``NO_LOCATION`` when every frame is internal."""
    codes = _codes
    while frame is not None:
        code = frame.f_code
        entry = codes.get(id(code)) or _classify(code)
        if entry[1] is not None:
            return entry[1], frame.f_lineno, entry[2]
        frame = frame.f_back
    return NO_LOCATION
