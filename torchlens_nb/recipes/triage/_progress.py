"""Where ``tl.recipes.triage`` shows its progress: a live panel in a notebook, a text line
elsewhere.

In a Jupyter kernel the first interim report is displayed as a live panel
(``tl.report.live_panel``, through ``_live.PanelSink``) and every later one is pushed into it
(one traitlet message each: at each check's start and end, and at most 10 times a second while
overfit_one_batch trains, its own throttle). Outside a kernel one line on stderr says which check
runs (rewritten in place on a terminal, one line per check otherwise) and ends with the verdict.
"""

from __future__ import annotations

import sys
from typing import TextIO

from ..._validate import check_bool
from ...report._triage import TriageReport
from .._live import PanelSink, in_kernel

LINE_WIDTH = 100
"""The text progress line is padded to this width so a shorter line erases a longer one."""


class TriageProgress:
    """Shows each interim report and the final one (see the module docstring)."""

    def __init__(self, live: bool | None, stream: TextIO | None = None) -> None:
        if live is not None:
            check_bool("live", live, expect="True, False or None")
        auto = live is None
        self._panel = PanelSink() if live or (auto and in_kernel()) else None
        self._stream = stream or sys.stderr
        self._text = auto and self._panel is None
        self._tty = bool(getattr(self._stream, "isatty", lambda: False)())
        self._last_check: str | None = None

    def show(self, report: TriageReport) -> None:
        """Display ``report`` (interim while ``status == "running"``, else final)."""
        if self._panel is not None:
            self._panel(report)
        if self._text:
            self._line(report)

    def _line(self, report: TriageReport) -> None:
        progress = report.progress
        if report.status == "running":
            steps = ""
            if report.live_chart is not None:
                steps = f" (step {len(report.live_chart['labels'])})"
            text = (
                f"[torchlens_nb] triage {progress['done'] + 1}/{progress['total']}: "
                f"{report.current}{steps}"
            )
            if not self._tty:  # a log file gets one line per check, not one per push
                if report.current != self._last_check:
                    self._stream.write(text + "\n")
                self._last_check = report.current
                return
            self._stream.write("\r" + text.ljust(LINE_WIDTH))
        else:
            text = f"[torchlens_nb] triage {report.status} in {report.elapsed_s:.1f} s"
            self._stream.write(("\r" if self._tty else "") + text.ljust(LINE_WIDTH) + "\n")
        self._stream.flush()
