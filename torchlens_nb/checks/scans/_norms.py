"""The norms kernel of the checks kit: 2-norms of many tensors, batched per device, read once.

* :func:`device_norms` -- the 2-norms of many tensors as one float32 vector per device (float32
  accumulation, so a float16 gradient of norm 1e5 does not read as ``inf``); the result stays on
  the device. :class:`NormPlan` is the same kernel with its grouping cached, for a caller that
  norms the same parameters' gradients at every backward (site S-D).
* :func:`read_host` -- many 1-D device tensors to host floats, one ``.tolist()`` per device.

A complex tensor is normed as its real view (``torch.view_as_real``): the 2-norm of the magnitudes
``sqrt(sum |z|^2)``, non-finite exactly when a real or an imaginary part is NaN or Inf.

A 2-norm is non-finite exactly when the tensor holds a NaN or an Inf, or when its finite values
overflow the float32 accumulation (|g| around 1e19 and up); ``clip_grad_norm_`` computes the same
2-norm, so such a gradient is non-finite for the clip recipe too and is reported as ``inf``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ..distributed._dtensor import is_dtensor, local_tensor

DeviceNorms = tuple[tuple[tuple[int, ...], torch.Tensor], ...]
"""Per device: (positions of the tensors in the caller's list, float32 norms on that device)."""

SMALL_NUMEL = 2048
"""On CPU, same-shape tensors of at most this many elements are normed as rows of one stack.

CPU ``torch._foreach_norm`` is a loop of per-tensor kernels: about 1.4 us per tensor whatever
its size, plus 0.5 us per tensor to stack the 0-d results. ``torch.stack`` of same-shape small
tensors (one C++ call, no per-tensor view) and one row-wise ``vector_norm`` cost 0.2 us per
tensor at 64 elements and 0.7 us at 2,048, where the copy starts to cost more than the dispatch
it saves (4,096 elements: 4.6 vs 2.1 us; measured on this project's 2-core box, and inside the
S-D callback on the 5,000 freshly made gradients of ``benchmarks/bench_checks.py``'s
``many_params`` case: 0.5-0.9 ms vs 6.8-9 ms). CUDA's ``_foreach_norm`` is a fused multi-tensor
kernel and keeps every tensor."""


@dataclass(frozen=True)
class _Group:
    """Positions (into the caller's tensor list) normed together on one device."""

    members: tuple[int, ...]
    is_stacked: bool
    """Same-shape members normed as the rows of one stack; else one ``_foreach_norm``."""
    is_local: bool = False
    """DTensor members (FSDP2 shards), normed as this rank's ``to_local()`` in one
    ``_foreach_norm``: a DTensor's own norm would be a collective."""


def _plan(tensors: Sequence[torch.Tensor]) -> list[list[_Group]]:
    """Per device, the stacked same-shape groups, the ``_foreach_norm`` group, then the
    DTensor group."""
    Shape = tuple[torch.dtype, torch.Size]
    by_device: dict[torch.device, tuple[dict[Shape, list[int]], list[int], list[int]]] = {}
    for member, tensor in enumerate(tensors):
        small, rest, shards = by_device.setdefault(tensor.device, ({}, [], []))
        numel = tensor.numel()
        if is_dtensor(tensor):
            shards.append(member)
        elif (
            tensor.device.type == "cpu"
            and not tensor.is_sparse
            and not tensor.is_complex()
            and 0 < numel <= SMALL_NUMEL
        ):
            small.setdefault((tensor.dtype, tensor.shape), []).append(member)
        else:
            rest.append(member)
    plan = []
    for small, rest, shards in by_device.values():
        groups = []
        for members in small.values():
            if len(members) < 2:  # a lone small tensor gains nothing from the copy
                rest.extend(members)
            else:
                groups.append(_Group(tuple(members), True))
        if rest:
            groups.append(_Group(tuple(rest), False))
        if shards:
            groups.append(_Group(tuple(shards), False, is_local=True))
        plan.append(groups)
    return plan


def _real(tensor: torch.Tensor) -> torch.Tensor:
    """The dense real tensor whose 2-norm is ``tensor``'s: a sparse one's values, a complex
    one's real view (the norm of the magnitudes)."""
    if tensor.is_sparse:
        tensor = tensor.coalesce().values()
    return torch.view_as_real(tensor) if tensor.is_complex() else tensor


def _norm_dtype(tensors: Sequence[torch.Tensor]) -> torch.dtype:
    """float32 accumulation, or float64 when a tensor is float64 (asking a float64 norm for a
    float32 result is a narrowing error; a complex128 gradient's real view is float64 too)."""
    return torch.float64 if any(t.dtype == torch.float64 for t in tensors) else torch.float32


def _run(
    plan: list[list[_Group]], tensors: Sequence[torch.Tensor], positions: Sequence[int]
) -> DeviceNorms:
    result = []
    for groups in plan:
        order: list[int] = []
        parts: list[torch.Tensor] = []
        for group in groups:
            members = [tensors[m] for m in group.members]
            if group.is_stacked:
                rows = torch.stack(members).reshape(len(members), -1)
                norms = torch.linalg.vector_norm(rows, 2, dim=1, dtype=_norm_dtype(members))
                parts.append(norms.to(torch.float32))
            else:
                dense = [_real(local_tensor(t) if group.is_local else t) for t in members]
                norms = torch._foreach_norm(dense, 2, dtype=_norm_dtype(dense))
                parts.append(torch.stack(norms).to(torch.float32))
            order.extend(positions[m] for m in group.members)
        result.append((tuple(order), parts[0] if len(parts) == 1 else torch.cat(parts)))
    return tuple(result)


def device_norms(tensors: Sequence[torch.Tensor], positions: Sequence[int]) -> DeviceNorms:
    """2-norms of ``tensors`` as device tensors (float32 accumulation), no host sync.

    Per device: on CPU, same-size small tensors (see :data:`SMALL_NUMEL`) are normed as the rows
    of one flattened copy; every other tensor goes through one ``torch._foreach_norm``; DTensors
    (FSDP2 shards) through one more, on their local shards (``_sharded.py``).

    Args:
        tensors: dense or sparse tensors (sparse ones are coalesced and their values normed).
        positions: the caller's index of each tensor, returned alongside its norm.
    """
    if not tensors:
        return ()
    return _run(_plan(tensors), tensors, positions)


class NormPlan:
    """:func:`device_norms` for a caller that norms the same tensors' successors repeatedly.

    The grouping is kept while the positions and every tensor's element count stay the same
    (one ``numel()`` per tensor to check, about 0.06 us); on any other change, or an error from a
    stale grouping (a tensor changed shape or device), it is rebuilt. Grouping 5,000 gradients
    costs about 4 ms of Python, more than the norms themselves.
    """

    def __init__(self) -> None:
        self._key: tuple[int, ...] | None = None
        self._numels: list[int] = []
        self._plan: list[list[_Group]] = []

    def __call__(self, tensors: Sequence[torch.Tensor], positions: Sequence[int]) -> DeviceNorms:
        if not tensors:
            return ()
        key = tuple(positions)
        numels = [t.numel() for t in tensors]
        if key != self._key or numels != self._numels:
            self._key, self._numels, self._plan = key, numels, _plan(tensors)
        try:
            return _run(self._plan, tensors, positions)
        except RuntimeError:
            self._plan = _plan(tensors)
            return _run(self._plan, tensors, positions)


def read_host(device_tensors: Sequence[torch.Tensor]) -> list[float]:
    """Concatenate 1-D device tensors and copy them to the host: one sync per device."""
    by_device: dict[torch.device, list[torch.Tensor]] = {}
    order: list[tuple[torch.device, int]] = []
    for tensor in device_tensors:
        chunk = by_device.setdefault(tensor.device, [])
        order.append((tensor.device, len(chunk)))
        chunk.append(tensor)
    host: dict[torch.device, list[list[float]]] = {}
    for device, chunk in by_device.items():
        flat = torch.cat(
            [
                c.reshape(-1).to(torch.float64 if device.type != "mps" else torch.float32)
                for c in chunk
            ]
        ).tolist()
        pieces, start = [], 0
        for c in chunk:
            pieces.append(flat[start : start + c.numel()])
            start += c.numel()
        host[device] = pieces
    values: list[float] = []
    for device, slot in order:
        values.extend(host[device][slot])
    return values
