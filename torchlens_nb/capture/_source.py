"""Find the user's source line of an op: the first frame outside torch and torchlens_nb.

The internal/external verdict is cached per code object for the whole process (the roots never
change), so the walk costs one dict lookup per frame: one frame for a call written in a user
forward, about five for a call inside ``nn.Linear.forward`` reached from one. The cache is keyed
by the code object's identity, not by the code object: code objects compare equal across files
(their ``__eq__`` ignores ``co_filename``), so byte-identical functions in two files, such as
transformers' modular copies ``modeling_roberta.py`` / ``modeling_xlm_roberta.py``, got the
first file's name (``tests/capture/test_source_lines.py``). Each entry holds its code object, so
an id is never reused while it is cached.

An external code's entry also keeps the location of each call site seen in it, by instruction
offset (``f_lasti``): a line table maps an offset to one line for good, so the location tuple is
built once per call site for the whole process, and an op called there again costs a dict
lookup instead of ``f_lineno`` (which scans the line table from its start) and a new tuple.
On the 801-op chain of ``benchmarks/bench_capture.py`` the ``save=False`` capture took 0.965x
of the time it took with ``f_lineno`` read per op (CPU time, median of per-round ratios of 31
rounds, the two side by side in one process).
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

Location = tuple[str | None, int | None, str | None]
NO_LOCATION: Location = (None, None, None)

_Entry = tuple[CodeType, dict[int, Location] | None]
"""(the code object, its call sites' locations by instruction offset; None when the code is
internal)."""

_codes: dict[int, _Entry] = {}
"""``id(code)`` -> its entry."""


def _classify(code: CodeType) -> _Entry:
    if len(_codes) >= MAX_CACHED_CODES:
        _codes.clear()
    is_internal = code.co_filename.startswith(_INTERNAL_ROOTS)
    entry = _codes[id(code)] = (code, None if is_internal else {})
    return entry


def locate(frame: FrameType | None) -> Location:
    """``(file, line, function)`` of the first frame at or above ``frame`` outside torch and
    torchlens_nb, or ``NO_LOCATION`` when every frame is internal."""
    codes = _codes
    while frame is not None:
        code = frame.f_code
        sites = (codes.get(id(code)) or _classify(code))[1]
        if sites is not None:
            found = sites.get(frame.f_lasti)
            if found is None:
                found = sites[frame.f_lasti] = (code.co_filename, frame.f_lineno, code.co_name)
            return found
        frame = frame.f_back
    return NO_LOCATION
