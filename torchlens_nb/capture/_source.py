"""Find the user's source line of an op: the first frame outside torch and torchlens_nb.

The internal/external decision is cached per code object, so the walk costs one dict lookup per
frame (about five frames for a call inside ``nn.Linear.forward`` reached from a user forward).
"""

from __future__ import annotations

import os
from types import CodeType, FrameType

import torch

_INTERNAL_ROOTS = (
    os.path.dirname(torch.__file__) + os.sep,
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep,
)


class SourceLocator:
    """Maps a frame to ``(file, line, function)`` of the first non-internal caller."""

    def __init__(self) -> None:
        self._internal: dict[CodeType, bool] = {}

    def is_internal(self, code: CodeType) -> bool:
        hit = self._internal.get(code)
        if hit is None:
            filename = code.co_filename
            hit = self._internal[code] = filename.startswith(
                _INTERNAL_ROOTS
            ) or filename.startswith("<frozen")
        return hit

    def locate(self, frame: FrameType | None) -> tuple[str | None, int | None, str | None]:
        while frame is not None:
            code = frame.f_code
            if not self.is_internal(code):
                return code.co_filename, frame.f_lineno, code.co_name
            frame = frame.f_back
        return None, None, None
