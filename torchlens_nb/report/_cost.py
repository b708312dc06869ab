"""Reports that rank cost: ``hot_path``, ``recompute_candidates`` and ``flops_vs_dispatch``.

Built by ``tl.debug`` (``debug/_cost.py``, ``debug/_flops.py``). FLOPs are forward FLOPs by
torchlens_nb's per-op formulas (a multiply-add is 2); memory is the bytes an op's outputs newly
allocate (views and in-place ops allocate none); duration is host wall time of each call.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ._base import Report, frozen_mapping
from ._status import tones

Metric = Literal["flops", "memory", "duration", "device_time"]
"""What ``hot_path`` ranks by."""
METRIC_UNITS: Mapping[str, str] = frozen_mapping(
    {"flops": "flop", "memory": "byte", "duration": "ns", "device_time": "ns"}
)

HOT_PATH_COLUMNS = (
    "rank",
    "source_line",
    "code",
    "value",
    "share",
    "num_ops",
    "funcs",
    "modules",
    "ops",
)
"""One row per source line: ``value`` in ``attrs["unit"]``, ``share`` of the total, the number
of ops on that line, their functions (``"linear x2"``), modules and labels (execution order)."""
RECOMPUTE_COLUMNS = (
    "rank",
    "op",
    "func",
    "module",
    "bytes",
    "flops",
    "bytes_per_flop",
    "is_selected",
    "remaining_bytes",
    "source_line",
)
"""One row per candidate op, most bytes saved per FLOP re-spent first. ``remaining_bytes`` is the
activation memory left if this row and every row above it were recomputed; ``is_selected`` marks
the greedy set that reaches the budget."""


@dataclass(frozen=True, kw_only=True, repr=False)
class HotPathReport(Report):
    """Source lines ranked by forward FLOPs, activation memory or duration."""

    report_type = "hot_path"
    status_tones = tones({"ranked": "info", "empty": "info"})
    status: Literal["ranked", "empty"]
    """``ranked``, or ``empty`` when no op had the metric and a source line."""
    metric: Metric
    """What the lines are ranked by: ``flops``, ``memory``, ``duration`` or
    ``device_time``."""
    unit: str
    """Unit of the metric's values: ``flop``, ``byte`` or ``ns`` (``METRIC_UNITS``)."""
    total: float
    """Sum of the metric over the ranked ops."""
    excluded: int
    """Ops left out of the ranking (no formula, no source line); reasons in the table attrs."""


@dataclass(frozen=True, kw_only=True, repr=False)
class RecomputeReport(Report):
    """Ops ranked by activation bytes per forward FLOP, with the greedy set for a budget."""

    report_type = "recompute"
    status_tones = tones({"ranked": "findings", "empty": "info"})
    status: Literal["ranked", "empty"]
    """``ranked``, or ``empty`` when no op could be ranked."""
    total_bytes: int
    """Activation bytes of every recorded op (the forward's activation footprint)."""
    budget_bytes: int | None = None
    """The memory budget the greedy set aims for (``budget_gb`` in bytes; None without one)."""
    selected_bytes: int = 0
    """Bytes freed by recomputing the selected ops."""
    selected_flops: int = 0
    """Forward FLOPs spent again to recompute them."""
    is_budget_reached: bool | None = None
    """None without a budget."""


WitnessState = Literal["passed", "failed"]


@dataclass(frozen=True, kw_only=True, repr=False)
class FlopsVsDispatchReport(Report):
    """torchlens_nb's FLOP formulas vs ``torch.utils.flop_counter.FlopCounterMode``.

    A dispatch-formula cross-check, never "measured FLOPs". ``delta`` is ours minus native;
    ``comparable_delta`` restricts ours to the families the native registry covers (matmul,
    conv, attention), so on linear / conv / matmul models it is 0. A native zero can be a
    registry-coverage fact (CPU fused attention has no native formula), not a truth verdict.
    """

    report_type = "flops_vs_dispatch"
    status_tones = tones({"agree": "ok", "disagree": "warning", "refused": "critical"})
    status: Literal["agree", "disagree", "refused"]
    """``agree`` (``comparable_delta`` is 0), ``disagree``, or ``refused`` (the witness failed: the
    runs computed different outputs)."""
    witness: WitnessState
    """Whether the raw run reproduced the captured run's outputs bitwise."""
    ours_total: int | None = None
    """Our FLOPs over ops with a formula (None when the witness failed)."""
    native_total: int | None = None
    """FlopCounterMode's FLOPs for the same forward (None when the witness failed)."""
    delta: int | None = None
    """``ours_total - native_total`` over every op (ours also counts element-wise ops)."""
    comparable_ours: int | None = None
    """Our FLOPs over the families the native registry covers (matmul, conv, attention)."""
    comparable_delta: int | None = None
    """``comparable_ours - native_total``: the figure to compare."""
    unknown_ops: int = 0
    """Ops without a formula of ours: listed in the ``unknown_ops`` table, counted as unknown."""
    family_totals: Mapping[str, Any] = field(default_factory=frozen_mapping)
    """Our FLOPs per op family (the ``families`` table shows them next to the native ones)."""
