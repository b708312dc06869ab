"""``SinkProbe``: attention sinks and outlier residual dimensions, live, adding no op to a trace.

The spec's pending private path ``torchlens.debug._checks._sinks.SinkProbe`` is served publicly
as ``tl.debug.SinkProbe``. It reports statistics and flags, never a ``CheckFinding``: sinks and
outlier dimensions are normal in trained language models.

Defaults, and why (measured by tests/probes/test_sinks_minilm.py on all-MiniLM-L6-v2, four fixed
sentences, eager attention):

* A head is a *sink* when the mean over scored queries of its attention on one key position is
  >= ``sink_mass`` = 0.5 (that key then gets more than all the other keys together) and
  >= ``sink_uniform_ratio`` = 2 times the share uniform attention would give it (so a 2-token
  sequence, where uniform attention already puts 0.5 on each key, flags nothing). Trained
  MiniLM: 39 of the 48 heads of layers 1-4 put 0.50-0.89 of their attention on [CLS] (the
  other 9 heads: 0.18-0.50), layer 0 heads 0.16-0.40, layer 5 heads 0.25-0.51; its random-init
  twin puts at most 0.11 on any position (uniform share 0.09). 0.5 separates the two models.
* Rows where one key is visible (the first query of a causal pattern) are not scored: all their
  mass sits on that key by construction.
* A residual dimension is an *outlier* when its mean |value| over scored tokens is >=
  ``outlier_factor`` = 6 times that of the (lower) median dimension. Trained MiniLM block
  outputs: dims 223 and 157 reach 6.1-12.5x in layers 0-4 (7 flags); the random-init twin peaks
  at 2.7x. Within the trained model 6x is a round cut, not a clean gap: the largest unflagged
  dim of those layers reaches 4.5-5.9x, so read flags near 6x as borderline.
* With ``attention_mask`` (``(batch, keys)``, 1 = real token), padded queries and padded tokens
  are not scored, so padding leaves the statistics equal to those of the unpadded sequences.

Cost: per attention value a few reductions over ``(batch, heads, queries, keys)`` and one host
sync (about 0.5 ms for 12 heads x 128 x 128 on one CPU thread); per residual value one
``abs().sum`` over tokens. On MiniLM with 128 tokens the probed capture measured 1.26-1.30x the
plain forward (capture alone 1.17-1.23x; min of 21 interleaved single-thread runs,
benchmarks/bench_sinks.py). Statistics accumulate over every capture the plan runs in, until
``reset()``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

import torch

from ...capture import Selector
from ...errors import DiagnosticArgumentError
from ...options import HookPlan, Site
from ...report._attention_sinks import AttentionLayer, OutlierDim, ResidualLayer, SinkHead
from ..activations._probes import check_selectors

SINK_MASS = 0.5
"""Mean attention on one key position at or above which a head is a sink (see module docstring)."""
SINK_UNIFORM_RATIO = 2.0
"""A sink also needs at least this many times the uniform share (guards very short sequences)."""
OUTLIER_FACTOR = 6.0
"""Mean |value| of a dimension over the median dimension's at or above which it is an outlier."""
ROW_SUM_TOLERANCE = {torch.float16: 1e-2, torch.bfloat16: 2e-2}
"""Largest |row sum - 1| of an attention pattern; float32/float64 rows use 1e-3."""

SiteKind = Literal["attention", "residual"]


class _Site:
    """Accumulated statistics of one site; ``reason`` is set when a call could not be scored."""

    def __init__(self, site: Site, kind: SiteKind) -> None:
        self.label, self.module, self.kind = site.label, site.module, kind
        self.calls = self.skipped_calls = 0
        self.reason: str | None = None
        self.sums: torch.Tensor | None = None  # attention (heads, keys) / residual (dims,)
        self.rows: torch.Tensor | float = 0.0  # scored queries / tokens
        self.uniform: torch.Tensor | float = 0.0  # attention only: sum of 1 / visible keys
        self.is_causal = True

    def skip(self, reason: str) -> None:
        self.skipped_calls += 1
        self.reason = reason

    def add(self, sums: torch.Tensor, rows: torch.Tensor, uniform: torch.Tensor | float) -> None:
        """Accumulate one call; ``sums`` is a fresh reduction result, owned from here on."""
        sums = sums.double()
        if self.sums is None:
            self.sums = sums
        else:
            if sums.shape[-1] > self.sums.shape[-1]:  # longer sequence: widen the key axis
                sums, self.sums = self.sums, sums
            self.sums[..., : sums.shape[-1]] += sums
        self.rows = self.rows + rows
        self.uniform = self.uniform + uniform
        self.calls += 1


class SinkProbe:
    """Find attention-sink heads and outlier residual dimensions on the capture hook seam.

    Statistics and flags, never a ``CheckFinding``. The spec's pending private spelling
    ``torchlens.debug._checks._sinks.SinkProbe`` is this class, served as ``tl.debug.SinkProbe``.

    Args:
        attention: selectors of attention-probability sites, values ``(batch, heads, queries,
            keys)`` with rows summing to 1 (e.g. ``[tl.func("softmax")]``). Other values
            matching the selector are not scored; ``facts()["skipped"]`` says why.
        residual: selectors of residual-stream sites, values ``(batch, tokens, dims)`` (e.g.
            block outputs ``[tl.module("transformer.h.*")]``).
        attention_mask: optional ``(batch, keys)`` mask, nonzero for real tokens, for every
            value this probe sees; padded queries and tokens are then not scored.
        sink_mass, sink_uniform_ratio, outlier_factor: thresholds (defaults and their reasons
            in the module docstring).

    Raises:
        DiagnosticArgumentError: no selector at all, a non-selector, a bad mask or threshold.

    Example:
        >>> import torch, torchlens_nb as tl
        >>> from torch import nn
        >>> class Attend(nn.Module):
        ...     def forward(self, logits): return torch.softmax(logits, dim=-1)
        >>> logits = torch.zeros(1, 2, 4, 4); logits[0, 0, :, 0] = 10.0   # head 0 -> key 0
        >>> probe = tl.debug.SinkProbe(attention=[tl.func("softmax")])
        >>> _ = tl.trace(Attend(), logits,
        ...              capture=tl.options.CaptureOptions(hooks=probe.hook_plan()))
        >>> [(s.head, s.position, round(s.mass, 4)) for s in probe.sink_heads]
        [(0, 0, 0.9999)]
    """

    def __init__(
        self,
        attention: Iterable[Any] = (),
        residual: Iterable[Any] = (),
        *,
        attention_mask: torch.Tensor | None = None,
        sink_mass: float = SINK_MASS,
        sink_uniform_ratio: float = SINK_UNIFORM_RATIO,
        outlier_factor: float = OUTLIER_FACTOR,
    ) -> None:
        self._attention = _selectors(attention, "attention")
        self._residual = _selectors(residual, "residual")
        if not self._attention and not self._residual:
            raise DiagnosticArgumentError(
                "SinkProbe needs attention=[...] and/or residual=[...] selectors, e.g. "
                "SinkProbe(attention=[tl.func('softmax')], residual=[tl.module('layer')])."
            )
        for name, value, low in (
            ("sink_mass", sink_mass, 0.0),
            ("sink_uniform_ratio", sink_uniform_ratio, 1.0),
            ("outlier_factor", outlier_factor, 1.0),
        ):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > low:
                raise DiagnosticArgumentError(f"{name} must be a number > {low:g}, got {value!r}.")
        if attention_mask is not None and (
            not isinstance(attention_mask, torch.Tensor) or attention_mask.dim() != 2
        ):
            raise DiagnosticArgumentError(
                "attention_mask must be a (batch, keys) tensor, nonzero for real tokens (the "
                f"tokenizer's attention_mask), got {_describe(attention_mask)}."
            )
        self.thresholds = {
            "sink_mass": float(sink_mass),
            "sink_uniform_ratio": float(sink_uniform_ratio),
            "outlier_factor": float(outlier_factor),
        }
        """The thresholds in use (plain floats)."""
        self._mask = None if attention_mask is None else attention_mask.detach().bool()
        self._sites: dict[tuple[str, str, SiteKind], _Site] = {}
        self._scored: dict[SiteKind, list[Any]] = {}  # results, until the next value arrives

    # ----- the seam ------------------------------------------------------------------------
    def hook_plan(self) -> HookPlan:
        """The plan to pass as ``CaptureOptions(hooks=...)``."""
        return HookPlan(
            tuple((sel, self._on_attention) for sel in self._attention)
            + tuple((sel, self._on_residual) for sel in self._residual)
        )

    def _site(self, site: Site, kind: SiteKind) -> _Site:
        self._scored.clear()
        key = (site.label, site.module, kind)
        if key not in self._sites:
            self._sites[key] = _Site(site, kind)
        return self._sites[key]

    def _on_attention(self, site: Site, value: Any) -> None:
        state = self._site(site, "attention")
        with torch.no_grad():
            reason = _score_attention(state, value, self._mask)
        if reason is not None:
            state.skip(reason)

    def _on_residual(self, site: Site, value: Any) -> None:
        state = self._site(site, "residual")
        with torch.no_grad():
            reason = _score_residual(state, value, self._mask)
        if reason is not None:
            state.skip(reason)

    def reset(self) -> None:
        """Forget every statistic (selectors, mask and thresholds stay)."""
        self._sites.clear()
        self._scored.clear()

    # ----- results -------------------------------------------------------------------------
    def _scored_attention(self) -> list[tuple[_Site, AttentionLayer]]:
        if "attention" in self._scored:
            return self._scored["attention"]
        out = self._scored["attention"] = []
        for state in self._sites.values():
            if state.kind != "attention" or state.sums is None or not float(state.rows):
                continue
            mean = state.sums / float(state.rows)
            masses, positions = mean.max(dim=-1)
            uniform = float(state.uniform) / float(state.rows)
            floor = max(
                self.thresholds["sink_mass"], self.thresholds["sink_uniform_ratio"] * uniform
            )
            out.append(
                (
                    state,
                    AttentionLayer(
                        state.label,
                        state.module,
                        tuple(positions.tolist()),
                        tuple(masses.tolist()),
                        tuple(m >= floor for m in masses.tolist()),
                        state.is_causal,
                        uniform,
                    ),
                )
            )
        return out

    def _scored_residual(self) -> list[tuple[_Site, ResidualLayer]]:
        if "residual" in self._scored:
            return self._scored["residual"]
        out = self._scored["residual"] = []
        for state in self._sites.values():
            if state.kind != "residual" or state.sums is None or not float(state.rows):
                continue
            mean_abs = state.sums / float(state.rows)
            median = float(mean_abs.median())
            if not (median > 0 and bool(torch.isfinite(mean_abs).all())):
                continue
            factors = (mean_abs / median).tolist()
            flagged = sorted(
                (d for d, f in enumerate(factors) if f >= self.thresholds["outlier_factor"]),
                key=lambda d: -factors[d],
            )
            out.append(
                (
                    state,
                    ResidualLayer(
                        state.label,
                        state.module,
                        tuple(mean_abs.tolist()),
                        median,
                        tuple(OutlierDim(state.label, d, factors[d]) for d in flagged),
                    ),
                )
            )
        return out

    def attention_layers(self) -> tuple[AttentionLayer, ...]:
        """Every scored attention site, in first-seen (execution) order."""
        return tuple(layer for _, layer in self._scored_attention())

    def residual_layers(self) -> tuple[ResidualLayer, ...]:
        """Every scored residual site, in first-seen order, with its mean |value| per dim."""
        return tuple(layer for _, layer in self._scored_residual())

    @property
    def sink_heads(self) -> tuple[SinkHead, ...]:
        """Flagged heads, site by site in execution order, heads ascending."""
        return tuple(
            SinkHead(layer.label, head, pos, mass)
            for layer in self.attention_layers()
            for head, (pos, mass, flag) in enumerate(
                zip(layer.positions, layer.masses, layer.is_sink)
            )
            if flag
        )

    @property
    def outlier_dims(self) -> tuple[OutlierDim, ...]:
        """Flagged dimensions, site by site in execution order, largest factor first."""
        return tuple(o for layer in self.residual_layers() for o in layer.outliers)

    def facts(self) -> dict[str, Any]:
        """Per-site statistics as plain data (a fresh dict each call).

        Keys: ``thresholds``; ``attention`` (per scored site: label, module, calls, is_causal,
        rows_scored, uniform_share, and per head sink position, mass and flag); ``residual``
        (per scored site: label, module, calls, dims, tokens_scored, median_mean_abs,
        max_factor, outliers as ``[dim, factor]``); ``skipped`` (label, module, kind, calls
        not scored and the reason of the last one).
        """
        attention = [
            {
                "label": a.label,
                "module": a.module,
                "calls": s.calls,
                "is_causal": a.is_causal,
                "rows_scored": int(s.rows),
                "uniform_share": a.uniform_share,
                "heads": [
                    {"head": h, "position": p, "mass": m, "is_sink": f}
                    for h, (p, m, f) in enumerate(zip(a.positions, a.masses, a.is_sink))
                ],
            }
            for s, a in self._scored_attention()
        ]
        residual = [
            {
                "label": r.label,
                "module": r.module,
                "calls": s.calls,
                "dims": len(r.mean_abs),
                "tokens_scored": int(s.rows),
                "median_mean_abs": r.median_mean_abs,
                "max_factor": max(r.mean_abs) / r.median_mean_abs,
                "outliers": [[o.dim, o.factor] for o in r.outliers],
            }
            for s, r in self._scored_residual()
        ]
        scored = {(a["label"], a["module"], "attention") for a in attention} | {
            (r["label"], r["module"], "residual") for r in residual
        }
        skipped = [
            {
                "label": s.label,
                "module": s.module,
                "kind": s.kind,
                "calls": s.skipped_calls,
                "reason": s.reason or _empty_reason(s),
            }
            for s in self._sites.values()
            if s.reason is not None or (s.label, s.module, s.kind) not in scored
        ]
        return {
            "thresholds": dict(self.thresholds),
            "attention": attention,
            "residual": residual,
            "skipped": skipped,
        }


def _selectors(items: Iterable[Any], what: str) -> tuple[Selector, ...]:
    return check_selectors(items, f"SinkProbe({what}=...)")


def _describe(value: Any) -> str:
    shape = getattr(value, "shape", None)
    return (
        f"{type(value).__name__} of shape {tuple(shape)}"
        if shape is not None
        else type(value).__name__
    )


def _empty_reason(state: _Site) -> str:
    if state.kind == "residual" and state.sums is not None and float(state.rows):
        if not bool(torch.isfinite(state.sums).all()):
            return "holds NaN or Inf: not scored."
        return "the median dimension's mean |value| is 0: factors are undefined."
    return "no query or token was left to score (every row padded or one key visible)."


def _mask_for(
    mask: torch.Tensor | None, batch: int, length: int, device: torch.device
) -> tuple[torch.Tensor | None, str | None]:
    if mask is None:
        return None, None
    if tuple(mask.shape) != (batch, length):
        return None, (
            f"attention_mask has shape {tuple(mask.shape)} but this value has batch "
            f"{batch} and {length} positions."
        )
    return mask.to(device), None


def _score_attention(state: _Site, value: Any, mask: torch.Tensor | None) -> str | None:
    """Add one attention value to ``state``; return why it cannot be scored, or None."""
    if not isinstance(value, torch.Tensor) or not value.is_floating_point():
        return "not a floating-point tensor."
    if value.dim() != 4:
        return (
            f"shape {tuple(value.shape)} is not (batch, heads, queries, keys): not an "
            "attention pattern (a 3-D softmax folds heads into the batch)."
        )
    batch, heads, queries, keys = value.shape
    if queries > keys or queries == 0:
        return (
            f"{queries} queries over {keys} keys: not an attention pattern (needs queries <= keys)."
        )
    if state.sums is not None and state.sums.shape[0] != heads:
        return f"{heads} heads, where earlier calls had {state.sums.shape[0]}."
    key_valid, reason = _mask_for(mask, batch, keys, value.device)
    if reason:
        return reason
    if key_valid is None:
        key_valid = torch.ones(batch, keys, dtype=torch.bool, device=value.device)
    offset = keys - queries
    query_valid = key_valid[:, offset:]
    probs = value.detach().float()
    row_sums = probs.sum(-1)  # a NaN or Inf anywhere in a row makes its sum non-finite
    # Query 0 of a causal pattern sees keys 0..offset only: mass beyond them rules causality out
    # without the full upper-triangle pass (which then runs only for patterns that may be causal).
    deviation, upper, finite = torch.stack(
        [
            torch.where(query_valid[:, None, :], (row_sums - 1).abs(), 0.0).amax(),
            probs[:, :, 0, offset + 1 :].amax() if offset + 1 < keys else probs.new_zeros(()),
            torch.isfinite(row_sums).all().float(),
        ]
    ).tolist()
    if not finite:
        return "holds NaN or Inf: not scored."
    if upper == 0.0 and queries > 1:
        upper = float(torch.triu(probs, offset + 1).amax())
    tolerance = ROW_SUM_TOLERANCE.get(value.dtype, 1e-3)
    if not deviation <= tolerance:
        return (
            f"rows do not sum to 1 over the last axis (largest |sum - 1| = {deviation:.3g}): "
            "not attention probabilities (e.g. a softmax over another axis)."
        )
    # Masked logits give exact zeros (exp(-inf)); a sharp non-causal head still leaves > 0.
    is_causal = queries > 1 and upper == 0.0
    if is_causal:
        visible = key_valid.cumsum(-1)[:, offset:]
    else:
        visible = key_valid.sum(-1, keepdim=True).expand(batch, queries)
    weight = (query_valid & (visible > 1)).float()
    state.is_causal = state.is_causal and is_causal
    # (batch, 1, 1, queries) @ (batch, heads, queries, keys): the weighted sum over queries.
    state.add(
        (weight[:, None, None, :] @ probs).sum(0).squeeze(-2),
        weight.sum(),
        (weight / visible.clamp(min=1)).sum(),
    )
    return None


def _score_residual(state: _Site, value: Any, mask: torch.Tensor | None) -> str | None:
    """Add one residual value to ``state``; return why it cannot be scored, or None."""
    if not isinstance(value, torch.Tensor) or not value.is_floating_point():
        return "not a floating-point tensor."
    if value.dim() < 2:
        return f"shape {tuple(value.shape)} has no (tokens, dims) axes."
    if state.sums is not None and state.sums.shape[0] != value.shape[-1]:
        return f"{value.shape[-1]} dims, where earlier calls had {state.sums.shape[0]}."
    flat = value.detach()
    if mask is not None:
        if value.dim() < 3:
            return (
                f"shape {tuple(value.shape)} has no token axis to apply the (batch, tokens) "
                "attention_mask to."
            )
        valid, reason = _mask_for(mask, value.shape[0], value.shape[1], value.device)
        if reason:
            return reason
        flat = flat[valid]
    tokens = flat.reshape(-1, value.shape[-1])
    state.add(tokens.float().abs().sum(0), torch.tensor(float(tokens.shape[0])), 0.0)
    return None


__all__ = ["OUTLIER_FACTOR", "SINK_MASS", "SINK_UNIFORM_RATIO", "SinkProbe"]
