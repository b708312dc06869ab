"""The process-wide state a test must leave as it found it, read before and after each test.

``tests/conftest.py`` takes a :class:`ProcessState` before every test and compares it after
the test's own fixtures are torn down: what differs fails that test (its teardown, naming what
leaked) and is put back, so a leak is one red test instead of every later test that needs
autograd (a grad mode left off once failed 193 tests of a fresh-clone run).

The flags are ``tests/faults/_guards.global_flags`` (grad, inference and anomaly mode,
deterministic algorithms, cuDNN switches, default dtype, threads, the torch-function and
dispatch mode stacks) less the warning filters, which pytest restores around each test itself;
then the global module and optimizer hooks, the collector's switch and freeze count, the
``SIGINT`` handler, the kit's Ctrl-C scope, the attached-session registry, and the capture's
process state (running captures, ``nn.Module._call_impl``, ``torch.vmap``'s entry point).
Reading all of it costs about 30 us (no tensor is read; nothing is copied but small dicts).
"""

from __future__ import annotations

import gc
import signal
import sys
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.modules.module as module_globals
import torch.optim.optimizer as optimizer_globals
from torch import nn
from torch.utils._python_dispatch import _pop_mode

from tests.faults._guards import GLOBAL_MODULE_HOOK_DICTS, global_flags
from torchlens_nb import _interrupts
from torchlens_nb.capture import _scope
from torchlens_nb.checks.session._optimizer import ATTACHED

_OPTIMIZER_HOOK_DICTS = ("_global_optimizer_pre_hooks", "_global_optimizer_post_hooks")


def _hook_dicts() -> dict[str, dict[Any, Any]]:
    return {
        **{name: getattr(module_globals, name) for name in GLOBAL_MODULE_HOOK_DICTS},
        **{name: getattr(optimizer_globals, name) for name in _OPTIMIZER_HOOK_DICTS},
    }


def _vmap_entry() -> Any:
    apis = sys.modules.get("torch._functorch.apis")
    return getattr(apis, "vmap_impl", None)


@dataclass
class ProcessState:
    """One reading of everything :func:`leaks` compares."""

    flags: dict[str, Any]
    hooks: dict[str, dict[Any, Any]]
    gc_enabled: bool
    gc_frozen: int
    sigint: Any
    sigint_scope: tuple[int, Any, bool]
    attached: frozenset[int]
    captures: int
    call_impl: Any
    vmap_entry: Any

    @classmethod
    def read(cls) -> ProcessState:
        flags = global_flags()
        del flags["warning_filters"]
        scope = _interrupts._state
        return cls(
            flags=flags,
            hooks={name: dict(hooks) for name, hooks in _hook_dicts().items()},
            gc_enabled=gc.isenabled(),
            gc_frozen=gc.get_freeze_count(),
            sigint=signal.getsignal(signal.SIGINT),
            sigint_scope=(scope.held, scope.previous, scope.pending),
            attached=frozenset(id(optimizer) for optimizer in ATTACHED._owners),
            captures=_scope.running_captures(),
            call_impl=nn.Module._call_impl,
            vmap_entry=_vmap_entry(),
        )


def leaks(before: ProcessState, after: ProcessState) -> list[str]:
    """What differs, one line each (``flag grad_enabled: True -> False``)."""
    found = [
        f"flag {key}: {value!r} -> {after.flags[key]!r}"
        for key, value in before.flags.items()
        if after.flags[key] != value
    ]
    found += [
        f"{name}: {len(hooks)} -> {len(after.hooks[name])} entries"
        for name, hooks in before.hooks.items()
        if after.hooks[name].keys() != hooks.keys()
    ]
    pairs = {
        "gc enabled": (before.gc_enabled, after.gc_enabled),
        "gc freeze count": (before.gc_frozen, after.gc_frozen),
        "SIGINT handler": (before.sigint, after.sigint),
        "Ctrl-C scope (held, previous, pending)": (before.sigint_scope, after.sigint_scope),
        "running captures": (before.captures, after.captures),
        "nn.Module._call_impl": (before.call_impl, after.call_impl),
        "torch.vmap entry point": (before.vmap_entry, after.vmap_entry),
    }
    found += [
        f"{name}: {old!r:.80} -> {new!r:.80}" for name, (old, new) in pairs.items() if old != new
    ]
    added = after.attached - before.attached
    if added:
        found.append(f"attached sessions: {len(added)} optimizer(s) still claimed")
    return found


def restore(before: ProcessState, after: ProcessState) -> None:
    """Put back what :func:`leaks` found changed, as far as it can be put back from outside
    (inference mode entered and never left cannot: it stays reported)."""
    flags = before.flags
    torch.set_grad_enabled(flags["grad_enabled"])
    torch.set_anomaly_enabled(flags["anomaly"], flags["anomaly_check_nan"])
    torch.use_deterministic_algorithms(
        flags["deterministic"], warn_only=flags["deterministic_warn_only"]
    )
    torch.backends.cudnn.deterministic = flags["cudnn_deterministic"]
    torch.backends.cudnn.benchmark = flags["cudnn_benchmark"]
    torch.set_default_dtype(flags["default_dtype"])
    if torch.get_num_threads() != flags["num_threads"]:
        torch.set_num_threads(flags["num_threads"])
    while torch._C._len_torch_function_stack() > flags["function_modes"]:
        torch._C._pop_torch_function_stack()
    while torch._C._len_torch_dispatch_stack() > flags["dispatch_modes"]:
        _pop_mode()
    for name, hooks in _hook_dicts().items():
        if hooks.keys() != before.hooks[name].keys():
            hooks.clear()
            hooks.update(before.hooks[name])
    if gc.isenabled() != before.gc_enabled:
        (gc.enable if before.gc_enabled else gc.disable)()
    if gc.get_freeze_count() and not before.gc_frozen:
        gc.unfreeze()
    signal.signal(signal.SIGINT, before.sigint)
    scope = _interrupts._state
    scope.held, scope.previous, scope.pending = before.sigint_scope
    for optimizer in list(ATTACHED._owners):
        if id(optimizer) not in before.attached:
            del ATTACHED._owners[optimizer]
    if after.captures != before.captures or after.call_impl is not before.call_impl:
        _scope._state.holders.clear()
        _scope._unwrap_call_impl()
        nn.Module._call_impl = before.call_impl  # type: ignore[method-assign]
    apis = sys.modules.get("torch._functorch.apis")
    if apis is not None and before.vmap_entry is not None:
        apis.vmap_impl = before.vmap_entry  # type: ignore[attr-defined]
