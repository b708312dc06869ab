"""Finding the tensors inside a value: arguments, op outputs, module and model outputs.

One bounded walk serves every place the capture looks for tensors, in this order: the value
itself; tuples and lists (named tuples and ``torch.return_types`` included); mappings and objects
with ``items``/``keys`` (a Hugging Face ``ModelOutput``, a ``BatchEncoding``), by value; other
dataclasses, by field; and any other object, by its public instance attributes (a Hugging Face
``DynamicCache`` holds its key/value tensors as ``cache.layers[i].keys``). Modules, classes,
functions and atomic values (numbers, strings, dtypes, devices, sizes) are not opened.

Bounds: containers deeper than ``MAX_DEPTH`` below the value are not opened, and a walk stops
after ``MAX_VISITS`` values (a pathological object graph costs at most that many steps).
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Iterable, Iterator
from typing import Any

import torch
from torch import nn

Tensor = torch.Tensor

MAX_DEPTH = 4
"""Containers at depth > 4 are not opened (arguments arrive as ``(args, kwargs)``, so a tensor
inside ``forward(x=[(t,)])`` is at depth 4)."""
MAX_VISITS = 10_000
"""Values a walk looks at before it stops."""

ATOMIC_TYPES = frozenset(
    {
        int,
        float,
        bool,
        complex,
        str,
        bytes,
        type(None),
        slice,
        type(Ellipsis),
        torch.dtype,
        torch.device,
        torch.layout,
        torch.memory_format,
        torch.Size,
    }
)
"""Types that never hold a tensor (checked by exact type: one set lookup)."""

_OPAQUE_TYPES = (nn.Module, type, types.FunctionType, types.MethodType, types.ModuleType)


def iter_tensors(value: Any, depth: int = 0) -> Iterator[Tensor]:
    """Tensors inside ``value``, in order (see the module docstring for what is opened)."""
    return iter(tensors_in(value, depth))


def tensors_in(value: Any, depth: int = 0) -> list[Tensor]:
    """The tensors inside ``value`` as a list (``[value]`` for a tensor)."""
    if isinstance(value, Tensor):
        return [value]
    found: list[Tensor] = []
    if type(value) not in ATOMIC_TYPES:
        _walk(value, depth, found, [MAX_VISITS])
    return found


def arg_tensors(args: tuple[Any, ...], kwargs: dict[str, Any] | None) -> list[Tensor]:
    """The tensors among a call's arguments (positional first), as ``tensors_in((args, kwargs))``
    would list them; the common case (positional tensors and scalars only) never opens a
    container and allocates nothing but the list (on the per-op path: about 0.3x of the 801-op
    chain's plain forward went to this scan when it always set up the walk)."""
    if not kwargs:
        found: list[Tensor] = []
        for value in args:
            if isinstance(value, Tensor):
                found.append(value)
            elif type(value) not in ATOMIC_TYPES:
                break
        else:
            return found
    found = []
    budget = [MAX_VISITS]
    for values in (args, kwargs.values()) if kwargs else (args,):
        for value in values:
            if isinstance(value, Tensor):
                found.append(value)
            elif type(value) not in ATOMIC_TYPES:
                _walk(value, 2, found, budget)
    return found


def _walk(value: Any, depth: int, found: list[Tensor], budget: list[int]) -> None:
    if depth > MAX_DEPTH:
        return
    items = _items(value)
    if items is None:
        return
    for item in items:
        budget[0] -= 1
        if budget[0] < 0:
            return
        if isinstance(item, Tensor):
            found.append(item)
        elif type(item) not in ATOMIC_TYPES:
            _walk(item, depth + 1, found, budget)


def _items(value: Any) -> Iterable[Any] | None:
    if isinstance(value, (tuple, list)):
        return value
    if isinstance(value, dict) or (hasattr(value, "items") and hasattr(value, "keys")):
        try:
            return list(value.values())
        except (TypeError, AttributeError):  # an ``items`` that is not a mapping's
            return None
    if isinstance(value, _OPAQUE_TYPES):
        return None
    if dataclasses.is_dataclass(value):
        return [getattr(value, field.name, None) for field in dataclasses.fields(value)]
    attributes = getattr(value, "__dict__", None)
    if type(attributes) is not dict:
        return None
    return [item for name, item in attributes.items() if not name.startswith("_")]
