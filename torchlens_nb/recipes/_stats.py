"""Summary statistics of one tensor, as plain floats (shared by data_sanity and
weight_distribution).

Moments are taken over the finite elements only, so one NaN does not hide the scale of the rest;
the non-finite counts are reported beside them. Each call costs one host sync per statistic
group on accelerators (a recipe runs once, not per step).
"""

from __future__ import annotations

import torch

from ..errors import InputFormError
from ..report._recipes_data import Histogram, TensorStats


def flat_values(tensor: torch.Tensor) -> torch.Tensor:
    """The elements of ``tensor`` as one dense CPU vector of its dtype (sparse tensors are
    densified, quantized ones dequantized).

    Raises:
        InputFormError: a meta tensor (it has a shape but no values).
    """
    if tensor.device.type == "meta":
        raise InputFormError(
            f"a tensor of shape {tuple(tensor.shape)} is on the meta device: it has no values to "
            "summarise; load the data or weights first (e.g. model.to_empty(device='cpu') and "
            "load_state_dict)."
        )
    if tensor.is_quantized:
        tensor = tensor.dequantize()
    if tensor.layout != torch.strided:
        tensor = tensor.to_dense()
    return tensor.detach().reshape(-1).cpu()


def tensor_stats(tensor: torch.Tensor) -> TensorStats:
    """Statistics of ``tensor`` (any dtype; bool and integer tensors are read as float64)."""
    values = flat_values(tensor).to(torch.float64)
    numel = values.numel()
    if numel == 0:
        nan = float("nan")
        return TensorStats(0, nan, nan, nan, nan, nan, 0, 0, nan)
    nan_count = int(torch.isnan(values).sum().item())
    inf_count = int(torch.isinf(values).sum().item())
    finite = values[torch.isfinite(values)]
    zero_fraction = float((values == 0).sum().item()) / numel
    if finite.numel() == 0:
        nan = float("nan")
        return TensorStats(numel, nan, nan, nan, nan, nan, nan_count, inf_count, zero_fraction)
    std = float(finite.std().item()) if finite.numel() > 1 else float("nan")
    low, high = float(finite.min().item()), float(finite.max().item())
    return TensorStats(
        numel,
        float(finite.mean().item()),
        std,
        low,
        high,
        max(abs(low), abs(high)),
        nan_count,
        inf_count,
        zero_fraction,
    )


def histogram(tensor: torch.Tensor, bins: int) -> Histogram:
    """Equal-width histogram of the finite elements (one bin around the value when constant)."""
    values = flat_values(tensor).to(torch.float64)
    values = values[torch.isfinite(values)]
    if values.numel() == 0:
        return Histogram((), ())
    low, high = float(values.min().item()), float(values.max().item())
    if low == high:  # a constant tensor: one bin of width 1 centred on the value
        return Histogram((low - 0.5, high + 0.5), (int(values.numel()),))
    counts = torch.histc(values, bins=bins, min=low, max=high)
    step = (high - low) / bins
    edges = (*tuple(low + i * step for i in range(bins)), high)
    return Histogram(edges, tuple(int(c) for c in counts.tolist()))
