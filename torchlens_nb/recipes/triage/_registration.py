"""Parameters a forward uses that the model does not register.

Layers kept in a plain Python list, dict or tuple, or built inside ``forward``, hold weights
that ``model.parameters()`` (and so every optimizer built from it, ``state_dict`` and
``.to(device)``) never sees: they never train, and a layer built in ``forward`` is redrawn at
random every call. One forward and loss on the working copy; the loss's autograd graph names
every leaf tensor that requires grad (each ``AccumulateGrad`` node holds its ``variable``);
those that are not parameters of the model are unregistered.

:func:`register_strays` then registers, on triage's working copy only, the plain containers
that hold them (a list or tuple becomes an ``nn.ModuleList``, a dict of str keys an
``nn.ModuleDict``: what the fix does), so that the checks after ``training_setup`` judge the
gradient and the step size of every layer the forward trains through. Measured on the
development half: a plain list of 5 sigmoid layers showed gradient_flow only the 4 registered
parameters ("no parameter flagged") and the step-size probe trained only those at SGD lr 4
("2.28 -> 0.0322"), so neither the vanishing gradient nor the lr was named; with the list
registered on the copy both are judged on the layers that carry them. Layers built inside
``forward`` cannot be registered (they are new every call) and stay unjudged.
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


def _containers(model: nn.Module, leaves: list[torch.Tensor]) -> list[tuple[nn.Module, str]]:
    """``(module, attribute)`` of every plain list, tuple or dict attribute that holds a module
    owning one of ``leaves`` (searched as :func:`_owner` does)."""
    found = []
    for _, module in model.named_modules():
        for attr, value in list(vars(module).items()):
            if attr.startswith("_") or not isinstance(value, (list, tuple, dict)):
                continue
            if any(_search(value, leaf, attr, 0) is not None for leaf in leaves):
                found.append((module, attr))
    return found


def _as_module_container(value: Any) -> nn.Module | None:
    """The registered container the fix would use, or None when ``value`` is not a flat
    container of modules (a dict with non-str keys, a list mixing modules and other values)."""
    items = list(value.values()) if isinstance(value, dict) else list(value)
    if not items or not all(isinstance(item, nn.Module) for item in items):
        return None
    if isinstance(value, dict):
        if not all(isinstance(k, str) and "." not in k and k for k in value):
            return None
        return nn.ModuleDict(value)
    return nn.ModuleList(items)


def register_strays(model: nn.Module, batch: Any, loss_fn: Any) -> tuple[str, ...]:
    """Register, on ``model`` (triage's working copy, never the caller's), every plain
    container whose modules hold tensors the forward trains through; returns the attribute
    paths registered (empty when none could be). A forward that then fails puts the
    containers back and registers nothing."""
    strays = _stray_leaves(model, batch, loss_fn)
    if not strays:
        return ()
    names = {id(m): n for n, m in model.named_modules()}
    done: list[tuple[nn.Module, str, Any]] = []
    for module, attr in _containers(model, strays):
        container = _as_module_container(vars(module)[attr])
        if container is None:
            continue
        plain = vars(module).pop(attr)
        setattr(module, attr, container)
        done.append((module, attr, plain))
    if done and _stray_leaves(model, batch, loss_fn) is None:
        for module, attr, plain in done:  # the forward broke: leave the copy as it was
            delattr(module, attr)
            vars(module)[attr] = plain
        return ()
    return tuple(
        f"{names[id(module)] + '.' if names.get(id(module)) else ''}{attr}"
        for module, attr, _ in done
    )


def _stray_leaves(model: nn.Module, batch: Any, loss_fn: Any) -> list[torch.Tensor] | None:
    """Leaf tensors that require grad in the loss's graph and are neither parameters of
    ``model`` nor inputs (one forward and loss in train mode; modes and buffers restored);
    None when the forward or loss raises."""
    inputs, targets = split_batch(batch)
    with preserved(model, mode="train"):
        try:
            loss = loss_fn(loss_input(call_model(model, inputs)), targets)
        except Exception:  # the caller decides what a failed forward means
            return None
        if not isinstance(loss, torch.Tensor) or loss.grad_fn is None:
            return []
        registered = {id(p) for p in model.parameters()}
        inputs_ids = {id(t) for t in _tensors(inputs)}
        return [
            leaf
            for leaf in _graph_leaves(loss)
            if leaf.requires_grad and id(leaf) not in registered and id(leaf) not in inputs_ids
        ]


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
    """A critical finding naming the tensors the forward trains through that ``model`` does
    not register, after which those kept in plain containers are registered on ``model``
    (:func:`register_strays`; ``model`` is triage's working copy, never the caller's), and
    the finding says so: the later checks judge every layer the forward trains through."""
    stray = _stray_leaves(model, batch, loss_fn)
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
    registered = register_strays(model, batch, loss_fn)
    judged = (
        f" The later checks ran on triage's copy with {', '.join(registered)} registered, as "
        "the fix will have it, so that their gradients and step size are judged too."
        if registered
        else ""
    )
    return [
        Finding(
            "params_not_registered",
            "critical",
            f"the forward trains through {len(stray)} tensor(s) ({count:,} values) that are "
            f"not parameters of the model: {'; '.join(parts)}. model.parameters(), the "
            f"optimizer and state_dict() never see them, so they never train.{judged}",
            remedy="hold sub-layers in nn.ModuleList / nn.ModuleDict / nn.Sequential (not a "
            "list, dict or tuple) and create every layer in __init__, not in forward.",
            fields={
                "params": named,
                "built_in_forward": built,
                "values": count,
                "registered_on_copy": list(registered),
            },
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
