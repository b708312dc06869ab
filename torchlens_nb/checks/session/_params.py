"""The parameter roster of a session: which tensors are watched, their names and groups.

The roster starts from metadata only (no tensor is read, no device is touched): the optimizer's
parameters that require grad, in param-group order, then the model's parameters that require
grad but are in no param group. Those "outside" parameters are watched at S-A too: the optimizer
never writes them, but ``clip_grad_norm_(model.parameters(), ...)`` spreads their non-finite
gradient into every gradient the optimizer uses, and only their own S-A evidence names them.

The roster grows while the session runs: at every S-B, :meth:`Roster.sync` compares the
optimizer's param groups with the ones it knows (one ``id`` per parameter, C speed) and adds what
appeared: a group added with ``add_param_group``, a frozen parameter that started to require grad
(or holds a gradient the optimizer will use), and a frozen parameter of the model outside the
optimizer that started to require grad (gradual unfreezing: it is watched from then on, so one
unfrozen without ``add_param_group`` is named by the roster check). Each addition is kept in
:attr:`Roster.first_seen` with the attempt it was first seen at. Cost of the last: one
``requires_grad`` read per frozen outside parameter at each S-B (none for a model whose
parameters all train or all sit in the optimizer).

``torch.compile`` wraps the model in an ``OptimizedModule`` whose names carry an ``_orig_mod.``
segment; it is removed so a compiled and an eager model report the same names.
"""

from __future__ import annotations

import dataclasses
import weakref
from dataclasses import dataclass
from typing import Any, Literal

import torch

from ...errors import ModelTypeError
from ..distributed._dtensor import is_dtensor

_COMPILE_SEGMENT = "_orig_mod."

SeenReason = Literal["requires_grad", "holds_grad", "new_param", "joined_optimizer"]
"""Why a parameter joined the roster late: a frozen one started to require grad (or holds a
gradient the optimizer will use), the optimizer got a parameter it did not have, or an outside
parameter was added to a param group."""


@dataclass(frozen=True)
class ParamInfo:
    """One watched parameter (metadata only; the tensor lives in ``Roster.tensors``)."""

    index: int
    """Position in the roster (and in every per-parameter evidence vector)."""
    name: str
    """Dotted name from ``model.named_parameters()``, or ``param_groups.G.I`` if the model
    does not own it."""
    group: int | None
    """Index of its optimizer param group; None for a parameter outside the optimizer."""
    numel: int
    dtype: str
    element_size: int

    @property
    def module(self) -> str:
        """Address of the owning module (``""`` for the root)."""
        return self.name.rpartition(".")[0]

    @property
    def is_optimized(self) -> bool:
        return self.group is not None


class Roster:
    """The parameters a session watches, with strong references to the tensors.

    Holds the tensors and a weak reference to the model (for names of parameters that appear
    later), never the optimizer: a parameter tensor is owned by the training loop for the
    session's lifetime anyway.
    """

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        if not isinstance(model, torch.nn.Module):
            raise ModelTypeError(
                f"ChecksSession needs an nn.Module as model, got {type(model).__name__}; "
                "pass the module you train (a torch.compile'd module is fine)."
            )
        self._model = weakref.ref(model)
        self._names: dict[int, str] = {}
        self.infos: list[ParamInfo] = []
        self.tensors: list[torch.Tensor] = []
        self._index: dict[int, int] = {}
        self._layout: list[list[int]] = []
        self._dormant: list[tuple[int, int, torch.Tensor]] = []
        self._frozen: set[int] = set()
        self.first_seen: list[dict[str, Any]] = []
        """``{"param", "group", "attempt", "reason"}`` per parameter that joined late."""
        self.revision = 0
        """Bumped on every change: caches keyed on it (group members) stay exact."""
        self._optimized: tuple[int, ...] = ()
        self._members: tuple[tuple[int, ...], ...] = ()
        self._cached_revision = -1
        self._frozen_outside: list[torch.Tensor] = []
        """The model's parameters in no param group that do not require grad (yet)."""
        self.sync(optimizer, attempt=None)
        for param in model.parameters():
            if id(param) in self._index or id(param) in self._frozen:
                continue
            if param.requires_grad:
                self._add(param, None, None)
            else:
                self._frozen_outside.append(param)
        self.is_sharded = any(map(is_dtensor, self.tensors))
        """The parameters are DTensor shards (FSDP2): S-A then lives on the unsharded
        parameters (``_sharded.py``), and the step site reads this rank's shards."""

    def __len__(self) -> int:
        return len(self.infos)

    @property
    def model_ref(self) -> weakref.ref[torch.nn.Module]:
        """Weak reference to the session's model."""
        return self._model

    # ----- growth --------------------------------------------------------------------------------
    def sync(self, optimizer: torch.optim.Optimizer, attempt: int | None) -> list[int]:
        """Bring the roster up to the optimizer's param groups; return the indices added.

        Cost when nothing changed: one ``id`` per parameter and one ``requires_grad`` / ``grad``
        read per frozen parameter the optimizer holds.
        """
        groups = optimizer.param_groups
        layout = [list(map(id, group["params"])) for group in groups]
        added: list[int] = []
        if layout != self._layout:
            self._layout = layout
            self._dormant = []
            for group_index, group in enumerate(groups):
                for position, param in enumerate(group["params"]):
                    added.extend(self._place(param, group_index, position, attempt))
            self.revision += 1
        elif self._dormant:
            dormant, self._dormant = self._dormant, []
            for group_index, position, param in dormant:
                added.extend(self._place(param, group_index, position, attempt))
            self.revision += bool(added)
        if self._frozen_outside and any(p.requires_grad for p in self._frozen_outside):
            added.extend(self._unfrozen_outside(attempt))
        return added

    def _place(
        self, param: torch.Tensor, group: int, position: int, attempt: int | None
    ) -> list[int]:
        index = self._index.get(id(param))
        if index is not None:
            info = self.infos[index]
            if info.group != group:
                if info.group is None and attempt is not None:
                    self._note(info.name, group, attempt, "joined_optimizer")
                self.infos[index] = dataclasses.replace(info, group=group)
            return []
        if not param.requires_grad and param.grad is None:
            self._frozen.add(id(param))
            self._dormant.append((group, position, param))
            return []
        name = self._name(param, f"param_groups.{group}.{position}")
        if attempt is not None:
            reason: SeenReason = "new_param"
            if id(param) in self._frozen:
                reason = "requires_grad" if param.requires_grad else "holds_grad"
            self._note(name, group, attempt, reason)
        return [self._add(param, group, name)]

    def _unfrozen_outside(self, attempt: int | None) -> list[int]:
        """Watch the outside parameters that started to require grad; return their indices."""
        still, added = [], []
        for param in self._frozen_outside:
            if id(param) in self._index:  # placed in a param group meanwhile
                continue
            if not param.requires_grad:
                still.append(param)
            else:
                added.append(self._add(param, None, None))
                if attempt is not None:
                    self._note(self.infos[added[-1]].name, None, attempt, "requires_grad")
        self._frozen_outside = still
        return added

    def _note(self, name: str, group: int | None, attempt: int, reason: SeenReason) -> None:
        self.first_seen.append(
            {"param": name, "group": group, "attempt": attempt, "reason": reason}
        )

    def _add(self, param: torch.Tensor, group: int | None, name: str | None) -> int:
        index = len(self.infos)
        self.infos.append(
            ParamInfo(
                index,
                name if name is not None else self._name(param, f"outside.{index}"),
                group,
                param.numel(),
                str(param.dtype).removeprefix("torch."),
                param.element_size(),
            )
        )
        self.tensors.append(param)
        self._index[id(param)] = index
        self.revision += 1
        return index

    def _name(self, param: torch.Tensor, fallback: str) -> str:
        if id(param) not in self._names:
            model = self._model()
            if model is not None:
                self._names = {
                    id(p): n.replace(_COMPILE_SEGMENT, "") for n, p in model.named_parameters()
                }
        return self._names.get(id(param), fallback)

    # ----- views ---------------------------------------------------------------------------------
    def _refresh(self) -> None:
        if self._cached_revision == self.revision:
            return
        in_groups = {i for ids in self._layout for i in ids}
        self._optimized = tuple(
            info.index
            for info in self.infos
            if info.group is not None and id(self.tensors[info.index]) in in_groups
        )
        members: list[list[int]] = [[] for _ in self._layout]
        for index in self._optimized:
            group = self.infos[index].group
            assert group is not None
            members[group].append(index)
        self._members = tuple(tuple(m) for m in members)
        self._cached_revision = self.revision

    @property
    def optimized(self) -> tuple[int, ...]:
        """Roster indices of the parameters in the optimizer's param groups now."""
        self._refresh()
        return self._optimized

    @property
    def outside(self) -> tuple[str, ...]:
        """Names of watched parameters that require grad but are in no param group."""
        optimized = set(self.optimized)
        return tuple(info.name for info in self.infos if info.index not in optimized)

    @property
    def group_count(self) -> int:
        return len(self._layout)

    @property
    def snapshot_bytes(self) -> int:
        """Bytes one copy of every optimized parameter takes (numel x element size)."""
        return sum(self.infos[i].numel * self.infos[i].element_size for i in self.optimized)

    def group_members(self) -> tuple[tuple[int, ...], ...]:
        """Roster indices per optimizer param group."""
        self._refresh()
        return self._members
