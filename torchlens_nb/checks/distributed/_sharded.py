"""FSDP2 (``torch.distributed.fsdp.fully_shard``): where the gradient evidence lives, and S-A there.

Measured with gloo on 2 CPU ranks, torch 2.13 (``tests/distributed/test_fsdp2_checks.py``):

* The optimizer's parameters are DTensors sharded on dim 0 (``0.weight`` is (16, 8) globally,
  (8, 8) on each rank); their gradients are DTensors too, and ``.tolist()`` of one fails.
* A post-accumulate-grad hook on such a SHARDED parameter is called by FSDP2 itself
  (``_fsdp_collectives.foreach_reduce``) AFTER the reduce-scatter, with this rank's shard of the
  AVERAGED gradient. A NaN born on rank 1 in row 0 of ``0.weight`` lands in rank 0's shard: a
  check there blames rank 0 and rank 1 sees nothing.
* The local, pre-reduce gradient of each whole parameter lives on the UNSHARDED parameter that
  FSDP2 builds at its first all-gather: one ``nn.Parameter`` per parameter, the same object at
  every step, set on the owning module while its forward and backward run. Its
  post-accumulate-grad hook fires inside ``AccumulateGrad``, before FSDP2's post-backward
  reduce-scatters that gradient and drops it (so it is gone when S-D runs).

So a session on an FSDP2 model (:class:`ShardedGradSites`):

* hooks S-A on the unsharded parameters, found by a forward pre-hook on each owning module
  (FSDP2's own pre-forward has unsharded them by then); a gradient arriving non-finite there was
  born on this rank;
* norms each arriving gradient at S-A, one norm kernel per parameter (no host sync), because the
  unsharded gradient is freed before S-D; S-D hands those norms on in the usual
  ``PendingBackward`` (the norm of a 0-d norm is itself);
* judges at S-B what the optimizer will write: this rank's shards (``_norms`` norms a DTensor
  as its ``to_local()``), in the same single host read as the S-A norms;
* under ``distributed=None`` runs the S-B agreement (``_distributed.RankContext``): a rank whose
  own S-A evidence is non-finite raises even when its shard is finite (the reduce-scatter put
  the value into another rank's shard), every rank raises before any rank writes.

* opens the fresh-gradients check (``invariants/_fresh_grads.py``) on the SHARDED parameter,
  from its post-accumulate-grad hook: FSDP2 calls it after the reduce-scatter, once it has either
  set a new DTensor gradient (the shard held None: ``zero_grad()``) or added the reduced shard
  onto the one it held (``sharded_param.grad._local_tensor += new_sharded_grad``,
  ``_fsdp_collectives.foreach_reduce``). The gradient the step reads is that DTensor; the
  accumulation bumps its LOCAL tensor's ``_version`` by one (the DTensor's own does not move),
  so a forgotten ``zero_grad`` reads as in one process: the same gradient object, one
  accumulation more (``_dtensor.shard_version``; measured, gloo,
  ``tests/corpus/test_corpus_distributed.py``). The first such call after a backward opened
  (its first unsharded arrival) is the opener; at that first arrival, before the
  reduce-scatter, ``before_reduce`` lets the check read a held shard that no counter shows
  was reset (``torch._foreach_zero_`` bumps none).

Limits: reset detection (``PendingBackward.is_fresh``) sees ``zero_grad(set_to_none=True)``
(the shard's gradient is None at the next arrival) and ``set_requires_gradient_sync(False)``
accumulation; after ``zero_grad(set_to_none=False)`` an attempt the loop skipped is merged into
the next one. Lean S-A (two hooks on a stable graph) is off: it reads ``.grad`` of the roster's
tensors at S-D, which under FSDP2 are the reduced shards.

"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from functools import partial
from typing import Any

import torch

from ..session._sites import GradSites, unhook
from ._dtensor import local_tensor


class ShardedGradSites(GradSites):
    """S-A and S-D for a roster of DTensor shards (FSDP2): see the module docstring."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._owners: dict[int, tuple[torch.nn.Module, str]] | None = None
        self._waiting: dict[int, list[tuple[int, str]]] = {}
        """id(owning module) -> (roster index, attribute) of the parameters it holds."""
        self._awaiting: set[int] = set()
        """Roster indices watched whose unsharded parameter has not been hooked yet."""
        self._unsharded: dict[int, torch.Tensor] = {}
        self._eager: dict[int, torch.Tensor] = {}
        """This backward's S-A norms (0-d device tensors) by roster index."""
        self._last: dict[int, tuple[weakref.ref[torch.Tensor], int]] = {}
        """Roster index -> (weak reference to the unsharded gradient, its version) at its last
        arrival: accumulation without a reduce continues that tensor."""
        self._is_reduced_open = False
        """This backward's first reduced shard has been passed to :attr:`on_open`."""
        self.before_reduce: Callable[[], None] | None = None
        """Called at the first local arrival of each backward, before its reduce-scatter."""

    def _is_watched(self, index: int) -> bool:
        return index in self._awaiting or super()._is_watched(index)

    def _owner(self, index: int) -> tuple[torch.nn.Module, str] | None:
        """(owning module, attribute) of roster parameter ``index``; the map is rebuilt when an
        index is missing (the roster grew)."""
        if self._owners is None or index not in self._owners:
            self._owners = {}
            model = self._roster.model_ref()
            by_id = {id(t): i for i, t in enumerate(self._roster.tensors)}
            for module in model.modules() if model is not None else ():
                for attr, param in module._parameters.items():
                    position = by_id.get(id(param))
                    if position is not None:
                        self._owners.setdefault(position, (module, attr))
        return self._owners.get(index)

    def _hook(self, index: int) -> None:
        """Wait for the unsharded parameter: a forward pre-hook on the owning module hooks it
        (one pre-hook per module). A parameter no module owns is hooked as it is."""
        if index in self._handles or index in self._awaiting or self._stack is None:
            return
        if not self._roster.tensors[index].requires_grad:
            self._unhookable.add(index)
            return
        owner = self._owner(index)
        if owner is None:
            super()._hook(index)
            return
        module, attr = owner
        if self.on_open is not None:
            self._hook_reduced(index)
        self._awaiting.add(index)
        entries = self._waiting.setdefault(id(module), [])
        entries.append((index, attr))
        if len(entries) == 1:
            handle = module.register_forward_pre_hook(partial(self._on_forward, entries))
            self._stack.callback(handle.remove)

    def _hook_reduced(self, index: int) -> None:
        """A post-accumulate-grad hook on the sharded parameter (FSDP2 calls it after the
        reduce-scatter wrote the shard's gradient)."""
        assert self._stack is not None
        shard, hook = self._roster.tensors[index], partial(self._on_reduced, index)
        self._stack.callback(unhook, shard, hook)  # first: an interrupt leaves no hook
        shard.register_post_accumulate_grad_hook(hook)

    def _open(self, index: int, param: torch.Tensor) -> None:
        """The first unsharded arrival opens a backward; the fresh-gradients check is opened
        by the first reduced shard after it (:meth:`_on_reduced`)."""
        self._is_reduced_open = False
        if self.before_reduce is not None:
            self.before_reduce()

    def _on_reduced(self, index: int, shard: torch.Tensor) -> None:
        if not self.is_enabled or self._is_reduced_open or self.on_open is None:
            return
        self._is_reduced_open = True
        self.on_open(index, shard)

    def _on_forward(
        self, entries: list[tuple[int, str]], module: torch.nn.Module, _args: Any
    ) -> None:
        """Forward pre-hook: hook each unsharded parameter the module now holds (once per
        object; after the first step this is one identity check per parameter)."""
        if self._stack is None:
            return
        params = module._parameters
        tensors = self._roster.tensors
        for index, attr in entries:
            param = params.get(attr)
            if param is None or param is tensors[index] or self._unsharded.get(index) is param:
                continue
            previous = self._handles.pop(index, None)
            if previous is not None:
                previous.remove()
            handle = param.register_post_accumulate_grad_hook(partial(self._on_grad_arrival, index))
            self._stack.callback(handle.remove)
            self._handles[index] = handle
            self._unsharded[index] = param
            self._awaiting.discard(index)

    def _on_grad_arrival(self, index: int, param: torch.Tensor) -> None:
        """S-A on the unsharded parameter: count (the base callback), then launch this
        gradient's norm while it still exists (no host sync)."""
        super()._on_grad_arrival(index, param)
        grad = param.grad
        if not self.is_enabled or grad is None:
            return
        if self.needs_norms:
            self._eager[index] = torch.linalg.vector_norm(
                local_tensor(grad), 2, dtype=torch.float32
            )
        self._last[index] = (weakref.ref(grad), grad._version)

    def _starts_fresh(self, index: int, param: torch.Tensor) -> bool:
        """Reset since the last backward: the shard holds no gradient (``zero_grad()``) and the
        unsharded gradient is not the last one accumulated into (no ``no_sync``-style
        accumulation)."""
        if self._roster.tensors[index].grad is not None:
            return False
        last = self._last.get(index)
        if last is None:
            return False
        grad = param.grad
        return not (grad is not None and last[0]() is grad and grad._version == last[1] + 1)

    def _learn(self, fired: tuple[int, ...]) -> None:
        """Never lean (module docstring)."""

    def _arrived(
        self, fired: tuple[int, ...]
    ) -> tuple[tuple[int, ...], list[int], list[torch.Tensor]]:
        eager, self._eager = self._eager, {}
        present = [i for i in fired if i in eager]
        return fired, present, [eager[i] for i in present]

    def _detach(self) -> None:
        super()._detach()
        self._waiting.clear()
        self._awaiting.clear()
        self._unsharded.clear()
        self._eager.clear()
        self._last.clear()
        self._owners = None
