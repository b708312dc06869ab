"""``tl.debug.attention_sinks``: one call from a transformer and its inputs to a report of its
attention sinks, outlier residual dimensions and attention patterns.

It finds the sites itself: attention probabilities are ``softmax`` outputs shaped ``(batch,
heads, queries, keys)`` (the probe skips, and reports, every other softmax), and block outputs are
the members of the model's longest list of identical blocks (``encoder.layer.N`` in BERT and
MiniLM, ``transformer.h.N`` in GPT-2, ``layers.N`` in ``nn.TransformerEncoder``). One capture
with ``save=False`` runs the :class:`~torchlens_nb.debug.SinkProbe`, which hands each scored
attention value to a collector that keeps the shown sample's patterns; nothing else is kept.

Fused attention (``scaled_dot_product_attention``, ``nn.MultiheadAttention``) never materialises
the probabilities: such a model gets an ``unavailable`` report that says how to switch it to
eager attention, unless ``fused_attention="recompute"`` asks the probe to compute them.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from ..._validate import check_int
from ...capture import (
    Selector,
    call_arguments,
    func,
    iter_tensors,
    module,
    trace,
    validate_model,
)
from ...errors import DiagnosticArgumentError
from ...options import CaptureOptions, Site
from ...report import Exit, Finding, Table, Unavailable, Where
from ...report._attention_sinks import (
    HEADS_COLUMNS,
    OUTLIER_COLUMNS,
    AttentionLayer,
    AttentionSinksReport,
    AttentionSinksStatus,
    PatternBlock,
    ResidualLayer,
    heads_rows,
    outlier_rows,
)
from .._isolation import preserved_model_state
from ..activations._probes import check_selectors
from ._probe import (
    OUTLIER_FACTOR,
    SINK_MASS,
    SINK_UNIFORM_RATIO,
    AttentionRecord,
    FusedAttention,
    SinkProbe,
    check_attention_mask,
)

MAX_PATTERN_BYTES = 2_000_000
"""Budget of the compressed pattern block: 12 layers x 12 heads x 128 tokens ships under it."""
PATTERN_BYTES_LIMIT = 6 * 2**20
"""Largest allowed budget: the panel layer block-mean downsamples arrays above 8 MiB in all,
which a deflate stream cannot survive, so the patterns stay well below that."""
LEVEL_STEPS = (255, 127, 63, 31, 15, 7)
"""Quantization levels tried in turn until the pattern block fits the budget. 12 layers x 12
heads of N(0, s^2) logits (benchmarks/bench_sinks.py): 255 at 128 tokens for every s measured;
at 256 tokens 9.4 million probabilities must fit 2 MB, so s = 8: 127, s = 0.3: 31, s = 1: 7,
s = 2: 7 (the error bound in the disclosure grows with it)."""
DEFLATE_LEVEL = 1
"""zlib level of the pattern block. Level 6 is 3-25% smaller but 2-10x slower: 1.4-3.8 s per
attempt at 12 x 12 heads x 256 tokens against 0.2-0.5 s, which alone broke the panel's 1.5 s
first-paint target (benchmarks/bench_sinks.py)."""
SAMPLE_STRIDE = 9
"""Every 9th head is deflated first to estimate each level's size (within 1% of the full
block in every case of bench_sinks.py), so only a level predicted to fit is deflated whole."""


def find_blocks(model: nn.Module) -> tuple[str, ...]:
    """Addresses of the members of ``model``'s longest list of identical, composite blocks.

    A list is an ``nn.ModuleList`` or ``nn.Sequential`` whose children all have one type that
    itself has submodules (so a stack of bare ``nn.Linear`` does not count). Ties go to the first
    list in ``named_modules`` order. Returns ``()`` when there is none.
    """
    best: tuple[str, ...] = ()
    for name, container in model.named_modules():
        if not isinstance(container, (nn.ModuleList, nn.Sequential)):
            continue
        children = list(container.named_children())
        kinds = {type(child) for _, child in children}
        if len(kinds) != 1 or not any(True for _ in children[0][1].children()):
            continue
        if len(children) > len(best):
            best = tuple(f"{name}.{child}" if name else child for child, _ in children)
    return best


def attention_sinks(
    model: nn.Module,
    inputs: Any,
    tokens: Any = None,
    *,
    attention: Sequence[Selector] | None = None,
    residual: Sequence[Selector] | None = None,
    attention_mask: torch.Tensor | None = None,
    sample: int = 0,
    sink_mass: float = SINK_MASS,
    sink_uniform_ratio: float = SINK_UNIFORM_RATIO,
    outlier_factor: float = OUTLIER_FACTOR,
    max_pattern_bytes: int = MAX_PATTERN_BYTES,
    fused_attention: FusedAttention = "disclose",
    recording: AttentionRecord | None = None,
) -> AttentionSinksReport:
    """Attention-sink heads, outlier residual dimensions and attention patterns in one call.

    Args:
        model: a transformer with eager attention (Hugging Face: load with
            ``attn_implementation="eager"`` or call ``model.set_attn_implementation("eager")``).
        inputs: what ``tl.trace`` takes; a mapping's ``attention_mask`` is used as the mask.
        tokens: token strings for the shown sample (a list of str), one list per sample, or a
            tokenizer (``convert_ids_to_tokens`` is applied to ``input_ids``). None: ``#<id>``
            from ``input_ids``, else the position numbers.
        attention, residual: override the discovered sites (``tl.func``/``tl.module`` lists).
        attention_mask: override the mask (``(batch, tokens)``, nonzero = real token).
        sample: batch row whose patterns and tokens the report carries (statistics pool all).
        sink_mass, sink_uniform_ratio, outlier_factor: the probe's thresholds.
        max_pattern_bytes: budget of the compressed patterns; quantization coarsens to fit.
        fused_attention: ``"recompute"`` computes the probabilities of fused attention calls
            (``F.scaled_dot_product_attention``, ``nn.MultiheadAttention``) from their own
            arguments, so a model with Hugging Face's default ``sdpa`` gets the same report as
            with eager attention (:class:`~torchlens_nb.debug.SinkProbe` explains how);
            ``"disclose"`` (the default) reports them ``unavailable`` with the fix.
        recording: attention probabilities already recorded from a forward of this model on
            these inputs (``tl.bridge.transformers.record_attention``, any attention
            implementation): the attention layers come from it, labelled by module address,
            and the capture only reads the residual sites. ``attention`` defaults to none then.

    Returns:
        An :class:`~torchlens_nb.report.AttentionSinksReport`: status ``flagged`` (sink heads or
        outlier dims; a neutral word: these are statistics, not failures), ``none_flagged`` or
        ``unavailable`` (no attention probabilities, e.g. fused SDPA). One capture with
        ``save=False``; the model is only run, never modified.

    Raises:
        DiagnosticArgumentError: bad selectors, ``sample`` out of range, or ``tokens`` of the
            wrong length or kind.
        ForwardError: the model's forward raised.

    Example:
        >>> import torch, torchlens_nb as tl
        >>> from transformers import GPT2Config, GPT2LMHeadModel
        >>> _ = torch.manual_seed(0)
        >>> config = GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=64, bos_token_id=0,
        ...                     eos_token_id=0, attn_implementation="eager")
        >>> model = GPT2LMHeadModel(config).eval()
        >>> report = tl.debug.attention_sinks(model, {"input_ids": torch.arange(8)[None]})
        >>> [layer.module for layer in report.layers], report.tokens[:2]
        (['transformer.h.0.attn', 'transformer.h.1.attn'], ('#0', '#1'))
    """
    model = validate_model(model)
    check_attention_mask(attention_mask)
    mask = _mask_from(inputs) if attention_mask is None else attention_mask
    blocks = find_blocks(model)
    if attention is None:
        attention = (func("softmax"),) if recording is None else ()
    if residual is None:
        residual = (module(*blocks),) if blocks else ()
    attention_sel = check_selectors("attention_sinks(attention=...)", attention)
    residual_sel = check_selectors("attention_sinks(residual=...)", residual)
    _check_tokens_kind(tokens)
    batch = _batch_size(inputs, mask)
    check_int("sample", sample, low=0, high=batch - 1, expect=f"a batch index in [0, {batch})")
    check_int("max_pattern_bytes", max_pattern_bytes, low=1, high=PATTERN_BYTES_LIMIT)
    patterns: dict[str, torch.Tensor] = {}

    def keep(site: Site, probabilities: torch.Tensor) -> None:
        if probabilities.shape[0] > sample:
            patterns[site.label] = probabilities[sample].float().clone()

    probe = SinkProbe(
        attention_sel,
        residual_sel,
        attention_mask=mask,
        sink_mass=sink_mass,
        sink_uniform_ratio=sink_uniform_ratio,
        outlier_factor=outlier_factor,
        fused_attention=fused_attention,
        on_attention=keep,
        recording=recording,
    )
    # a train-mode forward would move BatchNorm and the RNG; the probe's mode (recompute only)
    # must be entered around the capture
    with preserved_model_state(model), probe:
        run = trace(
            model,
            inputs,
            save=False,
            capture=CaptureOptions(hooks=probe.hook_plan(), source_lines=False, keep_output=False),
        )
    layers, residual_layers = probe.attention_layers(), probe.residual_layers()
    facts = probe.facts()
    length = patterns[layers[0].label].shape[-1] if layers else 0
    shown = _token_strings(tokens, inputs, sample, length) if layers else ()
    block = (
        _encode_patterns(
            [patterns[layer.label] for layer in layers], mask, sample, max_pattern_bytes
        )
        if layers
        else None
    )
    fused: dict[str, int] = {}
    for unseen in probe.unseen_attention:
        fused[unseen.func] = fused.get(unseen.func, 0) + unseen.calls
    return _build_report(
        model,
        probe,
        layers,
        residual_layers,
        facts,
        shown,
        sample,
        block,
        fused,
        blocks,
        len(run),
        is_recorded=recording is not None,
    )


def _mask_from(inputs: Any) -> torch.Tensor | None:
    if isinstance(inputs, Mapping):
        mask = inputs.get("attention_mask")
        if isinstance(mask, torch.Tensor) and mask.dim() == 2:
            return mask
    return None


def _batch_size(inputs: Any, mask: torch.Tensor | None) -> int:
    if mask is not None:
        return int(mask.shape[0])
    args, kwargs = call_arguments(inputs)
    first = next(iter_tensors((args, kwargs)), None)
    return int(first.shape[0]) if first is not None and first.dim() else 1


def _ids_of(inputs: Any) -> torch.Tensor | None:
    ids = inputs.get("input_ids") if isinstance(inputs, Mapping) else inputs
    if isinstance(ids, (tuple, list)) and ids:
        ids = ids[0]
    if isinstance(ids, torch.Tensor) and not ids.is_floating_point() and ids.dim() == 2:
        return ids
    return None


def _check_tokens_kind(tokens: Any) -> None:
    """Refuse a ``tokens`` argument of the wrong kind before the model runs."""
    if tokens is None or hasattr(tokens, "convert_ids_to_tokens"):
        return
    rows = (
        tokens
        if tokens and isinstance(tokens, (list, tuple)) and isinstance(tokens[0], (list, tuple))
        else [tokens]
    )
    if not all(
        isinstance(row, (list, tuple)) and all(isinstance(t, str) for t in row) for row in rows
    ):
        raise DiagnosticArgumentError(
            "tokens must be a list of strings, one list per sample, or a tokenizer; got "
            f"{type(tokens).__name__}."
        )


def _token_strings(tokens: Any, inputs: Any, sample: int, length: int) -> tuple[str, ...]:
    ids = _ids_of(inputs)
    row = ids[sample].tolist() if ids is not None and ids.shape[0] > sample else None
    if tokens is None:
        return (
            tuple(f"#{i}" for i in row)
            if row is not None and len(row) == length
            else tuple(str(i) for i in range(length))
        )
    if hasattr(tokens, "convert_ids_to_tokens"):
        if row is None:
            raise DiagnosticArgumentError(
                "tokens is a tokenizer but the inputs have no 2-D input_ids to decode; pass the "
                "token strings as a list instead."
            )
        tokens = tokens.convert_ids_to_tokens(row)
    elif isinstance(tokens, (list, tuple)) and tokens and isinstance(tokens[0], (list, tuple)):
        if sample >= len(tokens):
            raise DiagnosticArgumentError(f"tokens has {len(tokens)} rows but sample is {sample}.")
        tokens = tokens[sample]
    if len(tokens) != length:
        raise DiagnosticArgumentError(
            f"tokens has {len(tokens)} strings but the attention covers {length} positions; "
            "pass one string per position of the shown sample (padding included)."
        )
    return tuple(tokens)


def _encode_patterns(
    values: list[torch.Tensor], mask: torch.Tensor | None, sample: int, budget: int
) -> PatternBlock | None:
    """Quantize ``(heads, n, n)`` patterns of the shown sample's real tokens into one block.

    The finest of :data:`LEVEL_STEPS` that fits ``budget``: each level's size is first
    estimated from every :data:`SAMPLE_STRIDE`-th head, and only a level estimated to fit is
    deflated whole (once, in every case measured). None when the layers differ in shape or no
    level fits.
    """
    if any(v.shape != values[0].shape or v.shape[-1] != v.shape[-2] for v in values):
        return None
    size = values[0].shape[-1]
    stacked = torch.stack(values).cpu()
    positions = torch.arange(size)
    if mask is not None and tuple(mask.shape[1:]) == (size,):
        positions = torch.nonzero(mask[sample].bool().cpu()).flatten()
        if len(positions) < size:
            stacked = stacked[:, :, positions][:, :, :, positions]
    roots = stacked.clamp_(0.0, 1.0).sqrt_()
    heads = roots.reshape(-1, *roots.shape[-2:])
    probe = heads[::SAMPLE_STRIDE]
    for levels in LEVEL_STEPS:
        if len(_deflate(probe, levels)) * len(heads) / len(probe) > budget:
            continue
        data = _deflate(roots, levels)
        if len(data) <= budget:
            return PatternBlock(
                len(values), stacked.shape[1], tuple(positions.tolist()), levels, data
            )
    return None


def _deflate(roots: torch.Tensor, levels: int) -> bytes:
    """``round(levels * sqrt(p))`` as bytes, deflated."""
    quantized = torch.round(roots * levels).to(torch.uint8)
    return zlib.compress(quantized.numpy().tobytes(), DEFLATE_LEVEL)


def _build_report(
    model: nn.Module,
    probe: SinkProbe,
    layers: tuple[AttentionLayer, ...],
    residual: tuple[ResidualLayer, ...],
    facts: dict[str, Any],
    tokens: tuple[str, ...],
    sample: int,
    block: PatternBlock | None,
    fused: dict[str, int],
    blocks: tuple[str, ...],
    ops: int,
    *,
    is_recorded: bool,
) -> AttentionSinksReport:
    sinks, outliers = probe.sink_heads, probe.outlier_dims
    heads = len(layers[0].positions) if layers else 0
    unavailable: list[Unavailable] = []
    exits: list[Exit] = []
    if not layers:
        code, lead, reason = _no_attention(model, fused, facts, is_recorded)
        unavailable.append(Unavailable("attention_sinks", reason, code))
        if code == "fused_sdpa" and hasattr(model, "set_attn_implementation"):
            exits.append(
                Exit("Switch to eager attention", 'model.set_attn_implementation("eager")')
            )
        if code in ("fused_sdpa", "fused_mha"):
            exits.append(
                Exit(
                    "Recompute the fused attention",
                    "tl.debug.attention_sinks(model, inputs, fused_attention='recompute')",
                )
            )
    if not residual:
        unavailable.append(
            Unavailable(
                "outlier_dims",
                "no residual site was scored: "
                + (
                    "no list of identical blocks was found; pass residual=[tl.module('...')]."
                    if not blocks
                    else "the block outputs are not (batch, tokens, dims) tensors."
                ),
                "no_residual_sites",
            )
        )
    findings = _findings(layers, sinks, outliers, tokens, probe.thresholds)
    status: AttentionSinksStatus
    if not layers:
        status, subject = "unavailable", f"{type(model).__name__} ({ops} ops)"
    else:
        status = "flagged" if sinks or outliers else "none_flagged"
        subject = (
            f"{type(model).__name__} ({len(layers)} attention layers x {heads} heads, "
            f"{len(tokens)} tokens)"
        )
        lead = (
            f"{len(sinks)} of {len(layers) * heads} heads are attention sinks"
            f"{_top_position(sinks, tokens)}; {len({o.dim for o in outliers})} residual dims "
            f"reach >= {probe.thresholds['outlier_factor']:g}x the median dim. Statistics, "
            "not failures."
        )
        unscored = [s for s in facts["skipped"] if s["kind"] == "attention"]
        if unscored:
            lead += (
                f" {len(unscored)} attention site{'s were' if len(unscored) != 1 else ' was'} "
                f"not scored ({unscored[0]['label']}: {unscored[0]['reason'].rstrip('.')})."
            )
    head_rows, head_attrs = heads_rows(layers, tokens)
    dim_rows, dim_attrs = outlier_rows(residual)
    tables = [
        Table.from_dicts("heads", head_rows, HEADS_COLUMNS, head_attrs),
        Table.from_dicts("outlier_dims", dim_rows, OUTLIER_COLUMNS, dim_attrs),
    ]
    if facts["skipped"]:
        tables.append(
            Table.from_dicts(
                "skipped", facts["skipped"], ("label", "module", "kind", "calls", "reason")
            )
        )
    return AttentionSinksReport(
        subject=subject,
        status=status,
        lead=lead,
        findings=findings,
        tables=tuple(tables),
        disclosures=_disclosures(facts, block, sample, fused, ops),
        unavailable=tuple(unavailable),
        exits=tuple(exits),
        tokens=tokens,
        sample=sample,
        layers=layers,
        residual=residual,
        sink_heads=sinks,
        outlier_dims=outliers,
        thresholds=probe.thresholds,
        patterns=block,
    )


def _no_attention(
    model: nn.Module, fused: dict[str, int], facts: dict[str, Any], is_recorded: bool
) -> tuple[str, str, str]:
    """(unavailable code, lead, reason) when no attention site was scored."""
    if "scaled_dot_product_attention" in fused:
        calls = fused["scaled_dot_product_attention"]
        fix = (
            (
                'load it with attn_implementation="eager" or call '
                'model.set_attn_implementation("eager")'
            )
            if hasattr(model, "set_attn_implementation")
            else "compute softmax(q @ k.transpose(-1, -2) / d ** 0.5) explicitly"
        )
        return (
            "fused_sdpa",
            f"no attention probabilities: the model uses fused scaled_dot_product_attention "
            f"({calls} calls); switch it to eager attention.",
            f"the model ran fused scaled_dot_product_attention {calls} times, which never "
            f"materialises attention probabilities; {fix}, then run again.",
        )
    if "multi_head_attention_forward" in fused:
        calls = fused["multi_head_attention_forward"]
        return (
            "fused_mha",
            f"no attention probabilities: nn.MultiheadAttention computes them inside one call "
            f"({calls} calls).",
            f"nn.MultiheadAttention ran {calls} times as one F.multi_head_attention_forward "
            "call each, which keeps its probabilities inside; write the attention with an "
            "explicit softmax over (batch, heads, queries, keys) to probe it.",
        )
    skipped = [s for s in facts["skipped"] if s["kind"] == "attention"]
    if is_recorded:
        reason = (
            f"no recorded call was an attention pattern ({skipped[0]['label']}: "
            f"{skipped[0]['reason']})"
            if skipped
            else "the recording holds no attention probabilities (its .unrecorded says why "
            "a call was not recorded)"
        )
        return "no_attention_probs", "no recorded attention probabilities.", reason + "."
    if skipped:
        reason = (
            f"no softmax was an attention pattern ({skipped[0]['label']}: "
            f"{skipped[0]['reason']}); pass attention=[tl.func('...')] to name the site."
        )
        return "no_attention_probs", "no softmax was an attention pattern.", reason
    return (
        "no_attention_probs",
        "no softmax ran, so there are no attention probabilities.",
        "no softmax ran; pass attention=[tl.func('...')] to name the attention-probability op.",
    )


def _top_position(sinks: tuple[Any, ...], tokens: tuple[str, ...]) -> str:
    if not sinks:
        return ""
    counts: dict[int, int] = {}
    for sink in sinks:
        counts[sink.position] = counts.get(sink.position, 0) + 1
    position = max(counts, key=lambda p: counts[p])
    token = f" {tokens[position]!r}" if position < len(tokens) else ""
    return f" ({counts[position]} on position {position}{token})"


def _findings(
    layers: tuple[AttentionLayer, ...],
    sinks: tuple[Any, ...],
    outliers: tuple[Any, ...],
    tokens: tuple[str, ...],
    thresholds: Mapping[str, float],
) -> tuple[Finding, ...]:
    found = []
    index = {layer.label: i for i, layer in enumerate(layers)}
    if sinks:
        by_layer = sorted({index[s.label] for s in sinks})
        found.append(
            Finding(
                code="attention_sinks",
                severity="info",
                message=(
                    f"{len(sinks)} heads put >= {thresholds['sink_mass']:.0%} of their attention "
                    f"on one key position{_top_position(sinks, tokens)}, in attention layers "
                    f"{', '.join(map(str, by_layer))}."
                ),
                where=Where(op=sinks[0].label, module=layers[index[sinks[0].label]].module or None),
                remedy="a sink head's pattern says little about what the head reads; look at its "
                "values or ablate it before drawing conclusions.",
                fields={"heads": len(sinks), "layers": by_layer},
            )
        )
    if outliers:
        dims: dict[int, list[float]] = {}
        for o in outliers:
            dims.setdefault(o.dim, []).append(o.factor)
        text = ", ".join(
            f"dim {d} (max {max(f):.1f}x in {len(f)} site{'s' if len(f) > 1 else ''})"
            for d, f in sorted(dims.items(), key=lambda kv: -max(kv[1]))
        )
        found.append(
            Finding(
                code="outlier_residual_dims",
                severity="info",
                message=f"{len(dims)} residual dims reach >= {thresholds['outlier_factor']:g}x the "
                f"median dim's mean |value|: {text}.",
                where=Where(op=outliers[0].label),
                remedy="outlier dims dominate norms, cosine similarities and naive quantization "
                "ranges: quantize per channel or clip them explicitly.",
                fields={"dims": sorted(dims)},
            )
        )
    return tuple(found)


def _disclosures(
    facts: dict[str, Any], block: PatternBlock | None, sample: int, fused: dict[str, int], ops: int
) -> tuple[str, ...]:
    notes = [
        "sinks and outlier dims are normal in trained language models: statistics to look "
        "at, not failures."
    ]
    if facts["attention"]:
        rows = facts["attention"][0]["rows_scored"]
        notes.append(
            f"head statistics pool {rows} scored queries per head over the batch; rows "
            "with one visible key and padded positions are not scored."
        )
    if block is not None:
        notes.append(
            f"patterns of sample {sample} ({len(block.positions)} tokens) are stored as "
            f"round({block.levels} * sqrt(p)) bytes, deflated to {len(block.data)} B; "
            f"absolute error <= sqrt(p) / {block.levels} + 1 / {2 * block.levels}^2."
        )
    elif facts["attention"]:
        notes.append(
            "patterns not shipped: layers differ in shape, or they exceed the byte "
            "budget at every quantization level."
        )
    if facts["skipped"]:
        first = facts["skipped"][0]
        notes.append(
            f"{len(facts['skipped'])} sites not scored (see the skipped table); first: "
            f"{first['label']}: {first['reason']}"
        )
    if fused and facts["attention"]:
        notes.append(
            "not covered: "
            + ", ".join(f"{n} fused {name} calls" for name, n in fused.items())
            + "."
        )
    notes.append(f"one capture with save=False, {ops} ops.")
    return tuple(notes)


__all__ = ["MAX_PATTERN_BYTES", "attention_sinks", "find_blocks"]
