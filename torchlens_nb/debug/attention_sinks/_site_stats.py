"""What the sink probe accumulates per site, and the per-value reductions that feed it.

``score_attention`` adds one ``(batch, heads, queries, keys)`` probability value to a site's
:class:`SiteStats` (the mean over scored queries of the mass on each key, and the uniform share),
``score_residual`` one ``(batch, tokens, dims)`` value (the sum of |value| per dimension). Each
returns why a value cannot be scored, or None; the probe records the reason as a skip. Costs are
in ``_probe.py``'s module docstring.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import torch

ROW_SUM_TOLERANCE = {torch.float16: 1e-2, torch.bfloat16: 2e-2}
"""Largest |row sum - 1| of an attention pattern; float32/float64 rows use 1e-3."""


SiteKind = Literal["attention", "residual"]


class SiteStats:
    """Accumulated statistics of one site; ``reason`` is set when a call could not be scored."""

    def __init__(self, label: str, module: str, func: str, kind: SiteKind) -> None:
        self.label, self.module, self.func, self.kind = label, module, func, kind
        self.calls = self.skipped_calls = 0
        self.reason: str | None = None
        self.sums: torch.Tensor | None = None  # attention (heads, keys) / residual (dims,)
        self.rows = 0.0  # scored queries / tokens
        self.uniform = 0.0  # attention only: sum of 1 / visible keys
        self.is_causal = True

    def skip(self, reason: str) -> None:
        self.skipped_calls += 1
        self.reason = reason

    def add(self, sums: torch.Tensor, rows: float, uniform: float) -> None:
        """Accumulate one call; ``sums`` is a fresh reduction result, owned from here on."""
        sums = sums.double()
        if self.sums is None:
            self.sums = sums
        else:
            if sums.shape[-1] > self.sums.shape[-1]:  # longer sequence: widen the key axis
                sums, self.sums = self.sums, sums
            self.sums[..., : sums.shape[-1]] += sums
        self.rows += rows
        self.uniform += uniform
        self.calls += 1


def empty_reason(state: SiteStats) -> str:
    if state.kind == "residual" and state.sums is not None and state.rows:
        if not bool(torch.isfinite(state.sums).all()):
            return "holds NaN or Inf: not scored."
        return "the median dimension's mean |value| is 0: factors are undefined."
    return "no query or token was left to score (every row padded or one key visible)."


def _mask_for(mask: torch.Tensor | None, batch: int, length: int) -> str | None:
    """Why the (host) mask does not fit a value of ``batch`` x ``length``, or None."""
    if mask is not None and tuple(mask.shape) != (batch, length):
        return (
            f"attention_mask has shape {tuple(mask.shape)} but this value has batch "
            f"{batch} and {length} positions."
        )
    return None


_WIDE = (torch.float32, torch.float64)
"""Dtypes reduced as they are; half precision is widened to float32 first."""


def _query_weights(
    mask: torch.Tensor | None,
    batch: int,
    queries: int,
    keys: int,
    is_causal: bool,
    no_key: torch.Tensor | None = None,
) -> tuple[torch.Tensor | None, float, float]:
    """Host-side ``(weight (batch, queries) or None when every query counts, rows, uniform)``:
    a query is scored when it is real, sees more than one real key and is not in ``no_key``
    (host ``(batch, queries)``: rows of zeros); ``uniform`` sums 1 / visible keys over the
    scored queries. Reads only host tensors: no device sync."""
    offset = keys - queries
    if mask is None and not is_causal and no_key is None:
        rows = float(batch * queries) if keys > 1 else 0.0
        return (None if keys > 1 else torch.zeros(batch, queries)), rows, rows / keys
    key_valid = torch.ones(batch, keys, dtype=torch.bool) if mask is None else mask
    if is_causal:
        visible = key_valid.cumsum(-1)[:, offset:]
    else:
        visible = key_valid.sum(-1, keepdim=True).expand(batch, queries)
    kept = key_valid[:, offset:] & (visible > 1)
    weight = (kept if no_key is None else kept & ~no_key).double()
    rows = float(weight.sum())
    return weight, rows, float((weight / visible.clamp(min=1)).sum())


def score_attention(state: SiteStats, value: Any, mask: torch.Tensor | None) -> str | None:
    """Add one attention value to ``state``; return why it cannot be scored, or None.

    ``mask`` is the probe's host (CPU) ``(batch, keys)`` bool mask. One host read per call (the
    three checks below, stacked); weights and counts come from the host mask.
    """
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
    reason = _mask_for(mask, batch, keys)
    if reason:
        return reason
    if mask is not None and bool(mask.all()):
        mask = None  # every token is real: the unmasked path gives the same sums, cheaper
    offset = keys - queries
    probs = value.detach()
    if probs.dtype not in _WIDE:
        probs = probs.float()
    row_sums = probs.sum(-1)
    spread = (row_sums - 1).abs()
    if mask is not None:
        spread = torch.where(mask[:, None, offset:].to(probs.device), spread, 0.0)
    # The total of the row sums is finite exactly when every row is (rows sum to about 1). Query
    # 0 of a causal pattern sees keys 0..offset only: mass beyond them rules causality out
    # without the full upper-triangle pass (which then runs only for patterns that may be causal).
    # A row of zeros is a query that sees no key (a fully masked padded query, as the fused
    # recompute writes it: SDPA itself returns a finite output there): not scored, like padding.
    empty = row_sums == 0
    spread = torch.where(empty, 0.0, spread)
    checks = [spread.amax(), row_sums.sum(), empty.sum()]
    if offset + 1 < keys:
        checks.append(probs[:, :, 0, offset + 1 :].amax())
    deviation, total, num_empty, *rest = torch.stack(checks).tolist()
    upper = rest[0] if rest else 0.0
    if not math.isfinite(total):
        return "holds NaN or Inf: not scored."
    no_key: torch.Tensor | None = None
    if num_empty:
        no_key = empty.cpu()
        if not bool((no_key == no_key[:, :1]).all()):
            return "some heads see no key for a query that other heads see: not scored."
        no_key = no_key[:, 0]
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
    weight, rows, uniform = _query_weights(mask, batch, queries, keys, is_causal, no_key)
    state.is_causal = state.is_causal and is_causal
    if weight is None:  # every query counts: one reduction over batch and queries
        sums = probs.sum(dim=(0, 2))
    else:  # (batch, 1, 1, queries) @ (batch, heads, queries, keys): weighted sum over queries
        weight = weight.to(probs.device, probs.dtype)
        sums = (weight[:, None, None, :] @ probs).sum(0).squeeze(-2)
    state.add(sums, rows, uniform)
    return None


def score_residual(state: SiteStats, value: Any, mask: torch.Tensor | None) -> str | None:
    """Add one residual value to ``state``; return why it cannot be scored, or None."""
    if not isinstance(value, torch.Tensor) or not value.is_floating_point():
        return "not a floating-point tensor."
    if value.dim() < 2 or value.shape[-1] == 0:
        return f"shape {tuple(value.shape)} has no (tokens, dims) axes."
    dims = value.shape[-1]
    if state.sums is not None and state.sums.shape[0] != dims:
        return f"{dims} dims, where earlier calls had {state.sums.shape[0]}."
    flat = value.detach()
    if flat.dtype not in _WIDE:
        flat = flat.float()
    if mask is not None:
        if value.dim() < 3:
            return (
                f"shape {tuple(value.shape)} has no token axis to apply the (batch, tokens) "
                "attention_mask to."
            )
        reason = _mask_for(mask, value.shape[0], value.shape[1])
        if reason:
            return reason
        if bool(mask.all()):
            mask = None  # every token is real: the unmasked sums
    if mask is None:
        state.add(flat.abs().sum(dim=tuple(range(flat.dim() - 1))), flat.numel() / dims, 0.0)
    elif value.dim() == 3:  # (batch, 1, tokens) @ (batch, tokens, dims): the masked sum
        weight = mask.to(flat.device, flat.dtype)[:, None, :]
        state.add((weight @ flat.abs()).sum(0).squeeze(0), float(mask.sum()), 0.0)
    else:
        tokens = flat[mask.to(flat.device)].reshape(-1, dims)
        state.add(tokens.abs().sum(0), float(tokens.shape[0]), 0.0)
    return None
