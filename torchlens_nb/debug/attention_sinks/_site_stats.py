"""What the sink probe accumulates per site, and the per-value reductions that feed it.

``score_attention`` adds one ``(batch, heads, queries, keys)`` probability value to a site's
:class:`SiteStats` (the mean over scored queries of the mass on each key, and the uniform share),
``score_residual`` one ``(batch, tokens, dims)`` value (the sum of |value| per dimension). Each
returns why a value cannot be scored, or None; the probe records the reason as a skip. Costs are
in ``_probe.py``'s module docstring.
"""

from __future__ import annotations

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


def empty_reason(state: SiteStats) -> str:
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


def score_attention(state: SiteStats, value: Any, mask: torch.Tensor | None) -> str | None:
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


def score_residual(state: SiteStats, value: Any, mask: torch.Tensor | None) -> str | None:
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
