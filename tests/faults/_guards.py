"""What a fault must never do: corrupt the user's objects, or leave a hook, mode or flag behind.

``untouched(models=..., optimizers=..., tensors=...)`` is the one guard the suite wraps around
every call it attacks: it saves bitwise copies of what the user owns before the call and, after
it (also when the call raised), asserts that

* every parameter, buffer and ``.grad`` of the models, every optimizer's state and param groups,
  every given input tensor, and the python / numpy / torch CPU RNG streams are bitwise equal;
* every module's ``training`` flag is what it was;
* no hook was left: global module hooks (``torch.nn.modules.module._global_*``), per-module
  hooks, tensor hooks (``_backward_hooks``, ``_post_accumulate_grad_hooks``) on parameters and
  inputs, hooks on the autograd nodes above the given tensors, optimizer hooks (per optimizer and
  the global ones in ``torch.optim.optimizer``);
* no torch function / dispatch mode is left on the stack and no global flag changed (grad mode,
  inference mode, anomaly mode, deterministic algorithms, default dtype, threads, warning
  filters).

"Bitwise" compares the raw bytes, so NaN payloads, -0.0 and subnormals count.
"""

from __future__ import annotations

import contextlib
import os
import random
import traceback
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.modules.module as module_globals
import torch.optim.optimizer as optimizer_globals
from torch import nn
from torch.overrides import _get_current_function_mode_stack
from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

from torchlens_nb.errors import TorchlensNbError

MODULE_HOOK_DICTS = (
    "_forward_hooks",
    "_forward_hooks_with_kwargs",
    "_forward_hooks_always_called",
    "_forward_pre_hooks",
    "_forward_pre_hooks_with_kwargs",
    "_backward_hooks",
    "_backward_pre_hooks",
    "_state_dict_hooks",
    "_state_dict_pre_hooks",
    "_load_state_dict_pre_hooks",
    "_load_state_dict_post_hooks",
)
"""Per-module hook registries (``nn.Module.__init__`` creates each as a dict)."""

GLOBAL_MODULE_HOOK_DICTS = tuple(
    sorted(
        name
        for name in vars(module_globals)
        if name.startswith("_global_") and isinstance(getattr(module_globals, name), dict)
    )
)
"""``_global_forward_hooks``, ``_global_backward_hooks``, ... of ``torch.nn.modules.module``."""

OPTIMIZER_HOOK_DICTS = (
    "_optimizer_step_pre_hooks",
    "_optimizer_step_post_hooks",
    "_optimizer_state_dict_pre_hooks",
    "_optimizer_state_dict_post_hooks",
    "_optimizer_load_state_dict_pre_hooks",
    "_optimizer_load_state_dict_post_hooks",
)


def bits(tensor: torch.Tensor) -> Any:
    """A copy of ``tensor`` that compares by raw bytes (None for meta tensors: no data)."""
    tensor = tensor.detach()
    if tensor.device.type == "meta":
        return ("meta", tuple(tensor.shape), tensor.dtype)
    if tensor.is_sparse:
        tensor = tensor.coalesce()
        return ("sparse", bits(tensor.indices()), bits(tensor.values()))
    if tensor.is_quantized:
        return ("quantized", bits(tensor.int_repr()), tensor.q_scale(), tensor.q_zero_point())
    flat = tensor.cpu().contiguous().reshape(-1)
    raw = flat.view(torch.uint8) if flat.dtype != torch.bool else flat.to(torch.uint8)
    return (tuple(tensor.shape), tensor.dtype, bytes(raw.numpy().tobytes()))


def _value(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return bits(value)
    if isinstance(value, dict):
        return {k: _value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_value(v) for v in value)
    return value


def model_state(model: nn.Module, *, grads: bool = True) -> dict[str, Any]:
    """Parameters, buffers, gradients (unless ``grads=False``), requires_grad and train/eval
    flags, bitwise."""
    state: dict[str, Any] = {}
    for name, param in model.named_parameters():
        state[f"param {name}"] = (bits(param), param.requires_grad)
        if grads:
            state[f"grad {name}"] = None if param.grad is None else bits(param.grad)
    for name, buffer in model.named_buffers():
        state[f"buffer {name}"] = bits(buffer)
    for name, sub in model.named_modules():
        state[f"training {name or '<root>'}"] = sub.training
    return state


def optimizer_state(optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """State per parameter (Adam moments, step counters) and each group's hyper-parameters."""
    index = {
        id(p): i
        for i, p in enumerate(p for group in optimizer.param_groups for p in group["params"])
    }
    return {
        "state": {index.get(id(p), -1): _value(dict(s)) for p, s in optimizer.state.items()},
        "groups": [
            {k: (len(v) if k == "params" else _value(v)) for k, v in g.items()}
            for g in optimizer.param_groups
        ],
    }


def rng_state() -> dict[str, Any]:
    """The global python, numpy and torch CPU generator states."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    return {
        "python": random.getstate(),
        "numpy": (kind, keys.tobytes(), pos, has_gauss, cached),
        "torch": bits(torch.get_rng_state()),
    }


def global_flags() -> dict[str, Any]:
    """Process-wide torch switches a diagnostic might flip and forget."""
    return {
        "grad_enabled": torch.is_grad_enabled(),
        "inference_mode": torch.is_inference_mode_enabled(),
        "anomaly": torch.is_anomaly_enabled(),
        "anomaly_check_nan": torch.is_anomaly_check_nan_enabled(),
        "deterministic": torch.are_deterministic_algorithms_enabled(),
        "deterministic_warn_only": torch.is_deterministic_algorithms_warn_only_enabled(),
        "cudnn_deterministic": torch.backends.cudnn.deterministic,
        "cudnn_benchmark": torch.backends.cudnn.benchmark,
        "default_dtype": torch.get_default_dtype(),
        "num_threads": torch.get_num_threads(),
        "function_modes": len(_get_current_function_mode_stack()),
        "dispatch_modes": len(_get_current_dispatch_mode_stack()),
        "warning_filters": len(warnings.filters),
    }


def _node_hook_counts(node: Any) -> tuple[int, int]:
    """(hooks, pre-hooks) on an autograd node: C++ nodes do not list them, but the handle of a
    probe hook points at the node's own hook dict."""
    counts = []
    for register in (node.register_hook, node.register_prehook):
        handle = register(lambda *args: None)
        hooks = handle.hooks_dict_ref()
        counts.append(len(hooks) - 1 if hooks is not None else 0)
        handle.remove()
    return counts[0], counts[1]


def _graph_nodes(tensors: Iterable[torch.Tensor]) -> list[Any]:
    seen: set[int] = set()
    nodes: list[Any] = []
    pending = [t.grad_fn for t in tensors if t.grad_fn is not None]
    while pending:
        node = pending.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        nodes.append(node)
        pending.extend(child for child, _ in node.next_functions)
    return nodes


def hook_counts(
    models: Iterable[nn.Module] = (),
    optimizers: Iterable[Any] = (),
    tensors: Iterable[torch.Tensor] = (),
) -> dict[str, int]:
    """Every hook registry the guard watches -> its number of entries."""
    counts = {
        f"global {name}": len(getattr(module_globals, name)) for name in GLOBAL_MODULE_HOOK_DICTS
    }
    counts["global optimizer pre"] = len(optimizer_globals._global_optimizer_pre_hooks)
    counts["global optimizer post"] = len(optimizer_globals._global_optimizer_post_hooks)
    watched = [t for t in tensors if isinstance(t, torch.Tensor)]
    for m, model in enumerate(models):
        for name, sub in model.named_modules():
            for attr in MODULE_HOOK_DICTS:
                counts[f"model{m} {name or '<root>'} {attr}"] = len(getattr(sub, attr, {}) or {})
        watched.extend(model.parameters())
        watched.extend(model.buffers())
    for o, optimizer in enumerate(optimizers):
        for attr in OPTIMIZER_HOOK_DICTS:
            counts[f"optimizer{o} {attr}"] = len(getattr(optimizer, attr, {}) or {})
    for t, tensor in enumerate(watched):
        counts[f"tensor{t} _backward_hooks"] = len(tensor._backward_hooks or {})
        counts[f"tensor{t} _post_accumulate_grad_hooks"] = len(
            tensor._post_accumulate_grad_hooks or {}
        )
    for n, node in enumerate(_graph_nodes(watched)):
        hooks, prehooks = _node_hook_counts(node)
        counts[f"node{n} {type(node).__name__} hooks"] = hooks
        counts[f"node{n} {type(node).__name__} prehooks"] = prehooks
    return counts


@dataclass
class Snapshot:
    """Everything :func:`untouched` compares, taken at one moment."""

    models: list[dict[str, Any]]
    optimizers: list[dict[str, Any]]
    tensors: list[Any]
    rng: dict[str, Any]
    flags: dict[str, Any]
    hooks: dict[str, int]


def take_snapshot(
    models: Iterable[nn.Module],
    optimizers: Iterable[Any],
    tensors: Iterable[torch.Tensor],
    *,
    grads: bool = True,
) -> Snapshot:
    models, optimizers, tensors = list(models), list(optimizers), list(tensors)
    return Snapshot(
        models=[model_state(m, grads=grads) for m in models],
        optimizers=[optimizer_state(o) for o in optimizers],
        tensors=[
            (bits(t), t.requires_grad, None if not t.is_leaf or t.grad is None else bits(t.grad))
            for t in tensors
        ],
        rng=rng_state(),
        flags=global_flags(),
        hooks=hook_counts(models, optimizers, tensors),
    )


def differences(before: Snapshot, after: Snapshot) -> list[str]:
    """Human-readable list of what changed between two snapshots (empty when nothing did)."""
    changed: list[str] = []
    for m, (old, new) in enumerate(zip(before.models, after.models)):
        changed += [
            f"model{m} {key}" for key in sorted(set(old) | set(new)) if old.get(key) != new.get(key)
        ]
    for o, (old, new) in enumerate(zip(before.optimizers, after.optimizers)):
        if old != new:
            changed.append(f"optimizer{o} state or param groups")
    for t, (old, new) in enumerate(zip(before.tensors, after.tensors)):
        if old != new:
            changed.append(f"input tensor {t}")
    changed += [f"rng {key}" for key in before.rng if before.rng[key] != after.rng[key]]
    changed += [
        f"flag {key}: {before.flags[key]!r} -> {after.flags[key]!r}"
        for key in before.flags
        if before.flags[key] != after.flags[key]
    ]
    changed += [
        f"hooks {key}: {before.hooks.get(key, 0)} -> {after.hooks.get(key, 0)}"
        for key in sorted(set(before.hooks) | set(after.hooks))
        if before.hooks.get(key, 0) != after.hooks.get(key, 0)
    ]
    return changed


def tensors_in(value: Any) -> list[torch.Tensor]:
    """The tensors inside nested tuples, lists and dicts (the inputs a call was given)."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        return [t for v in value.values() for t in tensors_in(v)]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in tensors_in(v)]
    return []


@contextlib.contextmanager
def untouched(
    models: Iterable[nn.Module] = (),
    optimizers: Iterable[Any] = (),
    inputs: Any = (),
    *,
    grads: bool = True,
) -> Iterator[Snapshot]:
    """Assert that the block leaves the given objects and all global state as they were.

    Checked also when the block raises (the exception then propagates after the check, so
    ``pytest.raises`` outside this guard still sees it). ``grads=False`` leaves ``.grad`` out,
    for blocks where the caller's own loop runs ``backward`` (a ``with ChecksSession`` block).
    """
    models, optimizers, tensors = list(models), list(optimizers), tensors_in(inputs)
    before = take_snapshot(models, optimizers, tensors, grads=grads)
    try:
        yield before
    finally:
        changed = differences(before, take_snapshot(models, optimizers, tensors, grads=grads))
        assert not changed, "the call changed what it must not:\n  " + "\n  ".join(changed)


def builtin_base(error: type[BaseException]) -> type[BaseException] | None:
    """The built-in exception ``error`` also subclasses (ValueError, TypeError, ...), if any."""
    return next(
        (
            base
            for base in error.__mro__[1:]
            if base.__module__ == "builtins" and base not in (Exception, BaseException, object)
        ),
        None,
    )


def assert_refused(
    call: Callable[[], Any],
    error: type[Exception],
    match: str,
    *,
    models: Iterable[nn.Module] = (),
    optimizers: Iterable[Any] = (),
    inputs: Any = (),
) -> Exception:
    """``call()`` raises ``error`` (message matching ``match``), raised by torchlens_nb itself
    (not from deep inside torch), and leaves everything :func:`untouched`.

    Returns the exception for further assertions.
    """
    assert issubclass(error, TorchlensNbError), f"{error} is not a torchlens_nb error"
    assert builtin_base(error) is not None, f"{error} subclasses no built-in a caller catches"
    with pytest.raises(error, match=match) as info:
        with untouched(models, optimizers, inputs):
            call()
    raiser = traceback.extract_tb(info.value.__traceback__)[-1].filename
    assert f"{os.sep}torchlens_nb{os.sep}" in raiser, (
        f"{type(info.value).__name__} came from {raiser}, not from torchlens_nb's own checks"
    )
    return info.value
