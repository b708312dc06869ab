"""Fused attention: the calls whose probabilities never reach a softmax site, and their recompute.

``F.scaled_dot_product_attention`` (every Hugging Face model's default ``sdpa``) and
``F.multi_head_attention_forward`` (``nn.MultiheadAttention``, ``nn.Transformer*``) compute the
attention probabilities inside one call and return only the attended values. A capture records
each such call as one op; the probe names every one it could not see (:data:`UNSEEN_REASONS`).

With ``fused_attention="recompute"`` a :class:`FusedAttentionMode` entered around the capture
(``with probe:``) sees each fused call's arguments below the recording mode: after the call
returns, unchanged, it recomputes the probabilities under ``no_grad`` from those arguments
(:func:`sdpa_probabilities`; ``nn.MultiheadAttention`` is called a second time with
``need_weights=True, average_attn_weights=False`` and no dropout) and hands them to the probe,
which scores them at the fused op's site. No random number is drawn, the model's outputs are the
ones it computed itself (tests/attention_sinks/test_fused_attention.py checks both against an
eager reference), and the extra cost is one ``(batch, heads, queries, keys)`` float32 softmax per
fused call. ``tl.bridge.transformers.record_attention`` enters the same mode around each Hugging
Face attention-interface call and reads :meth:`FusedCall.output_error` as its SDPA cross-check.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from ...capture import func_name

SDPA = "scaled_dot_product_attention"
MHA = "multi_head_attention_forward"
FUSED_ATTENTION = (SDPA, MHA)
"""Ops that compute attention inside one call: their probabilities never reach a softmax site."""

_RECOMPUTE_HINT = (
    "SinkProbe(..., fused_attention='recompute') with the capture inside `with probe:`"
)
UNSEEN_REASONS = {
    SDPA: (
        "fused scaled_dot_product_attention never materialises its attention probabilities: "
        'use eager attention (Hugging Face: attn_implementation="eager"), or '
        f"{_RECOMPUTE_HINT}."
    ),
    MHA: (
        "nn.MultiheadAttention keeps its probabilities inside one call (and averages them over "
        "heads even with need_weights=True): call it with need_weights=True, "
        f"average_attn_weights=False to get them per head, or use {_RECOMPUTE_HINT}."
    ),
}
"""Why a fused call was not scored, and how to see it, per op name."""
NOT_ENTERED = (
    "fused_attention='recompute' computes the probabilities only while the capture runs inside "
    "`with probe:` (enter it around tl.trace(...)); this call ran outside it."
)
NOT_CLAIMED = (
    "computed inside `with probe:` but no capture scored it: run the model with "
    "tl.trace(model, inputs, capture=tl.options.CaptureOptions(hooks=probe.hook_plan()))."
)


def _sdpa_signature(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> None:
    """The parameters of ``F.scaled_dot_product_attention`` (torch 2.5+), to bind its calls."""


_SDPA_PARAMS = inspect.signature(_sdpa_signature)
_MHA_PARAMS = inspect.signature(F.multi_head_attention_forward)


def sdpa_probabilities(args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.Tensor:
    """``softmax(q @ k^T * scale + mask)`` of one ``scaled_dot_product_attention`` call, float32,
    ``(..., heads, queries, keys)``: the math reference in the function's documentation (causal
    mask aligned top-left, boolean masks keep True, float masks are added, grouped-query keys
    repeated when ``enable_gqa``); a query that sees no key gets a row of zeros."""
    call = _SDPA_PARAMS.bind(*args, **kwargs)
    call.apply_defaults()
    bound = call.arguments
    query, key = bound["query"].float(), bound["key"].float()
    if bound["enable_gqa"] and key.shape[-3] != query.shape[-3]:
        key = key.repeat_interleave(query.shape[-3] // key.shape[-3], dim=-3)
    scale = bound["scale"] if bound["scale"] is not None else 1.0 / math.sqrt(query.shape[-1])
    logits = (query @ key.transpose(-2, -1)) * scale
    queries, keys = logits.shape[-2:]
    if bound["is_causal"]:
        causal = torch.ones(queries, keys, dtype=torch.bool, device=logits.device).tril()
        logits = logits.masked_fill(~causal, -math.inf)
    mask = bound["attn_mask"]
    if mask is not None:
        if mask.dtype == torch.bool:
            logits = logits.masked_fill(~mask, -math.inf)
        else:
            logits = logits + mask.float()
    # a query whose mask hides every key (a padded query) has a softmax of NaN, where SDPA
    # returns a finite output: its row is written as zeros, which the probe does not score
    no_key = torch.isneginf(logits).all(dim=-1, keepdim=True)
    return logits.softmax(dim=-1).masked_fill(no_key, 0.0)


def mha_probabilities(args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.Tensor:
    """Per-head weights of one ``F.multi_head_attention_forward`` call, ``(batch, heads,
    queries, keys)``: the same call again with ``need_weights=True``,
    ``average_attn_weights=False`` and no dropout (so no random number is drawn)."""
    call = _MHA_PARAMS.bind(*args, **kwargs)
    call.arguments.update(
        need_weights=True, average_attn_weights=False, dropout_p=0.0, training=False
    )
    weights = F.multi_head_attention_forward(*call.args, **call.kwargs)[1]
    assert weights is not None  # need_weights=True always returns them
    return weights if weights.dim() == 4 else weights.unsqueeze(0)  # unbatched: (heads, L, S)


_RECOMPUTE: dict[str, Callable[[tuple[Any, ...], dict[str, Any]], torch.Tensor]] = {
    SDPA: sdpa_probabilities,
    MHA: mha_probabilities,
}


@dataclass(frozen=True)
class FusedCall:
    """One fused attention call :class:`FusedAttentionMode` saw, with its recomputed
    probabilities (internal: the tensors are the call's own, never copied)."""

    name: str
    """:data:`SDPA` or :data:`MHA`."""
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    output: torch.Tensor
    """The call's first output (what a capture's hook is shown, so a probe can pair them)."""
    probabilities: torch.Tensor
    """float32 ``(..., heads, queries, keys)``, from :func:`sdpa_probabilities` or
    :func:`mha_probabilities`."""

    def output_error(self) -> float | None:
        """``max |probabilities @ value - output|`` of an SDPA call (one host sync): near float
        rounding when the probabilities are the ones the kernel used, large under attention
        dropout. None for ``nn.MultiheadAttention``, whose value is projected inside the call."""
        if self.name != SDPA:
            return None
        call = _SDPA_PARAMS.bind(*self.args, **self.kwargs)
        call.apply_defaults()
        value = call.arguments["value"].float()
        heads = self.probabilities.shape[-3]
        if call.arguments["enable_gqa"] and value.shape[-3] != heads:
            value = value.repeat_interleave(heads // value.shape[-3], dim=-3)
        with torch.no_grad(), torch._C.DisableTorchFunction():
            return float((self.probabilities @ value - self.output.float()).abs().max())


class FusedAttentionMode(TorchFunctionMode):
    """Recompute the probabilities of each fused attention call it sees.

    ``on_call(call)`` receives a :class:`FusedCall` after the call returned, unchanged. The
    recompute runs under ``no_grad`` with torch-function handling off, so a capture entered
    outside this mode records none of it. Private: ``SinkProbe.__enter__`` installs it below a
    capture's recording mode; ``tl.bridge.transformers.record_attention`` around each Hugging
    Face attention-interface call.
    """

    def __init__(self, on_call: Callable[[FusedCall], None]) -> None:
        super().__init__()
        self._on_call = on_call

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = func_name(func)
        recompute = _RECOMPUTE.get(name)
        if recompute is not None:
            first = out if isinstance(out, torch.Tensor) else out[0]
            with torch.no_grad(), torch._C.DisableTorchFunction():
                probabilities = recompute(tuple(args), kwargs)
            self._on_call(FusedCall(name, tuple(args), kwargs, first, probabilities))
        return out


__all__ = [
    "FUSED_ATTENTION",
    "NOT_CLAIMED",
    "NOT_ENTERED",
    "SDPA",
    "UNSEEN_REASONS",
    "FusedAttentionMode",
    "FusedCall",
    "mha_probabilities",
    "sdpa_probabilities",
]
