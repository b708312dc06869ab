"""Reports about a model and its environment: ``tl.report.doctor`` (compatibility rows, the model
never run), ``guess_input_shape`` and ``graph_breaks`` (probes run on a copy). Built in
``debug/model/``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from ..errors import ReportOptionError
from ._base import PAYLOAD_EXCLUDED, Report, Severity, frozen_mapping
from ._status import tones


@dataclass(frozen=True)
class ShapeProbe:
    """One synthetic input ``guess_input_shape`` ran through the model copy."""

    shape: tuple[int, ...]
    dtype: str
    is_ok: bool
    """The forward returned without raising."""
    error: str | None = None
    """``"RuntimeError: mat1 and mat2 shapes cannot be multiplied ..."`` (first line, clipped)."""


PROBE_COLUMNS = ("shape", "dtype", "is_ok", "error")


@dataclass(frozen=True, kw_only=True, repr=False)
class GuessInputShapeReport(Report):
    """A verified synthetic input shape for a model, or the diagnostic of why none was found."""

    report_type = "guess_input_shape"
    status_tones = tones({"found": "ok", "not_found": "warning"})
    status: Literal["found", "not_found"]
    found: bool
    shape: tuple[int, ...] | None = None
    """The first probed shape the forward accepted (batch first), or None."""
    dtype: str | None = None
    """dtype of that input (``"int64"`` for token ids)."""
    output_shape: tuple[int, ...] | None = None
    """Shape of the first tensor the verified forward returned."""
    first_layer: str | None = None
    """The layer the guess started from, e.g. ``"Linear(in_features=3) at ''"``."""
    probes: tuple[ShapeProbe, ...] = ()
    """Every probe, in the order tried."""
    max_probes: int = 64


BREAK_COLUMNS = ("index", "reason", "source_line", "code")


@dataclass(frozen=True, kw_only=True, repr=False)
class GraphBreaksReport(Report):
    """Where ``torch.compile`` (Dynamo) splits a model's forward into several graphs."""

    report_type = "graph_breaks"
    status_tones = tones({"single_graph": "ok", "breaks": "findings"})
    status: Literal["single_graph", "breaks"]
    graph_count: int
    graph_break_count: int
    op_count: int
    """Ops Dynamo captured into graphs."""


DoctorStatus = Literal["pass", "known_broken", "scope", "not_tested"]
DoctorSeverity = Literal["ok", "info", "warning", "error"]

FINDING_SEVERITY: Mapping[str, Severity] = {
    "error": "critical",
    "warning": "warning",
    "info": "info",
}
"""The finding severity a doctor row of each severity becomes (``ok`` rows make no finding)."""


@dataclass(frozen=True)
class DoctorCheck:
    """One doctor row."""

    key: str
    """Stable id, e.g. ``"graphviz"``; use with ``DoctorReport.check(key)``."""
    label: str
    status: DoctorStatus
    severity: DoctorSeverity
    is_detected: bool
    """Whether the thing the row is about is present (a package, a wrapper, a GPU)."""
    details: str
    suggestion: str


@dataclass(frozen=True, kw_only=True, repr=False)
class DoctorReport(Report):
    """Environment rows (always) and model rows (when a model was given)."""

    report_type = "doctor"
    status_tones = tones({"ok": "ok", "warn": "warning"})
    status: Literal["ok", "warn"]
    checks: tuple[DoctorCheck, ...] = field(default=(), metadata=PAYLOAD_EXCLUDED)
    """Every row (they travel as the table)."""
    torch_version: str = ""
    model_type: str | None = None
    capabilities: Mapping[str, bool] = field(default_factory=frozen_mapping)

    def check(self, key: str) -> DoctorCheck:
        """The row with ``key``."""
        for row in self.checks:
            if row.key == key:
                return row
        raise ReportOptionError(f"no doctor row {key!r}; keys: {[c.key for c in self.checks]}.")

    def capability_snapshot(self) -> dict[str, bool]:
        """Every named ``HAS_*`` capability flag -> available."""
        return dict(self.capabilities)

    def to_markdown(self) -> str:
        """The rows as a Markdown table."""
        lines = ["| key | status | severity | details | suggestion |", "|---|---|---|---|---|"]
        for c in self.checks:
            lines.append(
                f"| {c.key} | {c.status} | {c.severity} | {_md(c.details)} | {_md(c.suggestion)} |"
            )
        return "\n".join(lines)

    def show(self) -> None:
        """Print the fixed-width table."""
        print(self.table_text())

    def table_text(self) -> str:
        """The rows as fixed-width text."""
        width = max((len(c.key) for c in self.checks), default=8)
        lines = [f"{'key':{width}s}  {'status':12s}  {'severity':8s}  details"]
        for c in self.checks:
            lines.append(f"{c.key:{width}s}  {c.status:12s}  {c.severity:8s}  {c.details}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.card() + "\n" + self.table_text()


def _md(text: str) -> str:
    return text.replace("|", "\\|")
