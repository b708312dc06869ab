"""A hand-written data-parallel loop, seen by its own ``all_reduce`` of a parameter's gradient.

The PyTorch distributed tutorial averages gradients itself (``average_gradients`` in
https://pytorch.org/tutorials/intermediate/dist_tuto.html: ``dist.all_reduce(param.grad.data,
op=dist.ReduceOp.SUM)`` then ``param.grad.data /= size``). Such a model is replicated across
the call's group, exactly as under DDP, so its replicas can be compared; a model whose ranks
never all-reduce a gradient may hold different weights on purpose (model or pipeline parallel,
an ensemble) and is never compared.

While a session is attached in a multi-rank group without DDP or FSDP2,
``torch.distributed.all_reduce`` (the module attribute the loop looks up at each call) is
wrapped: a call whose tensor starts at the data pointer of an optimizer parameter's ``.grad``
(``param.grad`` or its ``.data``) calls ``on_seen(group)`` once. The wrapper is one per
process whatever the number of sessions; the last session to detach puts the original back
(also on an exception: the removal is on the session's exit stack before the wrapper is set).

Cost: per ``all_reduce`` call until the first gradient is seen, one set lookup; the set of
gradient data pointers is rebuilt at most once per backward (one ``data_ptr()`` per optimizer
parameter). After that, one attribute read per call. Cannot see: an all-reduce of a flattened
copy of the gradients (``torch._utils._flatten_dense_tensors``), ``all_reduce_coalesced``,
functional collectives, a name bound before the session attached (``from torch.distributed
import all_reduce``): there the replica comparison stays an ``unavailable`` entry.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from typing import Any

import torch

from ..session._params import Roster

_LISTENERS: dict[int, Callable[[torch.Tensor, Any], None]] = {}
"""Every attached watcher, by id, called with (tensor, group) at each ``all_reduce``."""
_PATCH: list[Callable[..., Any]] = []
"""[the original ``all_reduce``, the wrapper set in its place] while any watcher is attached."""


class GradReduceWatch:
    """Calls ``on_seen(group)`` at the first ``all_reduce`` of an optimizer parameter's
    gradient (module docstring)."""

    def __init__(
        self,
        roster: Roster,
        backwards: Callable[[], int],
        on_seen: Callable[[Any], None],
    ) -> None:
        self._roster = roster
        self._backwards = backwards
        self._on_seen = on_seen
        self._pointers: frozenset[int] = frozenset()
        self._built_at: int | None = None
        """The backward count when :attr:`_pointers` was built."""
        self.is_seen = False

    def install(self, stack: contextlib.ExitStack) -> None:
        """Watch ``torch.distributed.all_reduce`` until ``stack`` closes."""
        key = id(self)
        stack.callback(_unwatch, key)  # first: an interrupt after it leaves nothing behind
        if not _PATCH:
            original = torch.distributed.all_reduce
            _PATCH[:] = [original, _wrapped(original)]
            torch.distributed.all_reduce = _PATCH[1]
        _LISTENERS[key] = self._on_all_reduce

    def _on_all_reduce(self, tensor: torch.Tensor, group: Any) -> None:
        if self.is_seen or not isinstance(tensor, torch.Tensor):
            return
        count = self._backwards()
        if count != self._built_at:
            self._built_at = count
            tensors = self._roster.tensors
            grads = (tensors[i].grad for i in self._roster.optimized)
            self._pointers = frozenset(g.data_ptr() for g in grads if g is not None and g.numel())
        if tensor.numel() and tensor.data_ptr() in self._pointers:
            self.is_seen = True
            self._on_seen(group)


def _wrapped(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def all_reduce(tensor: Any, *args: Any, **kwargs: Any) -> Any:
        group = kwargs["group"] if "group" in kwargs else args[1] if len(args) > 1 else None
        for listener in tuple(_LISTENERS.values()):
            listener(tensor, group)
        return original(tensor, *args, **kwargs)

    return all_reduce


def _unwatch(key: int) -> None:
    _LISTENERS.pop(key, None)
    if _LISTENERS or not _PATCH:
        return
    original, wrapper = _PATCH
    _PATCH.clear()
    if torch.distributed.all_reduce is wrapper:  # someone wrapped it after us: theirs stays
        torch.distributed.all_reduce = original
