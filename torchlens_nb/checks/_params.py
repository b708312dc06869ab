"""The parameter roster of a session: which tensors are checked, their names and groups.

The roster is built from metadata only (no tensor is read, no device is touched): the optimizer's
parameters that require grad, in param-group order, named by the model. ``torch.compile`` wraps
the model in an ``OptimizedModule`` whose names carry an ``_orig_mod.`` segment; it is removed so
a compiled and an eager model report the same names.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..errors import DiagnosticArgumentError, ModelTypeError

_COMPILE_SEGMENT = "_orig_mod."


@dataclass(frozen=True)
class ParamInfo:
    """One optimized parameter (metadata only; the tensor lives in ``Roster.tensors``)."""

    index: int
    """Position in the roster (and in every per-parameter evidence vector)."""
    name: str
    """Dotted name from ``model.named_parameters()``, or ``param_groups.G.I`` if the model
    does not own it."""
    group: int
    """Index of its optimizer param group."""
    numel: int
    dtype: str
    element_size: int

    @property
    def module(self) -> str:
        """Address of the owning module (``""`` for the root)."""
        return self.name.rpartition(".")[0]


class Roster:
    """The parameters a session checks, with strong references to the tensors.

    Holds the tensors (not the model or the optimizer): a parameter tensor is owned by the
    training loop for the session's lifetime anyway.
    """

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        if not isinstance(model, torch.nn.Module):
            raise ModelTypeError(
                f"ChecksSession needs an nn.Module as model, got {type(model).__name__}; "
                "pass the module you train (a torch.compile'd module is fine)."
            )
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise DiagnosticArgumentError(
                f"ChecksSession needs a torch.optim.Optimizer, got {type(optimizer).__name__}; "
                "the step sites S-B/S-C are the optimizer's step hooks."
            )
        names = {id(p): n.replace(_COMPILE_SEGMENT, "") for n, p in model.named_parameters()}
        infos: list[ParamInfo] = []
        tensors: list[torch.Tensor] = []
        seen: set[int] = set()
        for group_index, group in enumerate(optimizer.param_groups):
            for position, param in enumerate(group["params"]):
                if id(param) in seen or not param.requires_grad:
                    continue
                seen.add(id(param))
                name = names.get(id(param), f"param_groups.{group_index}.{position}")
                infos.append(
                    ParamInfo(
                        len(infos),
                        name,
                        group_index,
                        param.numel(),
                        str(param.dtype).removeprefix("torch."),
                        param.element_size(),
                    )
                )
                tensors.append(param)
        self.infos: tuple[ParamInfo, ...] = tuple(infos)
        self.tensors: tuple[torch.Tensor, ...] = tuple(tensors)
        self.unoptimized: tuple[str, ...] = tuple(
            names[id(p)] for p in model.parameters() if p.requires_grad and id(p) not in seen
        )
        self.group_count = len(optimizer.param_groups)

    def __len__(self) -> int:
        return len(self.infos)

    @property
    def snapshot_bytes(self) -> int:
        """Bytes one copy of every roster parameter takes (numel x element size)."""
        return sum(info.numel * info.element_size for info in self.infos)

    def group_members(self) -> tuple[tuple[int, ...], ...]:
        """Roster indices per optimizer param group."""
        members: list[list[int]] = [[] for _ in range(self.group_count)]
        for info in self.infos:
            members[info.group].append(info.index)
        return tuple(tuple(m) for m in members)
