"""The one batched device-to-host copy behind the per-op table diagnostics.

``grad_health``, ``dead_neurons`` and ``dtype_range`` reduce every tensor to a few numbers on
its own device (norms, counts, maxima), then bring them all to the host here with ONE
``.tolist()`` per device. A per-op ``.item()`` would block the device once per op (about 1,000
syncs for a GPT-2 small trace); tests/grad_health/test_host_sync.py counts the calls.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def fetch_floats(values: Sequence[torch.Tensor]) -> list[list[float]]:
    """Return the elements of each tensor in ``values`` as Python floats, in order.

    Args:
        values: small tensors (any shape, any real dtype, any device except ``meta``).

    Returns:
        One list of floats per input tensor (flattened). NaN and Inf come back as floats.

    Cost: one ``torch.cat`` and one ``.tolist()`` (one host sync) per distinct device; float64
    on the host (float32 on MPS, which has no float64), so integer counts up to 2**53 are exact.
    """
    by_device: dict[torch.device, list[int]] = {}
    for position, value in enumerate(values):
        by_device.setdefault(value.device, []).append(position)
    fetched: list[list[float]] = [[] for _ in values]
    with torch.no_grad():
        for device, positions in by_device.items():
            dtype = torch.float32 if device.type == "mps" else torch.float64
            parts = [values[p].detach().reshape(-1).to(dtype) for p in positions]
            flat = torch.cat(parts).tolist()
            start = 0
            for position, part in zip(positions, parts):
                fetched[position] = flat[start : start + part.numel()]
                start += part.numel()
    return fetched
