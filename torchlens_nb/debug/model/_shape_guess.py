"""``guess_input_shape``: find a synthetic input a model's forward accepts, and prove it by
running it.

The guess starts from the first layer the model registers (``Linear`` -> ``(B, in_features)``,
``Conv{1,2,3}d`` -> ``(B, in_channels, *spatial)``, ``Embedding`` -> integer ids ``(B, T)``,
RNNs, norms) and falls back to generic feature / image shapes. Every candidate is verified by a
forward of ONE deep copy of the model in eval mode under ``torch.no_grad`` and a preserved,
seeded RNG, so the caller's model (parameters, buffers, running stats, mode) and RNG streams are
untouched. Cost: one deep copy plus at most ``max_probes`` forwards; the search stops at the
first success.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any, Literal

import torch
from torch import nn

from ..._validate import MAX_PROBE_SIZE, check_bool, check_int, is_int
from ...capture import iter_tensors, validate_model
from ...errors import DiagnosticArgumentError, ModelCopyError, UnavailableError
from ...report import Finding, Table
from ...report._model import PROBE_COLUMNS, GuessInputShapeReport, ShapeProbe
from .._isolation import copy_model, preserved_rng_state, seed_all

EXTRA_SIZES = (512, 192, 160, 112, 48, 16, 8, 4, 2, 1)
"""Sizes tried after ``preferred_sizes`` (within ``min_size``..``max_size``)."""
SEQ_LENS = (8, 16, 32, 64, 128, 1)
"""Sequence lengths tried for token ids and sequence inputs when ``seq_len`` is None."""
ERROR_CHARS = 200
MAX_PROBE_ELEMENTS = 2**28
"""The most elements one probe input may hold (1 GiB of float32): a larger shape (an
``input_specs`` entry of huge sizes) is recorded as a failed probe, not allocated."""
"""A probe's error is clipped to its first line and this many characters."""

Candidate = tuple[tuple[int, ...], torch.dtype, int | None]
"""``(shape, dtype, id_upper_bound)``: integer ids are drawn below the bound."""


def _first_layer(model: nn.Module) -> tuple[nn.Module, str] | None:
    kinds = (
        nn.Linear,
        nn.modules.conv._ConvNd,
        nn.Embedding,
        nn.EmbeddingBag,
        nn.RNNBase,
        nn.modules.batchnorm._BatchNorm,
        nn.LayerNorm,
    )
    for address, module in model.named_modules():
        if isinstance(module, kinds) and not isinstance(module, nn.modules.lazy.LazyModuleMixin):
            return module, address
    return None


def _describe(module: nn.Module, address: str) -> str:
    if isinstance(module, nn.Linear):
        detail = f"in_features={module.in_features}"
    elif isinstance(module, nn.modules.conv._ConvNd):
        detail = f"in_channels={module.in_channels}"
    elif isinstance(module, (nn.Embedding, nn.EmbeddingBag)):
        detail = f"num_embeddings={module.num_embeddings}"
    elif isinstance(module, nn.RNNBase):
        detail = f"input_size={module.input_size}"
    elif isinstance(module, nn.LayerNorm):
        detail = f"normalized_shape={tuple(module.normalized_shape)}"
    else:
        detail = f"num_features={getattr(module, 'num_features', '?')}"
    return f"{type(module).__name__}({detail}) at {address!r}"


def _spatial(sizes: Sequence[int], rank: int, square: bool) -> Iterator[tuple[int, ...]]:
    if rank == 0:
        yield ()
        return
    for size in sizes:
        yield (size,) * rank
    if not square and rank >= 2:
        for first in sizes:
            for second in sizes:
                if first != second:
                    yield (first,) + (second,) * (rank - 1)


def _candidates(
    layer: tuple[nn.Module, str] | None,
    *,
    batch: int,
    dtype: torch.dtype,
    channels: int | None,
    rank: int | str,
    seq_lens: Sequence[int],
    sizes: Sequence[int],
    square: bool,
) -> Iterator[Candidate]:
    module = None if layer is None else layer[0]
    if isinstance(module, (nn.Embedding, nn.EmbeddingBag)):
        for length in seq_lens:
            yield (batch, length), torch.long, module.num_embeddings
    elif isinstance(module, nn.RNNBase):
        for length in seq_lens:
            yield (
                (
                    (batch, length, module.input_size)
                    if module.batch_first
                    else (length, batch, module.input_size)
                ),
                dtype,
                None,
            )
    elif isinstance(module, nn.LayerNorm):
        tail = tuple(module.normalized_shape)
        yield (batch, *tail), dtype, None
        for length in seq_lens:
            yield (batch, length, *tail), dtype, None
    elif isinstance(module, nn.Linear) and rank in ("auto", 0):
        yield (batch, module.in_features), dtype, None
        for length in seq_lens:
            yield (batch, length, module.in_features), dtype, None
    if isinstance(module, (nn.modules.conv._ConvNd, nn.modules.batchnorm._BatchNorm)):
        conv_rank = (
            len(module.kernel_size)
            if isinstance(module, nn.modules.conv._ConvNd)
            else {nn.BatchNorm1d: 1, nn.BatchNorm2d: 2, nn.BatchNorm3d: 3}.get(type(module), 2)
        )
        features: Any = getattr(module, "in_channels", None) or getattr(module, "num_features", 3)
        depth = channels or int(features)
        for spatial in _spatial(sizes, conv_rank if rank == "auto" else int(rank), square):
            yield (batch, depth, *spatial), dtype, None
    for fallback_rank in (2, 1, 0, 3) if rank == "auto" else (int(rank),):
        depth = channels or 3
        for spatial in _spatial(sizes, fallback_rank, square):
            yield ((batch, depth, *spatial) if fallback_rank else (batch, depth)), dtype, None
        if fallback_rank == 0 and channels is None:
            for size in sizes:
                yield (batch, size), dtype, None


def _probe(
    model: nn.Module, candidate: Candidate, device: torch.device, seed: int
) -> tuple[ShapeProbe, tuple[int, ...] | None]:
    shape, dtype, bound = candidate
    numel = math.prod(shape)
    if numel > MAX_PROBE_ELEMENTS:
        reason = f"not run: {numel} elements, over the {MAX_PROBE_ELEMENTS} a probe may allocate"
        return ShapeProbe(shape, _name(dtype), False, reason), None
    with preserved_rng_state():
        seed_all(seed)
        if bound is not None:
            x = torch.randint(0, bound, shape, device=device, dtype=dtype)
        else:
            x = torch.randn(shape, device=device).to(dtype)
        try:
            with torch.no_grad():
                out = model(x)
        except Exception as exc:  # the probe is expected to fail for wrong shapes
            first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            message = f"{type(exc).__name__}: {first_line}"[:ERROR_CHARS]
            return ShapeProbe(shape, _name(dtype), False, message), None
    first = next(iter_tensors(out), None)
    return ShapeProbe(shape, _name(dtype), True), None if first is None else tuple(first.shape)


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _device(device: Any) -> torch.device:
    if not isinstance(device, (str, torch.device)):
        raise DiagnosticArgumentError(
            f"device must be a str or torch.device such as 'cpu' or 'cuda:0', got {device!r}."
        )
    try:
        return torch.device(device)
    except RuntimeError as exc:  # torch's own message lists the device types
        raise DiagnosticArgumentError(
            f"device={device!r} is not a torch device ('cpu', 'cuda', 'cuda:0', 'mps', ...)."
        ) from exc


def _specs(input_specs: Any) -> list[Candidate]:
    if input_specs is None:
        return []
    form = "a list of shape tuples or (shape, dtype) pairs, e.g. [(1, 3, 224, 224)]"
    if not isinstance(input_specs, (list, tuple)):
        raise DiagnosticArgumentError(f"input_specs must be {form}, got {input_specs!r}.")
    specs = []
    for spec in input_specs:
        if not isinstance(spec, (list, tuple)):
            raise DiagnosticArgumentError(
                f"each input_specs entry must be a shape tuple or (shape, dtype), got {spec!r}."
            )
        shape, dtype = (
            spec if len(spec) == 2 and isinstance(spec[1], torch.dtype) else (spec, torch.float32)
        )
        if not isinstance(shape, (list, tuple)) or not all(is_int(s) and s >= 0 for s in shape):
            raise DiagnosticArgumentError(
                f"each input_specs entry must be a shape tuple or (shape, dtype), got {spec!r}."
            )
        bound = 2 if not (dtype.is_floating_point or dtype.is_complex) else None
        specs.append((tuple(shape), dtype, bound))
    return specs


def guess_input_shape(
    model: nn.Module,
    *,
    batch_size: int = 1,
    input_dtype: torch.dtype | None = None,
    channels: int | None = None,
    spatial_rank: int | Literal["auto"] = "auto",
    seq_len: int | None = None,
    square: bool = True,
    min_size: int = 1,
    max_size: int = 512,
    preferred_sizes: Sequence[int] = (224, 256, 384, 299, 128, 96, 64, 32, 28),
    max_probes: int = 64,
    device: str | torch.device | None = None,
    seed: int = 0,
    on_failure: Literal["return", "raise"] = "return",
    input_specs: Sequence[Any] | None = None,
) -> GuessInputShapeReport:
    """Find a synthetic input shape ``model`` accepts, verified by running it.

    Args:
        batch_size: leading batch dimension of every probe.
        input_dtype: dtype of float probes (default: the first floating parameter's dtype).
        channels: channel count for image-like probes (default: the first conv's in_channels).
        spatial_rank: ``"auto"`` (from the first conv, else 2, 1, 0, 3) or 0..3 to force one.
        seq_len: sequence length for ids / sequences (default: tries ``SEQ_LENS``).
        square: only square spatial sizes; False also tries mixed pairs.
        min_size, max_size: bounds of the spatial sizes tried.
        preferred_sizes: spatial sizes tried first, in order (then ``EXTRA_SIZES``).
        max_probes: the most forwards to run.
        device: where probes are built and the copy runs (default: the model's device).
        seed: seed of every probe's input draw and forward.
        on_failure: ``"return"`` (a report with ``found=False``) or ``"raise"``.
        input_specs: shapes (or ``(shape, dtype)`` pairs) to try before any guess.

    Raises:
        UnavailableError: code ``input_shape_not_found`` when ``on_failure="raise"`` and no
            probe succeeded.
        DiagnosticArgumentError: an argument out of range.

    Example:
        >>> result = guess_input_shape(nn.Linear(3, 2), max_probes=4)
        >>> result.found, result.shape
        (True, (1, 3))
    """
    validate_model(model)
    batch = check_int(
        "batch_size", batch_size, low=1, high=MAX_PROBE_SIZE, hint="a probe needs no big batch"
    )
    probes_allowed = check_int("max_probes", max_probes, low=1)
    low, high = check_int("min_size", min_size, low=1), check_int("max_size", max_size, low=1)
    if low > high:
        raise DiagnosticArgumentError(f"min_size ({low}) must be <= max_size ({high}).")
    check_bool("square", square)
    check_int("seed", seed)
    if not isinstance(preferred_sizes, (list, tuple)) or not all(
        is_int(size) and 1 <= size <= MAX_PROBE_SIZE for size in preferred_sizes
    ):
        raise DiagnosticArgumentError(
            f"preferred_sizes must be a list of ints in [1, {MAX_PROBE_SIZE}] (spatial sizes), "
            f"got {preferred_sizes!r}."
        )
    if spatial_rank != "auto" and not (is_int(spatial_rank) and spatial_rank in (0, 1, 2, 3)):
        raise DiagnosticArgumentError(
            f"spatial_rank must be 'auto' or 0, 1, 2, 3, got {spatial_rank!r}."
        )
    if on_failure not in ("return", "raise"):
        raise DiagnosticArgumentError(
            f"on_failure must be 'return' or 'raise', got {on_failure!r}."
        )
    if input_dtype is not None and not isinstance(input_dtype, torch.dtype):
        raise DiagnosticArgumentError(f"input_dtype must be a torch.dtype, got {input_dtype!r}.")
    for name, value in (("channels", channels), ("seq_len", seq_len)):
        if value is not None:
            check_int(name, value, low=1, high=MAX_PROBE_SIZE)
    specs = _specs(input_specs)
    params = [p for p in model.parameters() if p.is_floating_point()]
    dtype = input_dtype or (params[0].dtype if params else torch.float32)
    target = (
        _device(device)
        if device is not None
        else (params[0].device if params else torch.device("cpu"))
    )
    sizes = [s for s in dict.fromkeys([*preferred_sizes, *EXTRA_SIZES]) if low <= s <= high]
    layer = _first_layer(model)
    found: ShapeProbe | None = None
    output_shape = None
    probes: list[ShapeProbe] = []
    tried: set[tuple[tuple[int, ...], torch.dtype]] = set()
    try:
        copy = copy_model(model).to(target).eval()
    except ModelCopyError as exc:
        return _report(model, layer, [], None, None, probes_allowed, on_failure, str(exc))
    candidates = _candidates(
        layer,
        batch=batch,
        dtype=dtype,
        channels=channels,
        rank=spatial_rank,
        seq_lens=(seq_len,) if seq_len else SEQ_LENS,
        sizes=sizes,
        square=square,
    )
    for candidate in (*specs, *candidates):
        if len(probes) >= probes_allowed:
            break
        if (candidate[0], candidate[1]) in tried:
            continue
        tried.add((candidate[0], candidate[1]))
        probe, output_shape = _probe(copy, candidate, target, seed)
        probes.append(probe)
        if probe.is_ok:
            found = probe
            break
    return _report(model, layer, probes, found, output_shape, probes_allowed, on_failure, None)


def _report(
    model: nn.Module,
    layer: tuple[nn.Module, str] | None,
    probes: list[ShapeProbe],
    found: ShapeProbe | None,
    output_shape: tuple[int, ...] | None,
    max_probes: int,
    on_failure: str,
    copy_error: str | None,
) -> GuessInputShapeReport:
    first_layer = None if layer is None else _describe(*layer)
    if found is None:
        last = probes[-1].error if probes else copy_error
        message = (
            f"no input shape found in {len(probes)} probe(s)"
            + (f" starting from {first_layer}" if first_layer else "")
            + (f"; last error: {last}" if last else "")
        )
        if on_failure == "raise":
            raise UnavailableError(
                message + "; pass input_specs= or raise max_probes.", code="input_shape_not_found"
            )
        findings: tuple[Finding, ...] = (
            Finding(
                "input_shape_not_found",
                "warning",
                message,
                remedy="pass input_specs=[(shape, dtype), ...], channels= or "
                "seq_len=, or raise max_probes.",
            ),
        )
    else:
        findings = ()
    return GuessInputShapeReport(
        subject=f"{type(model).__name__}" + (f", first layer {first_layer}" if first_layer else ""),
        status="found" if found else "not_found",
        lead=(
            f"{found.shape} {found.dtype} runs (probe {len(probes)} of at most {max_probes})"
            if found
            else findings[0].message
        ),
        findings=findings,
        tables=(Table.from_dicts("probes", [vars(p) for p in probes], PROBE_COLUMNS),),
        disclosures=(
            "probes ran on a deep copy in eval mode under torch.no_grad(); a shape the "
            "forward accepts is not necessarily the shape the model was trained on",
        ),
        found=found is not None,
        shape=None if found is None else found.shape,
        dtype=None if found is None else found.dtype,
        output_shape=output_shape,
        first_layer=first_layer,
        probes=tuple(probes),
        max_probes=max_probes,
    )
