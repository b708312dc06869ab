"""Sites S-A (gradient arrival) and S-D (backward completion): the counting tier.

S-A is ``Tensor.register_post_accumulate_grad_hook`` on every roster parameter: it fires once per
parameter per backward, after the gradient was accumulated into ``.grad``, so it sees the
pre-clip gradient (loss-scaled under a GradScaler). The S-A callback only COUNTS: it appends the
parameter's roster index and, on the first arrival of a backward, queues the S-D callback with
the autograd engine (``queue_callback``, the mechanism DistributedDataParallel uses to learn that
a backward finished). It never reads a tensor value: no ``.item()``, no ``.tolist()``, no host
sync (``tests/checks/test_sites_static.py`` reads this module's source to enforce it; a
per-parameter ``.item()`` costs one device sync per parameter, 203 on a GPT-2-class model).

S-D runs once per backward, when the engine drains, in two callbacks (each held whole against
Ctrl-C: ``_interrupts.shielded``). The first launches at
most ONE batched norm per device over the gradients that arrived (``_norms.device_norms``;
none when the engine deferred it to the step site's pass, ``_arrival.py``) and
clones the GradScaler's scale tensor, leaving both on the device; the host reads them later,
once per optimizer attempt (``_evidence.Evidence.resolve``). The second, queued by the first so
it runs after every callback already queued (DistributedDataParallel's copy of the all-reduced
gradient into ``.grad`` is one), snapshots each arrived gradient (the tensor and its
``_version``): at S-B a gradient that is the same tensor with the same version is exactly the
one its norm was measured on, and any other (clipped, replaced, arrived without a hook) is read
at the step site. The snapshot holds the gradients until their attempt closes (at S-B, or when
the next backward starts from reset gradients), never longer: a loop that skips the step holds
its dropped gradients until the next backward's first gradient arrives. In-place writes
through ``.data`` do not bump ``_version``, so the step site norms every gradient the optimizer
is about to use again (``_engine.Engine._judge_step_site``): the S-D norms are the arrival
evidence (pre-clip, per micro-batch), the S-B norms the pre-write verdict. Measured on GPT-2
small's 148 gradients (124M float32, one CPU thread): each norm pass takes about 19 ms of a
0.82 s 1x32-token training step (``benchmarks/bench_checks.py``); it is one read of every
gradient, so its share shrinks as the batch grows. Because completion comes from the engine, a backward whose
parameter set never "closes" (an unused parameter, an untaken branch) still ends exactly.

Reset detection (no host read): at the first arrival of a backward, the arriving parameter's
gradient is compared with the record of its previous arrival. Accumulation adds into the same
tensor (version + 1); ``zero_grad()`` replaces it by None (a new tensor arrives) or zeroes it in
place (version + 2). Either way the backward starts from reset gradients
(``PendingBackward.is_fresh``): the backwards before it that no optimizer step used form an
attempt the loop (or the GradScaler) skipped.

Limit: reentrant activation checkpointing (``checkpoint(..., use_reentrant=True)``) runs a
nested backward; when a checkpointed segment's gradients arrive first, its completion closes the
outer backward early and one training backward counts as two (measured: a checkpointed last
layer gives ``backwards == 2`` for one ``loss.backward()``). Attempt grouping and the gradient
facts stay right; the backward count and a recovered accumulation factor K do not. The
non-reentrant checkpoint is counted exactly.
"""

from __future__ import annotations

import contextlib
import operator
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from itertools import repeat
from typing import TYPE_CHECKING, cast

import torch

from ..._hooks import remove_hook
from ..._interrupts import shielded
from ..scans._norms import DeviceNorms, NormPlan
from ._params import Roster

if TYPE_CHECKING:
    from torch.utils.hooks import RemovableHandle

MAX_SNAPSHOTS = 4
"""Per-backward gradient snapshots kept as lists; older ones are merged into one mapping."""

STABLE_BACKWARDS = 3
"""Identical backwards (same parameters, same first arrival) after which S-A keeps one hook."""


@dataclass(frozen=True)
class _Snapshot:
    """The gradients one backward left (strong references, held until its attempt closes)."""

    indices: tuple[int, ...]
    grads: list[torch.Tensor]
    versions: list[int]


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
    is_fresh: bool
    """The backward started from reset gradients (see the module docstring)."""
    defers: bool = False
    """Its norms were not launched at S-D: the step site's read is its arrival read
    (``_arrival.py``), or, at another resolution point, a read of :attr:`snapshot`."""
    snapshot: _Snapshot | None = None
    """What the backward left (set at S-D's second callback)."""
    from_step: tuple[int, ...] = ()
    """Deferred, then read at the step site: roster indices whose arrival norm IS the step
    site's norm (the same tensor at the same version); their values come from that read."""
    unread: tuple[int, ...] = ()
    """Deferred, and changed in place before it was read: no arrival norm for these."""


class GradSites:
    """Installs and runs S-A and S-D for one roster (which may grow while attached).

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
        self._is_fresh = False
        self._stack: contextlib.ExitStack | None = None
        self._handles: dict[int, RemovableHandle] = {}
        self._lean: tuple[int, ...] | None = None
        """While lean: the watched indices (roster order); only the openers keep their hooks."""
        self._lean_set: frozenset[int] = frozenset()
        self._unhookable: set[int] = set()
        self._expected: frozenset[int] = frozenset()
        self._last_fired: tuple[int, ...] | None = None
        self._repeats = 0
        self._snapshots: list[_Snapshot] = []
        self._merged: dict[int, tuple[torch.Tensor, int]] = {}
        self._matched: tuple[tuple[int, ...], tuple[int, ...]] | None = None
        self.device_norms = NormPlan()
        """The S-D kernel (its grouping is kept from one backward to the next)."""
        self.is_enabled = True
        self.needs_norms = False
        self.defers_next = False
        """The next backward defers its norm (the engine's ``ArrivalReads``); consumed by it."""
        self.on_reset: Callable[[], None] | None = None
        """Called at the first arrival of a backward from reset gradients, before the
        snapshots are dropped: a deferred backward's gradients are still there to read."""
        self.arrivals = 0
        self.backwards = 0
        self.norm_ns = 0
        """Time spent launching the S-D norms (on CPU: computing them)."""
        self.on_open: Callable[[int, torch.Tensor], None] | None = None
        """Called at the first gradient arrival of each backward (the fresh-gradients check)."""
        self.unobserved_backwards = 0
        """Backwards seen only at the step site (lean mode, neither opener got a gradient);
        their gradients were judged there, but they are not counted as backwards."""

    def install(self, stack: contextlib.ExitStack) -> None:
        """Register one post-accumulate-grad hook per roster parameter that requires grad;
        handles go to ``stack`` (and so do the hooks :meth:`watch` adds later)."""
        self._stack = stack
        stack.callback(self._detach)
        self.watch(range(len(self._roster)))

    def watch(self, indices: range | list[int]) -> None:
        """Hook roster parameters not watched yet. One that does not require grad cannot be
        hooked; :meth:`retry` tries it again. New parameters end lean mode."""
        if self._stack is None:
            return
        tensors = self._roster.tensors
        fresh = []
        for index in indices:
            if self._is_watched(index):
                continue
            if tensors[index].requires_grad:
                fresh.append(index)
            else:
                self._unhookable.add(index)
        if fresh and self._lean is not None:
            self._leave_lean()
        for index in fresh:
            self._hook(index)

    def retry(self) -> None:
        """Hook the parameters that did not require grad when last looked at (usually none)."""
        if self._unhookable:
            waiting, self._unhookable = self._unhookable, set()
            self.watch(sorted(waiting))

    def _is_watched(self, index: int) -> bool:
        return index in self._handles or index in self._lean_set

    def _hook(self, index: int) -> None:
        if index in self._handles or self._stack is None:
            return
        tensor = self._roster.tensors[index]
        if not tensor.requires_grad:
            self._unhookable.add(index)
            return
        hook = partial(self._on_grad_arrival, index)
        self._stack.callback(unhook, tensor, hook)  # first: an interrupt leaves no hook
        self._handles[index] = tensor.register_post_accumulate_grad_hook(hook)

    @property
    def is_lean(self) -> bool:
        """Whether S-A runs on two hooks (the graph was stable; see :meth:`_learn`)."""
        return self._lean is not None

    def _learn(self, fired: tuple[int, ...]) -> None:
        """After :data:`STABLE_BACKWARDS` identical backwards, keep only the hooks of the first
        and the last arrival (the openers: the layers nearest the loss and nearest the input);
        whichever arrives first queues S-D, and S-D reads which gradients changed itself.

        Measured on 5,000 small parameters (``benchmarks/bench_checks.py`` ``many_params``):
        no-op post-accumulate hooks alone cost 1.04x a bare step, the whole session with every
        hook 1.07x. Any backward whose parameter set differs, a parameter that appears, or a
        gradient found at the step site that no backward left ends lean mode.
        """
        if fired == self._last_fired:
            self._repeats += 1
        else:
            self._last_fired, self._repeats = fired, 1
        if self._repeats < STABLE_BACKWARDS or self._lean is not None:
            return
        openers = {fired[0], fired[-1]}
        self._lean = tuple(sorted(self._handles))
        self._lean_set = frozenset(self._lean)
        self._expected = frozenset(fired)
        for index in self._lean:
            if index not in openers:
                self._handles.pop(index).remove()

    def _leave_lean(self) -> None:
        lean, self._lean, self._lean_set = self._lean, None, frozenset()
        self._last_fired, self._repeats = None, 0
        for index in lean or ():
            self._hook(index)

    def _changed(self) -> tuple[list[int], list[torch.Tensor]]:
        """Lean S-D: the watched parameters whose gradient this backward changed (a new
        tensor, or the recorded one with a new ``_version``), in roster order, and those
        gradients."""
        lean = self._lean or ()
        tensors = self._roster.tensors
        grads = [tensors[i].grad for i in lean]
        if not self._snapshots and not self._merged:
            if all(map(operator.is_not, grads, repeat(None))):  # C speed, no pair objects
                return list(lean), cast("list[torch.Tensor]", grads)
            pairs = [(i, g) for i, g in zip(lean, grads) if g is not None]
        else:
            held = self._held_map()
            pairs = []
            for index, grad in zip(lean, grads):
                if grad is None:
                    continue
                record = held.get(index)
                if record is None or record[0] is not grad or record[1] != grad._version:
                    pairs.append((index, grad))
        return [i for i, _ in pairs], [g for _, g in pairs]

    def _held_map(self) -> dict[int, tuple[torch.Tensor, int]]:
        """Roster index -> (gradient, version) of its latest snapshot."""
        held = dict(self._merged)
        for snapshot in self._snapshots:
            held.update(zip(snapshot.indices, zip(snapshot.grads, snapshot.versions)))
        return held

    def _on_grad_arrival(self, index: int, param: torch.Tensor) -> None:
        """S-A: count the arrival; open the backward on its first arrival. No tensor reads."""
        if not self.is_enabled:
            return
        self._fired.append(index)
        if not self._is_open:
            self._is_open = True
            self._is_fresh = self._starts_fresh(index, param)
            self._open(index, param)
            if self._is_fresh:
                if self.on_reset is not None:
                    self.on_reset()
                self.forget()  # the gradients the records hold were reset: stop pinning them
            torch.autograd.Variable._execution_engine.queue_callback(self._on_backward_end)

    def _open(self, index: int, param: torch.Tensor) -> None:
        """A backward opened on ``param``: tell :attr:`on_open`."""
        if self.on_open is not None:
            self.on_open(index, param)

    def _starts_fresh(self, index: int, param: torch.Tensor) -> bool:
        """Whether ``param``'s gradient was reset since the last backward it arrived in: it is
        not the tensor recorded then, or it changed more than by this one accumulation."""
        held = self._held(index)
        if held is None:
            return False
        grad = param.grad
        return grad is None or grad is not held[0] or grad._version != held[1] + 1

    def _held(self, index: int) -> tuple[torch.Tensor, int] | None:
        """(gradient, version) recorded for ``index`` at its latest backward, if any."""
        for snapshot in reversed(self._snapshots):
            indices = snapshot.indices
            position = 0 if indices and indices[0] == index else None
            if position is None and index in indices:
                position = indices.index(index)
            if position is not None:
                return snapshot.grads[position], snapshot.versions[position]
        return self._merged.get(index)

    @shielded()
    def _on_backward_end(self) -> None:
        """S-D: one batched norm per device over the arrived gradients; no host sync."""
        fired = tuple(self._fired)
        self._fired.clear()
        self._is_open = False
        if not self.is_enabled or not fired:
            return
        fired, indices, grads = self._arrived(fired)
        self.arrivals += len(fired)
        norms: DeviceNorms = ()
        defers, self.defers_next = self.needs_norms and self.defers_next, False
        if self.needs_norms and not defers:
            start = time.perf_counter_ns()
            norms = self.device_norms(grads, indices)
            self.norm_ns += time.perf_counter_ns() - start
        scale = self._scale_source()
        pending = PendingBackward(
            self.backwards,
            fired,
            norms,
            None if scale is None else scale.detach().clone(),
            self._is_fresh,
            defers,
        )
        self.backwards += 1
        settle = partial(self._on_backward_settled, pending, tuple(indices), grads)
        torch.autograd.Variable._execution_engine.queue_callback(settle)

    def _arrived(
        self, fired: tuple[int, ...]
    ) -> tuple[tuple[int, ...], list[int], list[torch.Tensor]]:
        """S-D: (the indices whose gradient this backward changed, those with a gradient, the
        tensors to norm for them): the gradients themselves (lean: read from ``.grad``)."""
        if self._lean is not None:
            indices, grads = self._changed()
            fired = tuple(indices)
            if frozenset(fired) != self._expected:
                self._leave_lean()
            return fired, indices, grads
        self._learn(fired)
        tensors = self._roster.tensors
        arrived = [tensors[i].grad for i in fired]
        if any(g is None for g in arrived):
            present = [i for i, g in zip(fired, arrived) if g is not None]
            return fired, present, [g for g in arrived if g is not None]
        return fired, list(fired), cast("list[torch.Tensor]", arrived)

    @shielded()
    def _on_backward_settled(
        self, pending: PendingBackward, indices: tuple[int, ...], grads: list[torch.Tensor]
    ) -> None:
        """S-D, after every callback queued before it: record what each gradient now is."""
        snapshot = _Snapshot(indices, grads, [g._version for g in grads])
        self._snapshots.append(snapshot)
        if len(self._snapshots) > MAX_SNAPSHOTS:
            oldest = self._snapshots.pop(0)
            self._merged.update(zip(oldest.indices, zip(oldest.grads, oldest.versions)))
        self._on_backward(replace(pending, snapshot=snapshot))

    def still_as_left(
        self, snapshot: _Snapshot
    ) -> tuple[list[tuple[int, torch.Tensor, bool]], tuple[int, ...]]:
        """What is left of ``snapshot``: (index, gradient, whether it is still the parameter's
        ``.grad``) for every gradient at the ``_version`` its backward left (a gradient the loop
        replaced or reset to None still holds the arrival values), and the indices changed in
        place since (clipped, zeroed, accumulated into). Host metadata only: about 0.3 us per
        gradient."""
        tensors = self._roster.tensors
        intact: list[tuple[int, torch.Tensor, bool]] = []
        changed: list[int] = []
        for index, grad, version in zip(snapshot.indices, snapshot.grads, snapshot.versions):
            if grad._version == version:
                intact.append((index, grad, tensors[index].grad is grad))
            else:
                changed.append(index)
        return intact, tuple(changed)

    def step_site_grads(
        self, indices: tuple[int, ...], measured: set[int]
    ) -> list[tuple[int, torch.Tensor]]:
        """S-B: the gradients the optimizer is about to use (``indices`` whose ``.grad`` is not
        None), all of which the step site norms. One that no backward of ``measured`` left
        (a backward ran without either lean opener) ends lean mode.

        Host metadata only, no tensor value is read. The common case (one backward whose
        gradients are exactly the optimizer's, still the same tensors, in the same order) reads
        each ``.grad`` once and compares at C speed, about 0.2 us per parameter; otherwise one
        dictionary walk, about 0.7 us per parameter.
        """
        tensors = self._roster.tensors
        grads = [tensors[i].grad for i in indices]  # each .grad read once (5,000: ~1% of a step)
        present = cast(
            "list[tuple[int, torch.Tensor]]",
            list(zip(indices, grads))
            if all(map(operator.is_not, grads, repeat(None)))
            else [(i, g) for i, g in zip(indices, grads) if g is not None],
        )
        if len(self._snapshots) == 1 and not self._merged:
            snapshot = self._snapshots[0]
            if self._matched != (indices, snapshot.indices):
                is_same = set(indices) == set(snapshot.indices)
                self._matched = (indices, snapshot.indices) if is_same else None
            if self._matched is not None:
                if indices != snapshot.indices:  # the same set in another order
                    grads = [tensors[i].grad for i in snapshot.indices]
                if all(map(operator.is_, grads, snapshot.grads)):
                    return present
        if self._lean is None:
            return present
        held = self._held_map()
        is_unseen = any(index not in measured or index not in held for index, _ in present)
        if is_unseen:  # a backward ran without either opener
            self.unobserved_backwards += 1
            self._leave_lean()
        return present

    def forget(self) -> None:
        """Drop the gradient snapshots: the attempt they belong to closed (or the session was
        disabled), and the gradients are not pinned past it."""
        self._snapshots = []
        self._merged = {}

    def _detach(self) -> None:
        self._fired.clear()
        self._is_open = False
        self._stack = None
        self._handles.clear()
        self._lean, self._lean_set = None, frozenset()
        self._unhookable = set()
        self._last_fired, self._repeats = None, 0
        self.forget()


def unhook(tensor: torch.Tensor, hook: object) -> None:
    """Remove ``hook`` from ``tensor``'s post-accumulate-grad hooks if it is there (safe to
    put on an exit stack before the hook is registered)."""
    hooks = tensor._post_accumulate_grad_hooks
    if hooks:
        remove_hook(hooks, hook)
