"""Attention sinks and outlier residual dimensions: the sink probe's flags and the report of
``tl.debug.attention_sinks``.

Plain data only. The attention patterns of the shown sample travel as one compact binary block
(:class:`PatternBlock`): each probability ``p`` is stored as the byte ``round(levels * sqrt(p))``
and the bytes are zlib-deflated. The square root keeps small probabilities legible (absolute
error <= ``sqrt(p) / levels + 1 / (2 * levels) ** 2``: 0.0004 at p = 1/128, 0.0039 at p = 1
with 255 levels), and deflate shrinks the near-constant rows of diffuse heads. Measured with benchmarks/bench_sinks.py
(pattern bytes): trained MiniLM, 6 layers x 12 heads x 128 tokens, 0.73 MB; 12 layers x 12 heads
x 128 tokens with N(0, s^2) logits: 1.28 MB (s = 0.3), 1.63 MB (s = 1), 1.66 MB (s = 2, the
worst measured; 1.69 MB with the payload JSON), 0.56 MB (s = 8). uint8 without deflate would be
2.36 MB and float16 4.72 MB for 12 x 12 x 128 (tests/probes/test_attention_payload.py).
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ..errors import ReportOptionError
from ._base import Report, frozen_mapping, payload_as
from ._status import tones


@dataclass(frozen=True)
class SinkHead:
    """An attention head whose queries put most of their mass on one key position."""

    label: str
    """Trace label of the attention-probability op (e.g. ``"softmax_3"``)."""
    head: int
    """Head index within the layer (from 0)."""
    position: int
    """Key position (index along the key axis) that receives the mass."""
    mass: float
    """Mean over scored queries of the attention on ``position`` (0..1)."""


@dataclass(frozen=True)
class OutlierDim:
    """A residual-stream dimension whose mean |value| is many times the median dimension's."""

    label: str
    """Trace label of the op that produced the residual value (the block output)."""
    dim: int
    """Index of the dimension in the residual stream (from 0)."""
    factor: float
    """Mean |value| of ``dim`` over scored tokens divided by that of the median dimension."""


@dataclass(frozen=True)
class UnseenAttention:
    """A fused attention call whose probabilities a probe could not see, and how to see them."""

    label: str
    """Trace label of the fused op (e.g. ``"scaled_dot_product_attention_1"``); the op name when
    the call ran outside any capture."""
    module: str
    """Address of the module that made the call (``""`` is the root module)."""
    func: str
    """``scaled_dot_product_attention`` or ``multi_head_attention_forward``."""
    calls: int
    """Calls at this site that were not scored."""
    reason: str
    """Why they were not seen, and the fix (eager attention, need_weights, recompute)."""


@dataclass(frozen=True)
class AttentionLayer:
    """One scored attention site: per head, the key position with the most mass."""

    label: str
    module: str
    positions: tuple[int, ...]
    """Per head: the key position receiving the largest mean mass."""
    masses: tuple[float, ...]
    """Per head: that mean mass."""
    is_sink: tuple[bool, ...]
    """Per head: the probe's flag (mass over both thresholds)."""
    is_causal: bool
    uniform_share: float
    """Mass a key would get under uniform attention, averaged over the scored queries."""


@dataclass(frozen=True)
class ResidualLayer:
    """One scored residual site: mean |value| per dimension and its flagged dimensions."""

    label: str
    module: str
    mean_abs: tuple[float, ...]
    """Mean |value| per dimension over scored tokens (shipped to the panel as float32)."""
    median_mean_abs: float
    outliers: tuple[OutlierDim, ...]


@dataclass(frozen=True)
class PatternBlock:
    """Attention patterns of one sample, ``[layer][head][query][key]``, quantized and deflated."""

    layers: int
    heads: int
    positions: tuple[int, ...]
    """Absolute token positions the query and key axes cover (the sample's unpadded tokens)."""
    levels: int
    """Quantization levels: byte ``q`` decodes to ``(q / levels) ** 2``."""
    data: bytes = field(repr=False)
    """zlib stream of ``layers * heads * n * n`` bytes, ``n = len(positions)``."""

    def decode(self, layer: int, head: int) -> list[list[float]]:
        """One head's pattern as nested lists of probabilities (queries x keys)."""
        if not (0 <= layer < self.layers and 0 <= head < self.heads):
            raise ReportOptionError(
                f"layer must be in [0, {self.layers}) and head in [0, {self.heads}), got "
                f"({layer}, {head})."
            )
        size = len(self.positions)
        raw = zlib.decompress(self.data)
        start = (layer * self.heads + head) * size * size
        scale = 1.0 / self.levels
        return [
            [(raw[start + q * size + k] * scale) ** 2 for k in range(size)] for q in range(size)
        ]


PATTERN_ENCODING = "zlib(uint8 round(levels * sqrt(p)))"
"""How the pattern bytes encode probabilities (the panel inverts it)."""


@dataclass(frozen=True)
class ResidualSummary:
    """What the payload says of one residual site."""

    label: str
    module: str
    dims: int
    median_mean_abs: float
    outliers: tuple[OutlierDim, ...]


@dataclass(frozen=True)
class PatternSummary:
    """What the payload says of the pattern block."""

    layers: int
    heads: int
    positions: tuple[int, ...]
    """Absolute token positions the pattern axes cover (see :class:`PatternBlock`)."""
    levels: int
    encoding: str
    bytes: int


AttentionSinksStatus = Literal["flagged", "none_flagged", "unavailable"]
"""The statuses of :class:`AttentionSinksReport`."""


@dataclass(frozen=True, kw_only=True, repr=False)
class AttentionSinksReport(Report):
    """``tl.debug.attention_sinks``: sink heads per layer, outlier residual dims, patterns."""

    report_type = "attention_sinks"
    status_tones = tones({"flagged": "info", "none_flagged": "ok", "unavailable": "warning"})
    status: AttentionSinksStatus
    """``flagged``: sink heads or outlier dimensions were found (statistics, normal in trained
    models: info); ``unavailable``: the attention probabilities could not be observed."""
    tokens: tuple[str, ...] = ()
    """Token strings of the shown sample, one per position (padding included)."""
    sample: int = 0
    """Batch index whose patterns and tokens are shown (statistics pool the whole batch)."""
    layers: tuple[AttentionLayer, ...] = ()
    """Per scored attention site, in execution order (index = the layer of ``pattern(layer,
    head)``): each head's top key position, its mass and the sink flag."""
    residual: tuple[ResidualLayer, ...] = field(default=(), metadata=payload_as("residual_summary"))
    """Per scored residual site: mean |value| per dimension and the outlier dimensions (the payload
    carries ``residual_summary``, the values travel as a binary array)."""
    sink_heads: tuple[SinkHead, ...] = ()
    """Every flagged head (mass on one key position over both thresholds), across layers."""
    outlier_dims: tuple[OutlierDim, ...] = ()
    """Every flagged residual dimension (mean |value| at least ``outlier_factor`` times the median
    dimension's), across sites."""
    thresholds: Mapping[str, float] = field(default_factory=frozen_mapping)
    """The thresholds applied: ``sink_mass``, ``sink_uniform_ratio``, ``outlier_factor``."""
    patterns: PatternBlock | None = field(default=None, metadata=payload_as("pattern_summary"))
    """The shown sample's patterns, quantized and compressed (``pattern(layer, head)`` decodes one);
    None when the probabilities were not observed."""

    def pattern(self, layer: int, head: int) -> list[list[float]]:
        """The shown sample's attention pattern of ``head`` in attention layer ``layer``."""
        if self.patterns is None:
            raise ReportOptionError(
                "this report carries no attention patterns (status "
                f"{self.status!r}); see its unavailable entries."
            )
        return self.patterns.decode(layer, head)

    @property
    def residual_summary(self) -> tuple[ResidualSummary, ...]:
        """Per residual site: its outlier dimensions and median, not every dimension (those
        travel as the binary ``residual_mean_abs`` array)."""
        return tuple(
            ResidualSummary(r.label, r.module, len(r.mean_abs), r.median_mean_abs, r.outliers)
            for r in self.residual
        )

    @property
    def pattern_summary(self) -> PatternSummary | None:
        """Shape and encoding of the pattern block (its bytes travel as a binary array)."""
        if self.patterns is None:
            return None
        block = self.patterns
        return PatternSummary(
            block.layers,
            block.heads,
            block.positions,
            block.levels,
            PATTERN_ENCODING,
            self.pattern_bytes,
        )

    @property
    def pattern_bytes(self) -> int:
        """Bytes of the compressed pattern block (0 when there is none)."""
        return len(self.patterns.data) if self.patterns is not None else 0

    def panel_arrays(self) -> dict[str, Any]:
        """Binary arrays for the panel: the deflated pattern bytes (``uint8``, 1-D; the browser
        inflates them) and mean |value| per residual dim, ``(sites, dims)`` float32."""
        arrays: dict[str, Any] = {}
        if self.patterns is not None:
            arrays["patterns"] = {
                "dtype": "uint8",
                "shape": (len(self.patterns.data),),
                "data": self.patterns.data,
            }
        if self.residual and len({len(r.mean_abs) for r in self.residual}) == 1:
            arrays["residual_mean_abs"] = [list(r.mean_abs) for r in self.residual]
        return arrays


def heads_rows(
    report_layers: tuple[AttentionLayer, ...], tokens: tuple[str, ...]
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Rows of the ``heads`` table (every scored head), and its attrs."""
    rows = [
        {
            "layer": index,
            "label": layer.label,
            "module": layer.module,
            "head": head,
            "position": pos,
            "token": tokens[pos] if 0 <= pos < len(tokens) else None,
            "mass": mass,
            "is_sink": flag,
        }
        for index, layer in enumerate(report_layers)
        for head, (pos, mass, flag) in enumerate(zip(layer.positions, layer.masses, layer.is_sink))
    ]
    return rows, {"heads": len(rows), "sinks": sum(r["is_sink"] for r in rows)}


def outlier_rows(
    residual: tuple[ResidualLayer, ...],
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Rows of the ``outlier_dims`` table, and its attrs."""
    rows: list[dict[str, Any]] = [
        {
            "layer": index,
            "label": layer.label,
            "module": layer.module,
            "dim": o.dim,
            "factor": o.factor,
            "mean_abs": layer.mean_abs[o.dim],
            "median_mean_abs": layer.median_mean_abs,
        }
        for index, layer in enumerate(residual)
        for o in layer.outliers
    ]
    return rows, {
        "sites": len(residual),
        "max_factor": max((r["factor"] for r in rows), default=math.nan),
    }


HEADS_COLUMNS = ("layer", "label", "module", "head", "position", "token", "mass", "is_sink")
OUTLIER_COLUMNS = ("layer", "label", "module", "dim", "factor", "mean_abs", "median_mean_abs")

__all__ = [
    "HEADS_COLUMNS",
    "OUTLIER_COLUMNS",
    "AttentionLayer",
    "AttentionSinksReport",
    "OutlierDim",
    "PatternBlock",
    "ResidualLayer",
    "SinkHead",
    "UnseenAttention",
    "heads_rows",
    "outlier_rows",
]
