"""Parameters a forward uses that the model does not register.

Layers kept in a plain Python list, dict or tuple, or built inside ``forward``, hold weights
that ``model.parameters()`` (and so every optimizer built from it, ``state_dict`` and
``.to(device)``) never sees: they never train, and a layer built in ``forward`` is redrawn at
random every call. One forward and loss on the working copy; the loss's autograd graph names
every leaf tensor that requires grad (each ``AccumulateGrad`` node holds its ``variable``);
those that are not parameters of the model are unregistered.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ...report import Finding
from .._batches import call_model, loss_input, split_batch
from .._model_state import preserved


def _graph_leaves(loss: torch.Tensor) -> list[torch.Tensor]:
    leaves, seen = [], set()
    stack: list[Any] = [loss.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        variable = getattr(node, "variable", None)
        if isinstance(variable, torch.Tensor):
            leaves.append(variable)
        stack.extend(next_node for next_node, _ in node.next_functions)
    return leaves


def _owner(model: nn.Module, leaf: torch.Tensor) -> str | None:
    """Where an unregistered leaf lives: an attribute path reaching an ``nn.Module`` through
    plain lists, tuples and dicts (``layers[0].weight``), or None (built inside forward)."""
    for module_name, module in model.named_modules():
        for attr, value in vars(module).items():
            if attr.startswith("_"):
                continue
            found = _search(value, leaf, f"{module_name + '.' if module_name else ''}{attr}", 0)
            if found is not None:
                return found
    return None


def _search(value: Any, leaf: torch.Tensor, path: str, depth: int) -> str | None:
    if depth > 3:
        return None
    if isinstance(value, nn.Module):
        for name, p in value.named_parameters():
            if p is leaf:
                return f"{path}.{name}"
        return None
    if isinstance(value, (list, tuple)):
        items: Any = enumerate(value)
    elif isinstance(value, dict):
        items = value.items()
    else:
        return None
    for key, item in items:
        found = _search(item, leaf, f"{path}[{key!r}]", depth + 1)
        if found is not None:
            return found
    return None


def unregistered_findings(model: nn.Module, batch: Any, loss_fn: Any) -> list[Finding]:
    """A warning naming the tensors the forward trained through that ``model`` does not
    register (``model`` is the working copy: one forward and loss in train mode, no
    backward; modes and buffers restored)."""
    inputs, targets = split_batch(batch)
    with preserved(model, mode="train"):
        loss = loss_fn(loss_input(call_model(model, inputs)), targets)
        if not isinstance(loss, torch.Tensor) or loss.grad_fn is None:
            return []
        registered = {id(p) for p in model.parameters()}
        inputs_ids = {id(t) for t in _tensors(inputs)}
        stray = [
            leaf
            for leaf in _graph_leaves(loss)
            if leaf.requires_grad and id(leaf) not in registered and id(leaf) not in inputs_ids
        ]
    if not stray:
        return []
    where = [_owner(model, leaf) for leaf in stray]
    named = [w for w in where if w is not None]
    built = len(where) - len(named)
    count = sum(leaf.numel() for leaf in stray)
    what = ", ".join(named[:5]) + (" ..." if len(named) > 5 else "")
    parts = []
    if named:
        parts.append(f"kept in plain Python containers ({what})")
    if built:
        parts.append(f"{built} created during forward (new random values every call)")
    return [
        Finding(
            "params_not_registered",
            "critical",
            f"the forward trains through {len(stray)} tensor(s) ({count:,} values) that are "
            f"not parameters of the model: {'; '.join(parts)}. model.parameters(), the "
            "optimizer and state_dict() never see them, so they never train.",
            remedy="hold sub-layers in nn.ModuleList / nn.ModuleDict / nn.Sequential (not a "
            "list, dict or tuple) and create every layer in __init__, not in forward.",
            fields={"params": named, "built_in_forward": built, "values": count},
        )
    ]


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    return []
