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

import contextlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Literal, Protocol, runtime_checkable

import torch

from ..._interrupts import SigintHold, shielded
from ..._validate import check_number
from ...capture import Selector, func
from ...capture._installs import pop_mode
from ...errors import DiagnosticArgumentError
from ...options import HookPlan, Site
from ...report._attention_sinks import (
    AttentionLayer,
    OutlierDim,
    ResidualLayer,
    SinkHead,
    UnseenAttention,
)
from ..activations._probes import check_selectors
from ._fused import (
    FUSED_ATTENTION,
    NOT_CLAIMED,
    NOT_ENTERED,
    UNSEEN_REASONS,
    FusedAttentionMode,
    FusedCall,
)
from ._site_stats import SiteKind, SiteStats, empty_reason, score_attention, score_residual

SINK_MASS = 0.5
"""Mean attention on one key position at or above which a head is a sink (see module docstring)."""
SINK_UNIFORM_RATIO = 2.0
"""A sink also needs at least this many times the uniform share (guards very short sequences)."""
OUTLIER_FACTOR = 6.0
"""Mean |value| of a dimension over the median dimension's at or above which it is an outlier."""
_FUSED_SITES = func(*FUSED_ATTENTION)
"""The selector of every fused attention op (built once: a selector compiles its patterns)."""
FusedAttention = Literal["disclose", "recompute"]
"""What the probe does with fused attention calls (see :class:`SinkProbe`)."""
RECORDED = "record_attention"
"""The ``func`` of a site scored from a recording (its label and module are the module address)."""


@runtime_checkable
class AttentionRecord(Protocol):
    """Recorded attention probabilities, e.g. ``tl.bridge.transformers.record_attention``'s."""

    @property
    def sites(self) -> Sequence[str]:
        """Module address of each call."""

    @property
    def attentions(self) -> Sequence[torch.Tensor]:
        """``(batch, heads, queries, keys)`` probabilities of each call."""


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
        fused_attention: fused calls (``F.scaled_dot_product_attention``,
            ``nn.MultiheadAttention``) never materialise their probabilities. ``"disclose"``
            (the default) lists each one in :attr:`unseen_attention` and ``facts()["skipped"]``
            with the fix; ``"recompute"`` computes them from each call's arguments while the
            capture runs inside ``with probe:`` (``_fused.py``: exact against eager attention,
            one extra float32 softmax per call) and scores them at the fused op's site.
        on_attention: called as ``on_attention(site, probabilities)`` with every attention
            value the probe scored (the recomputed probabilities for a fused call), inside the
            capture with recording suspended; it must not modify the tensor.
        recording: attention probabilities recorded outside a capture, e.g. by
            ``tl.bridge.transformers.record_attention`` (any attention implementation): each
            call is scored at construction as an attention site labelled by its module address
            (``func`` ``"record_attention"``), with the same thresholds and mask.

    Raises:
        DiagnosticArgumentError: no selector at all, a non-selector, a bad mask, threshold,
            ``fused_attention``, ``on_attention`` or ``recording``; entering ``with probe:``
            twice at once.

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

        Fused attention, recomputed (the capture inside ``with probe:``):

        >>> class Fused(nn.Module):
        ...     def forward(self, q, k): return nn.functional.scaled_dot_product_attention(q, k, k)
        >>> q = torch.ones(1, 2, 4, 4); k = torch.zeros(1, 2, 4, 4); k[0, 0, 0] = 10.0
        >>> probe = tl.debug.SinkProbe(attention=[tl.func("softmax")], fused_attention="recompute")
        >>> with probe:
        ...     _ = tl.trace(Fused(), (q, k),
        ...                  capture=tl.options.CaptureOptions(hooks=probe.hook_plan()))
        >>> [(s.label, s.head, s.position) for s in probe.sink_heads]
        [('scaled_dot_product_attention_1', 0, 0)]
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
        fused_attention: FusedAttention = "disclose",
        on_attention: Callable[[Site, torch.Tensor], None] | None = None,
        recording: AttentionRecord | None = None,
    ) -> None:
        self._attention = _selectors("attention", attention)
        self._residual = _selectors("residual", residual)
        recorded = _recorded_calls(recording)
        if not self._attention and not self._residual and recording is None:
            raise DiagnosticArgumentError(
                "SinkProbe needs attention=[...] and/or residual=[...] selectors or a "
                "recording=, e.g. SinkProbe(attention=[tl.func('softmax')], "
                "residual=[tl.module('layer')])."
            )
        # a share of a head's attention: a mass above 1 can never be reached
        check_number("sink_mass", sink_mass, low=0.0, high=1.0, low_open=True)
        for name, value in (
            ("sink_uniform_ratio", sink_uniform_ratio),
            ("outlier_factor", outlier_factor),
        ):
            check_number(name, value, low=1.0, low_open=True, finite=False)
        check_attention_mask(attention_mask)
        if fused_attention not in ("disclose", "recompute"):
            raise DiagnosticArgumentError(
                "fused_attention must be 'disclose' or 'recompute' (probabilities computed from "
                f"the fused call's q and k inside `with probe:`), got {fused_attention!r}."
            )
        if on_attention is not None and not callable(on_attention):
            raise DiagnosticArgumentError(
                "on_attention must be a callable (site, probabilities) -> None, got "
                f"{type(on_attention).__name__}."
            )
        self._on_scored = on_attention
        self.fused_attention: FusedAttention = fused_attention
        """``"disclose"`` or ``"recompute"``: what happens to fused attention calls."""
        self.thresholds = {
            "sink_mass": float(sink_mass),
            "sink_uniform_ratio": float(sink_uniform_ratio),
            "outlier_factor": float(outlier_factor),
        }
        """The thresholds in use (plain floats)."""
        # host copy: query weights and token counts are read from it, never from the device
        self._mask = None if attention_mask is None else attention_mask.detach().bool().cpu()
        self._sites: dict[tuple[str, str, SiteKind], SiteStats] = {}
        self._scored: dict[SiteKind, list[Any]] = {}  # results, until the next value arrives
        self._mode: FusedAttentionMode | None = None
        self._is_entered = False
        self._sigint = SigintHold()
        """Opened by ``__enter__`` (Ctrl-C held while the mode goes on and off), closed by
        ``__exit__``."""
        # (output tensor, probabilities, op name) of the last recomputed fused call, until the
        # capture's hook for that op claims it (the output's identity pairs the two)
        self._pending: tuple[torch.Tensor, torch.Tensor, str] | None = None
        self._unclaimed: dict[str, int] = {}
        for address, probabilities in recorded:
            site = Site(address, RECORDED, address, "op", None)
            self._score(self._site(site, "attention"), site, probabilities)

    # ----- the fused-attention mode (fused_attention="recompute") -------------------------
    @shielded(on_interrupt=lambda self: self.__exit__())
    def __enter__(self) -> SinkProbe:
        """Install the recompute mode for fused attention; enter it around ``tl.trace``. A
        Ctrl-C during this or ``__exit__`` is held until it has finished, then raised with the
        mode removed (``_interrupts.py``)."""
        if self._is_entered:
            raise DiagnosticArgumentError(
                "this SinkProbe is already inside `with probe:`; enter it once, around the "
                "tl.trace(...) call."
            )
        self._is_entered = True
        self._sigint.open()
        if self.fused_attention == "recompute":
            mode = self._mode = FusedAttentionMode(self._on_fused_call)
            try:
                mode.__enter__()
            except BaseException:  # an interrupt after the push: the with block never starts
                self.__exit__()  # pops the mode if it got pushed
                raise
        return self

    @shielded()
    def __exit__(self, *exc_info: object) -> None:
        mode, self._mode, self._is_entered = self._mode, None, False
        self._claim_nothing()
        if mode is not None:
            pop_mode(mode)  # only if it is still ours on top (never "pop from empty stack")
        self._sigint.close()

    def _on_fused_call(self, call: FusedCall) -> None:
        self._claim_nothing()
        self._pending = (call.output, call.probabilities, call.name)

    def _claim_nothing(self) -> None:
        """Count a recomputed call no capture hook claimed (it ran outside any capture)."""
        if self._pending is not None:
            name = self._pending[2]
            self._unclaimed[name] = self._unclaimed.get(name, 0) + 1
            self._pending = None

    # ----- the seam ------------------------------------------------------------------------
    def hook_plan(self) -> HookPlan:
        """The plan to pass as ``CaptureOptions(hooks=...)``; with attention selectors it also
        watches every fused attention op (:data:`FUSED_ATTENTION`)."""
        fused = ((_FUSED_SITES, self._on_fused),) if self._attention else ()
        return HookPlan(
            tuple((sel, self._on_attention) for sel in self._attention)
            + fused
            + tuple((sel, self._on_residual) for sel in self._residual)
        )

    def _site(self, site: Site, kind: SiteKind) -> SiteStats:
        self._scored.clear()
        key = (site.label, site.module, kind)
        if key not in self._sites:
            self._sites[key] = SiteStats(site.label, site.module, site.func, kind)
        return self._sites[key]

    def _on_fused(self, site: Site, value: Any) -> None:
        state = self._site(site, "attention")
        pending, self._pending = self._pending, None
        if pending is not None and pending[0] is value:
            self._score(state, site, pending[1])
            return
        if pending is not None:
            self._pending = pending  # another call's; _claim_nothing counts it later
        state.skip(
            NOT_ENTERED if self.fused_attention == "recompute" else UNSEEN_REASONS[site.func]
        )

    def _on_attention(self, site: Site, value: Any) -> None:
        if site.func in FUSED_ATTENTION:  # the fused-op hook scores or names it
            return
        self._score(self._site(site, "attention"), site, value)

    def _score(self, state: SiteStats, site: Site, probabilities: Any) -> None:
        with _bare_torch():
            reason = score_attention(state, probabilities, self._mask)
            if reason is None and self._on_scored is not None:
                self._on_scored(site, probabilities.detach())
        if reason is not None:
            state.skip(reason)

    def _on_residual(self, site: Site, value: Any) -> None:
        state = self._site(site, "residual")
        with _bare_torch():
            reason = score_residual(state, value, self._mask)
        if reason is not None:
            state.skip(reason)

    def reset(self) -> None:
        """Forget every statistic (selectors, mask and thresholds stay)."""
        self._sites.clear()
        self._scored.clear()
        self._pending = None
        self._unclaimed.clear()

    # ----- results -------------------------------------------------------------------------
    def _scored_attention(self) -> list[tuple[SiteStats, AttentionLayer]]:
        if "attention" in self._scored:
            return self._scored["attention"]
        states = self._scorable("attention")
        out = self._scored["attention"] = []
        per_site: list[Any] = [None] * len(states)
        for indices, means in _site_means(states):
            masses, positions = means.max(dim=-1)
            for index, site_masses, site_positions in zip(
                indices, masses.tolist(), positions.tolist()
            ):
                per_site[index] = (site_masses, site_positions)
        for state, (masses, positions) in zip(states, per_site):
            uniform = state.uniform / state.rows
            floor = max(
                self.thresholds["sink_mass"], self.thresholds["sink_uniform_ratio"] * uniform
            )
            out.append(
                (
                    state,
                    AttentionLayer(
                        state.label,
                        state.module,
                        tuple(positions),
                        tuple(masses),
                        tuple(m >= floor for m in masses),
                        state.is_causal,
                        uniform,
                    ),
                )
            )
        return out

    def _scored_residual(self) -> list[tuple[SiteStats, ResidualLayer]]:
        if "residual" in self._scored:
            return self._scored["residual"]
        states = self._scorable("residual")
        out = self._scored["residual"] = []
        per_site: list[Any] = [None] * len(states)
        for indices, means in _site_means(states):
            medians = means.median(dim=1).values  # the lower median, as Tensor.median()
            usable = (medians > 0) & torch.isfinite(means).all(dim=1)
            factors = means / medians[:, None]
            for index, *values in zip(
                indices, means.tolist(), medians.tolist(), usable.tolist(), factors.tolist()
            ):
                per_site[index] = values
        for state, (mean_abs, median, usable, factors) in zip(states, per_site):
            if not usable:
                continue
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
                        tuple(mean_abs),
                        median,
                        tuple(OutlierDim(state.label, d, factors[d]) for d in flagged),
                    ),
                )
            )
        return out

    def _scorable(self, kind: SiteKind) -> list[SiteStats]:
        return [s for s in self._sites.values() if s.kind == kind and s.sums is not None and s.rows]

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
    def unseen_attention(self) -> tuple[UnseenAttention, ...]:
        """Fused attention calls whose probabilities were not scored, site by site in execution
        order, each with the fix; then recomputed calls no capture claimed. Empty does not mean
        "no attention": check :meth:`attention_layers` too."""
        seen = tuple(
            UnseenAttention(s.label, s.module, s.func, s.skipped_calls, s.reason or "")
            for s in self._sites.values()
            if s.func in FUSED_ATTENTION and s.skipped_calls
        )
        return seen + tuple(
            UnseenAttention(name, "", name, calls, NOT_CLAIMED)
            for name, calls in self._unclaimed.items()
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
                "reason": s.reason or empty_reason(s),
            }
            for s in self._sites.values()
            if s.reason is not None or (s.label, s.module, s.kind) not in scored
        ] + [
            {
                "label": name,
                "module": "",
                "kind": "attention",
                "calls": calls,
                "reason": NOT_CLAIMED,
            }
            for name, calls in self._unclaimed.items()
        ]
        return {
            "thresholds": dict(self.thresholds),
            "attention": attention,
            "residual": residual,
            "skipped": skipped,
        }


@contextlib.contextmanager
def _bare_torch() -> Iterator[None]:
    """No autograd and no torch-function handling for the probe's own reductions.

    The callbacks run inside the capture, whose recording mode would otherwise see each of their
    ~20 torch calls just to pass it through: scoring one MiniLM attention value (12 heads x 128 x
    128) took 640 us inside a capture and 190 us with the mode bypassed (its calls are never
    recorded either way). ``torch._C.DisableTorchFunction`` is what ``torch.overrides`` uses for
    the same purpose; it also skips tensor subclasses' ``__torch_function__``, so a subclassed
    value is reduced as the plain tensor it wraps.
    """
    with torch.no_grad(), torch._C.DisableTorchFunction():
        yield


def _site_means(states: list[SiteStats]) -> list[tuple[list[int], torch.Tensor]]:
    """``sums / rows`` of the sites, stacked by shape: ``(indices into states, means)`` per
    shape, so the results of all sites of one shape are computed and read together."""
    shapes: dict[tuple[int, ...], list[int]] = {}
    for index, state in enumerate(states):
        assert state.sums is not None
        shapes.setdefault(tuple(state.sums.shape), []).append(index)
    out = []
    for indices in shapes.values():
        sums = torch.stack([states[i].sums for i in indices])  # type: ignore[misc]
        rows = torch.tensor([states[i].rows for i in indices], dtype=sums.dtype)
        out.append((indices, sums / rows.reshape(-1, *([1] * (sums.dim() - 1)))))
    return out


def _recorded_calls(recording: Any) -> list[tuple[str, torch.Tensor]]:
    """``(site, probabilities)`` of each recorded call, validated before anything is scored."""
    if recording is None:
        return []
    sites, attentions = getattr(recording, "sites", None), getattr(recording, "attentions", None)
    if (
        not isinstance(sites, Sequence)
        or not isinstance(attentions, Sequence)
        or len(sites) != len(attentions)
        or not all(isinstance(s, str) for s in sites)
        or not all(isinstance(a, torch.Tensor) for a in attentions)
    ):
        raise DiagnosticArgumentError(
            "recording must have .sites (module addresses) and .attentions (one probability "
            "tensor per site), as tl.bridge.transformers.record_attention(model) gives; got "
            f"{type(recording).__name__}."
        )
    return list(zip(sites, attentions))


def check_attention_mask(attention_mask: Any) -> None:
    """Refuse anything but None or a 2-D ``(batch, keys)`` tensor (``DiagnosticArgumentError``)."""
    if attention_mask is not None and (
        not isinstance(attention_mask, torch.Tensor) or attention_mask.dim() != 2
    ):
        raise DiagnosticArgumentError(
            "attention_mask must be a (batch, keys) tensor, nonzero for real tokens (the "
            f"tokenizer's attention_mask), got {_describe(attention_mask)}."
        )


def _selectors(what: str, items: Iterable[Any]) -> tuple[Selector, ...]:
    return check_selectors(f"SinkProbe({what}=...)", items)


def _describe(value: Any) -> str:
    shape = getattr(value, "shape", None)
    return (
        f"{type(value).__name__} of shape {tuple(shape)}"
        if shape is not None
        else type(value).__name__
    )


__all__ = [
    "OUTLIER_FACTOR",
    "SINK_MASS",
    "SINK_UNIFORM_RATIO",
    "AttentionRecord",
    "SinkProbe",
    "check_attention_mask",
]
