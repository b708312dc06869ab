"""Reports of helpers that learn about a model by running probes on a copy of it:
``guess_input_shape`` and ``graph_breaks`` (built in ``debug/_shape_guess.py`` and
``debug/_compile.py``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ._base import Report


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

    def _data(self) -> dict[str, Any]:
        return {
            "found": self.found,
            "shape": self.shape,
            "dtype": self.dtype,
            "output_shape": self.output_shape,
            "first_layer": self.first_layer,
            "probes": [asdict(p) for p in self.probes],
            "max_probes": self.max_probes,
        }


BREAK_COLUMNS = ("index", "reason", "source_line", "code")


@dataclass(frozen=True, kw_only=True, repr=False)
class GraphBreaksReport(Report):
    """Where ``torch.compile`` (Dynamo) splits a model's forward into several graphs."""

    report_type = "graph_breaks"
    graph_count: int
    graph_break_count: int
    op_count: int
    """Ops Dynamo captured into graphs."""

    def _data(self) -> dict[str, Any]:
        return {
            "graph_count": self.graph_count,
            "graph_break_count": self.graph_break_count,
            "op_count": self.op_count,
        }
