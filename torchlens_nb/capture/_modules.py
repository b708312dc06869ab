"""Module context of a capture: which module each op ran in, module calls, own-hook phases.

While a capture runs, ``nn.Module._call_impl`` is wrapped (``_scope``): every module call of a
thread that has a capture is handed to that capture's :class:`ModuleTracker` before the module's
own forward pre-hooks run (``enter``) and after its own forward hooks ran, also when it raised
(``exit``). For a module that has its own hooks when the capture starts, the tracker adds a
marker after its own pre-hooks (they are done: the ``forward_pre_hook`` phase ends) and one
before its own forward hooks (the ``forward_hook`` phase starts), removed when the capture ends,
so ops run in a module's own hooks belong to the module and carry ``Op.hook_kind``. A
TorchScript module (``_blind_spots.is_opaque``) is recorded as one op.

A module outside the model (not among ``model.named_modules()``) that holds parameters or
buffers gets the address ``?Type``: an unregistered layer, which the optimizer never sees, is
something to show. One that holds nothing is transparent, its ops belong to the model module
that called it: transformers (5.x, with the ``kernels`` package it depends on) turns
``apply_rotary_pos_emb`` and friends into process-wide stateless ``Func`` modules, and an
activation built inside ``forward`` is one too. A TorchScript module stays an opaque op wherever
it lives.

Why a wrapper, not global module hooks (``register_module_forward_pre_hook``, as before): any
global hook sends every module call through ``_call_impl``'s slow path, and registering and
removing the pair cost every capture its handles. Measured on the 801-op chain of
``benchmarks/bench_capture.py`` (CPU time, median of per-round ratios, one process): module
tracking cost 0.6x of the plain forward with the global hooks.
"""

from __future__ import annotations

import sys
import time
from threading import get_ident
from typing import Any

import torch
from torch import nn

from .._hooks import remove_hook
from ..options import Site
from ._blind_spots import describe, is_opaque
from ._op import HookKind
from ._recorder import Recorder
from ._recording import RawCall
from ._selectors import canonical_address
from ._tensors import arg_tensors, tensors_in

_SKIP = None
"""Address of a ``torch.compile`` wrapper (``OptimizedModule``): its ``_orig_mod`` stands for it."""


class ModelNames:
    """Addresses of a model's modules and names of its parameters and buffers, by ``id``.

    One walk of the module tree (``named_parameters`` and ``named_buffers`` walk it again each:
    0.54 ms -> 0.18 ms per capture on the 200-block chain of ``tests/capture/golden_models``),
    in ``named_modules()`` order (``_tree``: the recursive generator of ``named_modules()`` was
    most of the cost for a small model).
    A tensor shared by two modules keeps its first name, as ``named_parameters()`` does. Names
    are spelled by ``canonical_address`` (no ``_orig_mod`` segments).
    """

    def __init__(self, model: nn.Module) -> None:
        self.modules: dict[int, str | None] = {}
        self.params: dict[int, str] = {}
        self.opaque: dict[int, str] = {}
        """``id`` -> type name of the TorchScript modules (recorded as one op each)."""
        self.compiled: list[str] = []
        """Addresses of the ``torch.compile`` wrappers inside the model."""
        self.hooked: list[nn.Module] = []
        """The modules with own forward (pre-)hooks (the tracker marks where theirs end)."""
        modules, params = self.modules, self.params
        for address, module in _tree(model):
            key = id(module)
            if module._forward_pre_hooks or module._forward_hooks:
                self.hooked.append(module)
            spelled = canonical_address(address)
            if _is_compile_wrapper(module):
                modules[key] = _SKIP
                self.compiled.append(spelled)
                continue
            modules[key] = spelled
            if is_opaque(module):
                self.opaque[key] = describe(module)
            prefix = f"{spelled}." if spelled else ""
            for table in (module._parameters, module._buffers):
                for name, tensor in table.items():
                    if tensor is not None and id(tensor) not in params:
                        params[id(tensor)] = prefix + name


_NAMED_MODULES = nn.Module.named_modules


def _tree(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """``list(model.named_modules())``, walked as a loop over ``_modules`` unless a module's
    class overrides ``named_modules`` (then that override is followed, from the root)."""
    found: list[tuple[str, nn.Module]] = []
    seen: set[int] = set()
    pending: list[tuple[str, nn.Module]] = [("", model)]
    while pending:
        address, module = pending.pop()
        if id(module) in seen:  # reached twice: named_modules() lists it once
            continue
        if type(module).named_modules is not _NAMED_MODULES:
            return list(model.named_modules())
        seen.add(id(module))
        found.append((address, module))
        children = module._modules
        if children:
            prefix = f"{address}." if address else ""
            for name, child in reversed(list(children.items())):
                if child is not None:
                    pending.append((prefix + name, child))
    return found


def _is_compile_wrapper(module: nn.Module) -> bool:
    # by name: importing torch._dynamo to test isinstance costs seconds on a first capture
    return type(module).__name__ == "OptimizedModule" and isinstance(
        module.__dict__.get("_modules", {}).get("_orig_mod"), nn.Module
    )


_OpenCall = tuple[int, str, int, tuple[str, ...], "HookKind | None"]
"""An open module call: ``(id(module), address, first op index, module stack before it,
hook kind before it)``; a plain tuple, built once per module call."""

_UNKNOWN: Any = object()
"""Address lookup default: a module outside the model."""


class ModuleTracker:
    """Keeps the recorder's module stack, the closed module calls and the opaque-module ops."""

    def __init__(self, recorder: Recorder, names: ModelNames) -> None:
        self.rec = recorder
        self.names = names
        self.calls: list[RawCall] = recorder.recording.calls
        self.opaque_types: dict[str, str] = {}
        """Address -> type name of the opaque modules that ran (for their blind spots)."""
        self._open: list[_OpenCall] = []
        self._pre_marked: set[int] = set()
        self._opaque_open: dict[int, tuple[list[torch.Tensor], int]] = {}
        """Depth of an open opaque call -> its tensor inputs and start time."""
        self._special = set(names.opaque)
        """Ids that need more than a push on entry (marked pre-hooks, opaque modules)."""
        self._marked: list[nn.Module] = []
        # bound once: the hook registries are searched for these very objects on removal
        self._pre_marker = self._pre_hooks_done
        self._post_marker = self._forward_done

    def install_hooks(self) -> None:
        """Register a marker after the own forward pre-hooks and one before the own forward hooks
        of every module that had some when the capture started (``ModelNames.hooked``).

        ``remove_hooks`` undoes it from any point (registered before this runs, see
        ``_undo``): it looks the hooks up by identity, so a hook whose handle an interrupt
        lost is found too.
        """
        for module in self.names.hooked:
            self._marked.append(module)  # first: remove_hooks looks in every marked module
            if module._forward_pre_hooks:
                self._pre_marked.add(id(module))
                self._special.add(id(module))
                module.register_forward_pre_hook(self._pre_marker)
            if module._forward_hooks:
                module.register_forward_hook(self._post_marker, prepend=True, always_call=True)

    def remove_hooks(self) -> None:
        """Remove what ``install_hooks`` registered, however far it got (idempotent)."""
        for module in self._marked:
            remove_hook(module._forward_pre_hooks, self._pre_marker)
            remove_hook(
                module._forward_hooks,
                self._post_marker,
                module._forward_hooks_always_called,
                module._forward_hooks_with_kwargs,
            )

    # ----- module calls ---------------------------------------------------------------------
    def enter(self, module: nn.Module, args: tuple[Any, ...]) -> None:
        """A module call of this capture's thread starts (before its own pre-hooks): push it."""
        rec = self.rec
        if rec.paused:
            return
        key = id(module)
        address = self.names.modules.get(key, _UNKNOWN)
        if address is _SKIP:  # a torch.compile wrapper: its _orig_mod stands for it
            return
        if address is _UNKNOWN:
            opaque = is_opaque(module)
            if not (module._parameters or module._buffers or module._modules or opaque):
                return  # stateless, outside the model: transparent (see the module docstring)
            address = f"?{type(module).__name__}"
            if opaque:
                self.names.opaque[key] = describe(module)
                self._special.add(key)
        self._open.append((key, address, len(rec.rows), rec.stack, rec.hook_kind))
        if address:  # the root module has address "" and is not part of the stack
            rec.stack = (*rec.stack, address)
            rec.module = address
        if key in self._special:
            self._enter_special(key, address, args)

    def _enter_special(self, key: int, address: str, args: tuple[Any, ...]) -> None:
        rec = self.rec
        if key in self._pre_marked:
            rec.hook_kind = "forward_pre_hook"
        if key in self.names.opaque:
            self.opaque_types[address] = self.names.opaque[key]
            self._opaque_open[len(self._open)] = (arg_tensors(args, None), time.perf_counter_ns())
            rec.suspended += 1

    def exit(self, module: nn.Module, output: Any) -> None:
        """The module call ended (after its own forward hooks, also when it raised): close it."""
        open_calls = self._open
        if open_calls and open_calls[-1][0] == id(module) and not self.rec.paused:
            self._close(open_calls[-1], module, output)

    def _pre_hooks_done(self, module: nn.Module, args: Any) -> None:
        call = self._top(module)
        if call is not None:
            self.rec.hook_kind = call[4]

    def _forward_done(self, module: nn.Module, args: Any, output: Any) -> None:
        if self._top(module) is not None:
            self.rec.hook_kind = "forward_hook"

    def _top(self, module: nn.Module) -> _OpenCall | None:
        open_calls = self._open
        if not open_calls or open_calls[-1][0] != id(module):
            return None
        rec = self.rec
        if rec.paused or get_ident() != rec.thread:  # a marker hook runs in any thread
            return None
        return open_calls[-1]

    def _close(self, call: _OpenCall, module: nn.Module, output: Any) -> None:
        rec = self.rec
        _, address, first_op, prev_stack, prev_hook_kind = call
        opaque = self._opaque_open.pop(len(self._open), None) if self._opaque_open else None
        self._open.pop()
        outputs = [output] if isinstance(output, torch.Tensor) else tensors_in(output)
        if opaque is not None:  # an opaque module: its call is one op
            rec.suspended -= 1
            inputs, start_ns = opaque
            owned = [*module.parameters(), *module.buffers()]
            rec.record_unseen(
                "opaque_module", address, "jit_module", inputs + owned, outputs,
                time.perf_counter_ns() - start_ns, sys._getframe(1),
            )  # fmt: skip
        rec.stack = prev_stack
        rec.module = prev_stack[-1] if prev_stack else ""
        rec.hook_kind = prev_hook_kind
        if len(outputs) == 1:
            entry = rec.producer.get(id(outputs[0]))
            is_ours = entry is not None and entry[0]() is outputs[0]
            indices: tuple[int, ...] = (entry[1],) if is_ours else ()  # type: ignore[index]
        else:
            indices = tuple(i for i in map(rec.producer_of, outputs) if i is not None)
        self.calls.append((address, type(module), first_op, len(rec.rows), indices))
        if rec.module_hooks and indices:
            self._run_module_hooks(address, indices[0], outputs[0])

    def _run_module_hooks(self, address: str, index: int, value: torch.Tensor) -> None:
        rec = self.rec
        for selector, callback in rec.module_hooks:
            if selector.matches_module(address):
                op = rec.recording.op(index)
                rec.run_hook(callback, Site(op.label, op.func, address, "module", selector), value)
