"""Gradients are fresh: the first backward after an accepted step does not add onto the
gradient that step used (a loop without ``optimizer.zero_grad()``).

At S-C (after the write) the check records, per optimizer parameter, a weak reference to its
gradient and the gradient's ``_version``. At the first gradient arrival of the next backward
(S-A, the post-accumulate hook of the parameter that opens it) it compares: the same tensor
whose version moved by exactly one is the old gradient with one ``grad += g`` on top. Reset
gradients are a new tensor (``zero_grad(set_to_none=True)``) or moved by two (``zero_()``, then
the accumulation).

Such a backward is a candidate only: the step judges the gradient it will read. At the
optimizer's next step-site (S-B, before it writes) the candidate is confirmed when the parameter
still holds that tensor (``zero_grad()`` sets it to None) and each later backward of the attempt
that opened on the same parameter moved its version by exactly its own accumulation (a
``zero_()`` in between is one bump more). In-place work on the gradient after the last backward
(``clip_grad_norm_``, a scaler's ``unscale_``) is no reset. A GAN's discriminator (or a DDPG
critic) gets the other network's backward onto its gradients after its step and zeroes them
before its own backward: nothing stale is used, nothing is reported (issue 42). The finding
(``grads_not_reset``, warning) names the parameter and the attempt.

A reset through ``.data`` (``p.grad.data.zero_()``, the idiom of 2017 tutorials) does not bump
the version: tensor and version look untouched. Where that is so at the moment the next gradient
is about to be added (a tensor hook on each parameter that has opened a backward, at most
``MAX_OPENERS``, installed while the session is attached), the held gradient is read: all zeros,
where it had a non-zero element at the step (a device flag taken at S-C once this case has been
seen), is a reset. A gradient already exactly zero at the step cannot tell (WGAN-GP's critic
output bias: its real and fake terms cancel): the candidate stands, and adding onto zeros changes
nothing on that parameter. The reads are host syncs, made only on this path (a loop that forgets
``zero_grad`` or resets through ``.data``), never in a loop that zeroes with ``zero_grad()``.

Cost: one weak reference and one ``_version`` read at S-C per parameter that has opened a
backward so far (every optimizer parameter until the first backward has opened, or once more
than ``MAX_OPENERS`` distinct ones have), one comparison at S-A, one tensor-hook call per opener
per backward; no tensor read outside the path above. Only the opener is ever compared, so
recording the others was wasted: on 5,000 small parameters (``benchmarks/bench_checks.py
many_params``) it was 3.8% of the training step (py-spy). Cannot see: a loop that resets some
gradients and not others (only the parameter that opens the backward is compared); a backward
opened by a parameter that opened none before (its first time is not compared); a
``zero_grad(set_to_none=False)`` between the other network's backward and a backward that opens
on another parameter reads as not reset. ``session.paused()`` keeps the record: a pause declares
writes to the weights, not to the gradients.

On FSDP2 shards (``distributed/_sharded.py``) the check reads the sharded gradient the step will
use: the backward is opened on it by the post-accumulate-grad hook FSDP2 calls after its
reduce-scatter, and versions are ``_dtensor.shard_version`` (FSDP2 accumulates with
``grad._local_tensor += ...``: one bump of the local counter; ``grad.zero_()`` bumps the
DTensor's own). The shards of one reduce-scatter are views of one buffer sharing one counter, so
a later backward of the attempt is compared with the version the previous one left at S-D
(``on_backward``), not at its opener. A reset that bumps no counter (``torch._foreach_zero_``,
``zero_grad(set_to_none=False)`` of an optimizer built with ``foreach=True``; ``.data``) is read
at the first local arrival of the next backward (``before_reduce``; no tensor hook fires on a
sharded parameter): this rank's shard all zeros is a reset. Declared exception:
``expect_grads_carried_over()``.
"""

from __future__ import annotations

import contextlib
import functools
import operator
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from ...report import Finding, Where
from ...report._checks import Action
from ..distributed._dtensor import local_tensor, shard_version
from ..gradients._update_ratio import UpdateSample
from ..session._evidence import Attempt
from ..session._ledger import StepLedger
from ..session._params import Roster
from ._invariant import Declared, InvariantCheck

MAX_OPENERS = 16
"""Distinct parameters that opened a backward, recorded at S-C by themselves; past this many
(a model whose first gradient varies step to step), every optimizer parameter is recorded."""


class FreshGradsCheck(InvariantCheck):
    """``grads_not_reset``: a backward accumulated onto the gradient the last step used."""

    name = "fresh_grads"
    site = "S-A"

    def __init__(self, roster: Roster, *, action: Action, declared: Declared) -> None:
        super().__init__(roster, action, {}, declared)
        self._version_of: Callable[[torch.Tensor], int] = (
            shard_version if roster.is_sharded else operator.attrgetter("_version")
        )
        """A gradient's version counter (a DTensor's: ``_dtensor.shard_version``)."""
        self._record: dict[int, tuple[weakref.ref[torch.Tensor], int]] | None = None
        self._stale: tuple[int, weakref.ref[torch.Tensor], int] | None = None
        """A candidate: (index, the gradient it accumulated onto, its version then)."""
        self._openers: dict[int, None] = {}
        """The parameters that opened a backward so far, in order (an ordered set)."""
        self._members: tuple[tuple[int, ...], frozenset[int]] = ((), frozenset())
        """The roster's optimized tuple last seen, and its members as a set."""
        self._stack: contextlib.ExitStack | None = None
        """The attached session's hooks (the tensor hooks below are removed with them)."""
        self._hooked: set[int] = set()
        self._zeroed: set[int] = set()
        """Openers whose held gradient was all zeros just before this backward added to it."""
        self._nonzero: dict[int, torch.Tensor] = {}
        """Per hooked opener, whether its gradient had a non-zero element at the last S-C (a
        device flag, taken only once the untouched-looking case has been seen)."""
        self._is_value_watched = False
        self._stale_tally = self.tally(
            "grads_not_reset",
            "warning",
            _message,
            remedy="Call optimizer.zero_grad() once per optimizer step (before the backward or "
            "after the step); with gradient accumulation, after the step that uses them. A "
            "loop that carries gradients over steps on purpose declares it with "
            "session.expect_grads_carried_over().",
        )

    def on_open(self, index: int, param: torch.Tensor) -> None:
        """S-A: the first arrival of a backward; only the first backward after a step is
        compared."""
        if index not in self._openers and len(self._openers) <= MAX_OPENERS:
            self._openers[index] = None
        if self._stale is not None and self._stale[0] == index:
            self._follow(param)
        record, self._record = self._record, None
        held = None if record is None else record.get(index)
        zeroed, self._zeroed = index in self._zeroed, set()
        if held is None or zeroed or self.declared.carries_grads:
            return
        grad = param.grad
        if grad is not None and grad is held[0]() and self._version_of(grad) == held[1] + 1:
            self._stale = (index, held[0], held[1] + 1)

    def on_attempt(self, attempt: Attempt) -> Finding | None:
        self.evaluations += 1
        stale, self._stale = self._stale, None
        if stale is None:
            return None
        index, held, _ = stale
        grad = self.roster.tensors[index].grad
        if grad is None or grad is not held():
            return None  # reset after the candidate backward: the step reads fresh gradients
        info = self.roster.infos[index]
        return self.occur(
            self._stale_tally,
            attempt.index,
            attempt.global_step,
            {"param": info.name},
            Where(module=info.module),
        )

    def on_backward(self, ledger: StepLedger) -> Finding | None:
        """S-D: the candidate's version as the backward left it, so that the next backward's
        opener compares with its own accumulation only. Under FSDP2 the shards of one
        reduce-scatter are views of one buffer that share a version counter: every shard added
        onto after the opener bumped it too (measured: 4 parameters, +4 per backward)."""
        stale = self._stale
        if stale is not None:
            index, held, _ = stale
            grad = self.roster.tensors[index].grad
            if grad is None or grad is not held():
                self._stale = None
            else:
                self._stale = (index, held, self._version_of(grad))
        return None

    def _follow(self, param: torch.Tensor) -> None:
        """A later backward of the attempt opened on the candidate's parameter: a version that
        moved by more than this accumulation since the last one was reset in between (a
        ``zero_()``); a new tensor was reset to None."""
        assert self._stale is not None
        index, held, version = self._stale
        grad = param.grad
        if grad is None or grad is not held() or self._version_of(grad) != version + 1:
            self._stale = None
        else:
            self._stale = (index, held, version + 1)

    def on_written(self, attempt: Attempt, sample: UpdateSample | None) -> Finding | None:
        tensors, version_of = self.roster.tensors, self._version_of
        is_sharded = self.roster.is_sharded
        record = {}
        for index in self._watched():
            grad = tensors[index].grad
            if grad is not None:
                record[index] = (weakref.ref(grad), version_of(grad))
        self._record = record
        self._zeroed = set()
        if self._is_value_watched:
            with torch.no_grad():
                self._nonzero = {
                    i: tensors[i].grad.detach().any()  # type: ignore[union-attr]
                    for i in self._hooked
                    if i in record
                }
        if self._stack is not None and len(self._hooked) < MAX_OPENERS and not is_sharded:
            self._hook_openers()
        return None

    def install(self, stack: contextlib.ExitStack) -> None:
        """The session attached: tensor hooks go to ``stack`` (removed at detach)."""
        self._stack, self._hooked = stack, set()
        stack.callback(self._uninstalled)

    def _uninstalled(self) -> None:
        self._stack, self._hooked = None, set()

    def _hook_openers(self) -> None:
        """A tensor hook (before accumulation) on each opener not hooked yet."""
        assert self._stack is not None
        tensors = self.roster.tensors
        for index in list(self._openers)[:MAX_OPENERS]:
            param = tensors[index]
            if index in self._hooked or not param.requires_grad:
                continue
            handle = param.register_hook(functools.partial(self._before_accumulate, index))
            self._stack.callback(handle.remove)
            self._hooked.add(index)

    def _before_accumulate(self, index: int, incoming: torch.Tensor) -> None:
        """About to add ``incoming`` onto parameter ``index``'s gradient: if it is the recorded
        tensor at the recorded version, only its values can tell whether it was reset through
        ``.data``."""
        self._look_untouched(index)

    def before_reduce(self) -> None:
        """FSDP2: a backward started and its reduce-scatter has not added onto the shards
        yet: each recorded gradient that looks untouched is read now (a reset by
        ``torch._foreach_zero_``, the optimizer's ``zero_grad(set_to_none=False)`` with
        ``foreach=True``, or through ``.data``, bumps no counter of a DTensor)."""
        for index in self._record or ():
            self._look_untouched(index)

    def _look_untouched(self, index: int) -> None:
        """If ``index``'s gradient is the recorded tensor at the recorded version, read whether
        it is all zeros (this rank's shard of a DTensor): a host sync, on this path only."""
        record = self._record
        held = None if record is None else record.get(index)
        if held is None:
            return
        grad = self.roster.tensors[index].grad
        if grad is None or grad is not held[0]() or self._version_of(grad) != held[1]:
            return
        self._is_value_watched = True
        was_nonzero = self._nonzero.get(index)
        with torch.no_grad():
            if (was_nonzero is None or bool(was_nonzero)) and not bool(local_tensor(grad).any()):
                self._zeroed.add(index)  # non-zero at the step (or not known), zeros now

    def _watched(self) -> Sequence[int]:
        """The optimizer parameters S-C records: those that opened a backward so far, or all of
        them (none has opened yet, or more than ``MAX_OPENERS`` have)."""
        optimized = self.roster.optimized
        if not self._openers or len(self._openers) > MAX_OPENERS:
            return optimized
        if self._members[0] is not optimized:  # the roster keeps one tuple per revision
            self._members = (optimized, frozenset(optimized))
        members = self._members[1]
        return [index for index in self._openers if index in members]


def _message(fields: Mapping[str, Any]) -> str:
    return (
        f"the gradient of {fields['param']} still held what the previous optimizer step used "
        f"when the next backward added to it (no zero_grad between the steps): first at "
        f"attempt {fields['first_attempt']}, {fields['count']} attempt(s). Every step then "
        "applies the sum of all past gradients: it looks like a too-high learning rate."
    )
