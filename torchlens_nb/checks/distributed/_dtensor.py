"""DTensor and FSDP2 recognised without importing them.

``import torch.distributed.tensor`` takes 3.3 s here (``torchlens_nb`` itself 2.2 s): a DTensor
or an ``FSDPModule`` can only exist once its module was imported, so the checks look the class up
in ``sys.modules`` and never import it.
"""

from __future__ import annotations

import sys
from typing import Any

import torch


def _loaded(module_name: str, class_name: str) -> type | None:
    module = sys.modules.get(module_name)
    cls = getattr(module, class_name, None) if module is not None else None
    return cls if isinstance(cls, type) else None


def is_dtensor(tensor: Any) -> bool:
    """Whether ``tensor`` is a ``torch.distributed.tensor.DTensor`` (never imports it)."""
    cls = _loaded("torch.distributed.tensor", "DTensor")
    return cls is not None and isinstance(tensor, cls)


def local_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """This rank's shard of a DTensor (``to_local()``, no communication); any other tensor
    itself."""
    return tensor.to_local() if is_dtensor(tensor) else tensor  # type: ignore[attr-defined]


def shard_version(grad: torch.Tensor) -> int:
    """A version counter of a DTensor gradient that moves by exactly one per FSDP2
    accumulation and never by exactly one for a reset: its local tensor's counter (FSDP2 adds
    with ``grad._local_tensor += ...``, which bumps it and leaves the DTensor's own) plus
    ``2**32`` times the DTensor's own counter (``grad.zero_()`` and other in-place ops through
    the DTensor bump that one and leave the local one as it was). ``torch._foreach_zero_`` and
    ``grad.data.zero_()`` bump neither (measured, torch 2.13): only the values tell those.
    A plain tensor's is its ``_version``."""
    if is_dtensor(grad):
        return grad._local_tensor._version + (grad._version << 32)  # type: ignore[attr-defined]
    return grad._version


def is_fsdp2_module(model: torch.nn.Module) -> bool:
    """Whether ``model`` is a ``fully_shard``-ed module (never imports torch.distributed.fsdp)."""
    cls = _loaded("torch.distributed.fsdp", "FSDPModule")
    return cls is not None and isinstance(model, cls)
