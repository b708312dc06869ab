"""Module context of a capture: which module each op ran in, module calls, own-hook phases.

Two global module hooks, registered per capture (``_scope``), hand every module call to the
capture's :class:`ModuleTracker`, which ignores calls from other threads. PyTorch runs global
forward hooks before a module's own (``register_forward_hook``) hooks, so the global post-hook
alone would pop the module before its own hooks run and their ops would land on the parent. For a module that has its own hooks when
the capture starts, the tracker appends a marker hook after them (removed when the capture ends):
the pre-hook marker ends the ``forward_pre_hook`` phase, the post-hook marker closes the call
once the module's own forward hooks have run, so their ops belong to the module and carry
``Op.hook_kind``. A TorchScript module (``_blind_spots.is_opaque``) is recorded as one op.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator
from threading import get_ident
from typing import Any, NamedTuple

import torch
from torch import nn

from ..options import Site
from ._blind_spots import describe, is_opaque
from ._recorder import Recorder
from ._selectors import canonical_address
from ._tensors import arg_tensors, tensors_in

_SKIP = None
"""Address of a ``torch.compile`` wrapper (``OptimizedModule``): its ``_orig_mod`` stands for it."""


class ModuleCall(NamedTuple):
    """One call of a module during the forward."""

    address: str
    """Module address (``""`` for the root; ``?Type`` for a module outside the model)."""
    type_name: str
    first_op: int
    """Index of the first op recorded inside the call."""
    last_op: int
    """One past the index of the last op recorded inside the call (its own hooks included)."""
    output_labels: tuple[str, ...]
    """Labels of the ops that produced the call's tensor outputs."""


class ModelNames:
    """Addresses of a model's modules and names of its parameters and buffers, by ``id``.

    One ``named_modules()`` walk (``named_parameters`` and ``named_buffers`` walk it again each:
    0.54 ms -> 0.18 ms per capture on the 200-block chain of ``tests/capture/golden_models``).
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
        for address, module in model.named_modules():
            spelled = canonical_address(address)
            if _is_compile_wrapper(module):
                self.modules[id(module)] = _SKIP
                self.compiled.append(spelled)
                continue
            self.modules[id(module)] = spelled
            if is_opaque(module):
                self.opaque[id(module)] = describe(module)
            prefix = f"{spelled}." if spelled else ""
            for table in (module._parameters, module._buffers):
                for name, tensor in table.items():
                    if tensor is not None and id(tensor) not in self.params:
                        self.params[id(tensor)] = prefix + name


def _is_compile_wrapper(module: nn.Module) -> bool:
    # by name: importing torch._dynamo to test isinstance costs seconds on a first capture
    return type(module).__name__ == "OptimizedModule" and isinstance(
        module.__dict__.get("_modules", {}).get("_orig_mod"), nn.Module
    )


class _OpenCall:
    __slots__ = (
        "address",
        "first_op",
        "inputs",
        "is_awaiting_marker",
        "module_id",
        "prev_hook_kind",
        "prev_stack",
        "start_ns",
        "type_name",
    )

    def __init__(self, module_id: int, address: str, type_name: str, rec: Recorder) -> None:
        self.module_id = module_id
        self.address = address
        self.type_name = type_name
        self.first_op = len(rec.ops)
        self.prev_stack = rec.stack
        self.prev_hook_kind = rec.hook_kind
        self.is_awaiting_marker = False
        self.inputs: list[torch.Tensor] | None = None
        self.start_ns = 0


class ModuleTracker:
    """Keeps the recorder's module stack, the closed module calls and the opaque-module ops."""

    def __init__(self, recorder: Recorder, names: ModelNames) -> None:
        self.rec = recorder
        self.names = names
        self.calls: list[ModuleCall] = []
        self.opaque_types: dict[str, str] = {}
        """Address -> type name of the opaque modules that ran (for their blind spots)."""
        self._open: list[_OpenCall] = []
        self._pre_marked: set[int] = set()
        self._post_marked: set[int] = set()

    @contextlib.contextmanager
    def own_hook_markers(self, model: nn.Module) -> Iterator[None]:
        """Append a marker after the own forward (pre-)hooks of every module that has some."""
        with contextlib.ExitStack() as handles:
            for module in model.modules():
                if module._forward_pre_hooks:
                    handles.enter_context(module.register_forward_pre_hook(self._pre_hooks_done))
                    self._pre_marked.add(id(module))
                if module._forward_hooks:
                    handles.enter_context(
                        module.register_forward_hook(self._hooks_done, always_call=True)
                    )
                    self._post_marked.add(id(module))
            yield

    # ----- module hooks ---------------------------------------------------------------------
    def enter(self, module: nn.Module, args: tuple[Any, ...]) -> None:
        """Global forward pre-hook: push the module (calls from other threads are ignored)."""
        rec = self.rec
        if rec.paused or get_ident() != rec.thread:
            return
        known = self.names.modules
        if id(module) in known:
            address = known[id(module)]
            if address is _SKIP:
                return
        else:
            address = f"?{type(module).__name__}"
        call = _OpenCall(id(module), address, type(module).__name__, rec)
        self._open.append(call)
        if address:  # the root module has address "" and is not part of the stack
            rec.stack = (*rec.stack, address)
            rec.module = address
        if id(module) in self._pre_marked:
            rec.hook_kind = "forward_pre_hook"
        opaque_type = self.names.opaque.get(id(module))
        if opaque_type is not None or (address.startswith("?") and is_opaque(module)):
            self.opaque_types[address] = opaque_type or describe(module)
            call.inputs = arg_tensors(args, None)
            call.start_ns = time.perf_counter_ns()
            rec.suspended += 1

    def exit(self, module: nn.Module, args: Any, output: Any) -> None:
        """Global forward hook: close the call, or wait for the module's own hooks to run."""
        call = self._top(module)
        if call is None:
            return
        if id(module) in self._post_marked:
            call.is_awaiting_marker = True
            self.rec.hook_kind = "forward_hook"
            return
        self._close(call, module, output)

    def _pre_hooks_done(self, module: nn.Module, args: Any) -> None:
        call = self._top(module)
        if call is not None:
            self.rec.hook_kind = call.prev_hook_kind

    def _hooks_done(self, module: nn.Module, args: Any, output: Any) -> None:
        call = self._top(module)
        if call is not None and call.is_awaiting_marker:
            self._close(call, module, output)

    def _top(self, module: nn.Module) -> _OpenCall | None:
        rec = self.rec
        if rec.paused or not self._open or self._open[-1].module_id != id(module):
            return None
        if get_ident() != rec.thread:
            return None
        return self._open[-1]

    def _close(self, call: _OpenCall, module: nn.Module, output: Any) -> None:
        rec = self.rec
        self._open.pop()
        outputs = [output] if isinstance(output, torch.Tensor) else tensors_in(output)
        if call.inputs is not None:  # an opaque module: its call is one op
            rec.suspended -= 1
            owned = [*module.parameters(), *module.buffers()]
            duration = time.perf_counter_ns() - call.start_ns
            rec.record_unseen(
                "opaque_module", call.address, "jit_module", call.inputs + owned, outputs,
                duration, sys._getframe(1),
            )  # fmt: skip
        rec.stack = call.prev_stack
        rec.module = call.prev_stack[-1] if call.prev_stack else ""
        rec.hook_kind = call.prev_hook_kind
        if len(outputs) == 1:
            label = rec.producer_of(outputs[0])
            labels: tuple[str, ...] = () if label is None else (label,)
        else:
            labels = tuple(label for label in map(rec.producer_of, outputs) if label is not None)
        self.calls.append(
            ModuleCall(call.address, call.type_name, call.first_op, len(rec.ops), labels)
        )
        if rec.module_hooks and labels:
            self._run_module_hooks(call.address, labels[0], outputs[0])

    def _run_module_hooks(self, address: str, label: str, value: torch.Tensor) -> None:
        rec = self.rec
        for selector, callback in rec.module_hooks:
            if selector.matches_module(address):
                op = rec.by_label[label]
                rec.run_hook(callback, Site(op.label, op.func, address, "module", selector), value)
