"""Sites S-A (gradient arrival) and S-D (backward completion): the counting tier.

S-A is ``Tensor.register_post_accumulate_grad_hook`` on every roster parameter: it fires once per
parameter per backward, after the gradient was accumulated into ``.grad``, so it sees the
pre-clip gradient (loss-scaled under a GradScaler). The S-A callback only COUNTS: it appends the
parameter's roster index and, on the first arrival of a backward, queues the S-D callback with
the autograd engine (``queue_callback``, the mechanism DistributedDataParallel uses to learn that
a backward finished). It never reads a tensor value: no ``.item()``, no ``.tolist()``, no host
sync (``tests/checks/test_sites_static.py`` reads this module's source to enforce it; a
per-parameter ``.item()`` costs one device sync per parameter, 203 on a GPT-2-class model).

S-D runs once per backward, when the engine drains: it launches at most ONE batched
``torch._foreach_norm`` per device over the gradients that arrived and clones the GradScaler's
scale tensor, leaving both on the device. The host reads them later, once per optimizer attempt
(``_evidence.Evidence.resolve``). Measured on GPT-2 small's 148 gradients (124M float32, one
CPU thread): the norm takes 19 ms, and the session's S-B/S-C/S-D work 21 ms per unsampled
attempt, +2.6% of a 0.82 s 1x32-token training step (``benchmarks/bench_checks.py``); it is one
read of every gradient, so its share shrinks as the batch grows. Because completion comes from
the engine, a backward whose parameter set never "closes" (an unused parameter, an untaken
branch) still ends exactly.

Limit: reentrant activation checkpointing (``checkpoint(..., use_reentrant=True)``) runs a
nested backward; when a checkpointed segment's gradients arrive first, its completion closes the
outer backward early and one training backward counts as two (measured: a checkpointed last
layer gives ``backwards == 2`` for one ``loss.backward()``). Attempt grouping and the gradient
facts stay right; the backward count and a recovered accumulation factor K do not. The
non-reentrant checkpoint is counted exactly.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torch

from ._params import Roster
from ._scan import DeviceNorms, device_norms


@dataclass(frozen=True)
class PendingBackward:
    """One finished backward whose numbers still live on the device."""

    index: int
    """Backward number within the session (0-based)."""
    fired: tuple[int, ...]
    """Roster indices whose gradient arrived, in arrival order."""
    norms: DeviceNorms
    """Per-device 2-norms of those gradients (empty when no check needs norms)."""
    scale: torch.Tensor | None
    """Clone of the GradScaler scale in effect for this backward, or None."""


class GradSites:
    """Installs and runs S-A and S-D for one roster.

    Args:
        roster: the parameters to watch.
        on_backward: called at S-D with the :class:`PendingBackward` (still on the device).
        scale_source: returns the live scale tensor of the scaler, or None.
    """

    def __init__(
        self,
        roster: Roster,
        on_backward: Callable[[PendingBackward], None],
        scale_source: Callable[[], torch.Tensor | None],
    ) -> None:
        self._roster = roster
        self._on_backward = on_backward
        self._scale_source = scale_source
        self._fired: list[int] = []
        self._is_open = False
        self.is_enabled = True
        self.needs_norms = False
        self.arrivals = 0
        self.backwards = 0
        self.norm_ns = 0
        """Time spent launching the S-D norms (on CPU: computing them)."""

    def install(self, stack: contextlib.ExitStack) -> None:
        """Register one post-accumulate-grad hook per roster parameter; handles go to ``stack``."""
        for info, tensor in zip(self._roster.infos, self._roster.tensors):
            handle = tensor.register_post_accumulate_grad_hook(
                partial(self._on_grad_arrival, info.index)
            )
            stack.callback(handle.remove)
        stack.callback(self._forget_open_backward)

    def _on_grad_arrival(self, index: int, _param: torch.Tensor) -> None:
        """S-A: count the arrival; open the backward on its first arrival. No tensor reads."""
        if not self.is_enabled:
            return
        self.arrivals += 1
        self._fired.append(index)
        if not self._is_open:
            self._is_open = True
            torch.autograd.Variable._execution_engine.queue_callback(self._on_backward_end)

    def _on_backward_end(self) -> None:
        """S-D: one batched norm per device over the arrived gradients; no host sync."""
        fired = tuple(self._fired)
        self._fired.clear()
        self._is_open = False
        if not self.is_enabled or not fired:
            return
        norms: DeviceNorms = ()
        if self.needs_norms:
            start = time.perf_counter_ns()
            tensors = self._roster.tensors
            grads = [tensors[i].grad for i in fired]
            present = [(i, g) for i, g in zip(fired, grads) if g is not None]
            norms = device_norms([g for _, g in present], [i for i, _ in present])
            self.norm_ns += time.perf_counter_ns() - start
        scale = self._scale_source()
        pending = PendingBackward(
            self.backwards, fired, norms, None if scale is None else scale.detach().clone()
        )
        self.backwards += 1
        self._on_backward(pending)

    def _forget_open_backward(self) -> None:
        self._fired.clear()
        self._is_open = False
