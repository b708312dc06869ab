"""The recording machinery: a private ``TorchFunctionMode`` plus global module hooks.

Design (measured in ``benchmarks/bench_capture.py``): one torch-function mode sees every torch
function, ``nn.functional`` call, tensor method and operator at the Python boundary, so nested
internals (``F.layer_norm`` calling ``torch.layer_norm``) are recorded once, at the outermost
call. Module context comes from two process-global module hooks (one handle each, instead of one
per module); the post-hook is registered with ``always_call=True`` so the module stack unwinds
when a forward raises. Producer lookup is by tensor identity in a ``WeakIdKeyDictionary``, so a
``save=False`` capture keeps no activation alive.

Saved outputs are detached references, not copies; an in-place op on a tensor whose storage backs
a saved value first replaces that saved value by a clone (copy on write), so saving every op costs
memory only for what the forward would have freed.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils.weak import WeakIdKeyDictionary

from ..options import CaptureOptions, Site
from ._op import Op
from ._selectors import AnySelector, Selector
from ._source import SourceLocator

_SKIPPED_FUNCS = frozenset(
    {
        "requires_grad_",
        "retain_grad",
        "register_hook",
        "register_post_accumulate_grad_hook",
        "data_ptr",
        "untyped_storage",
        "storage",
        "grad",
        "_base",
        "is_leaf",
        "grad_fn",
        "set_",
        "share_memory_",
        "record_stream",
        "backward",
        "__reduce_ex__",
        "__deepcopy__",
    }
)
"""Calls that yield a tensor but are bookkeeping, not computation."""

_name_cache: dict[Any, str] = {}


def func_name(func: Any) -> str:
    """Normalised op name: ``__add__`` -> ``add``, ``__iadd__`` -> ``add_``, ``T.__get__`` -> ``T``."""
    name = _name_cache.get(func)
    if name is not None:
        return name
    raw = getattr(func, "__name__", None) or type(func).__name__
    if raw == "__get__":
        raw = getattr(getattr(func, "__self__", None), "__name__", "attr")
    if raw.startswith("__") and raw.endswith("__") and len(raw) > 4:
        raw = raw[2:-2]
        if raw.startswith("i") and raw[1:] in _INPLACE_DUNDERS:
            raw = raw[1:] + "_"
    _name_cache[func] = raw
    return raw


_INPLACE_DUNDERS = frozenset(
    {
        "add",
        "sub",
        "mul",
        "truediv",
        "floordiv",
        "mod",
        "pow",
        "matmul",
        "and",
        "or",
        "xor",
        "lshift",
        "rshift",
    }
)


def iter_tensors(value: Any, depth: int = 0) -> Iterator[torch.Tensor]:
    """Tensors inside ``value`` (tuples, lists, dicts and objects with ``items``), in order."""
    if isinstance(value, torch.Tensor):
        yield value
    elif depth > 4:
        return
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from iter_tensors(item, depth + 1)
    elif isinstance(value, dict) or (hasattr(value, "items") and hasattr(value, "keys")):
        for item in value.values():
            yield from iter_tensors(item, depth + 1)


class _StopCapture(Exception):
    """Raised by a tripwire to end a capture early (not an error: ``Recorder.stopped`` is set)."""


Tripwire = Callable[[Op, Any], bool]
"""``tripwire(op, value) -> True`` ends the capture right after ``op`` (live find_nan)."""


class Recorder:
    """Holds the state of one capture; ``record`` is called for every intercepted call."""

    def __init__(
        self,
        model: torch.nn.Module,
        save: bool | Selector,
        options: CaptureOptions,
        tripwire: Tripwire | None = None,
    ) -> None:
        self.ops: list[Op] = []
        self.by_label: dict[str, Op] = {}
        self.save = save
        self.options = options
        self.tripwire = tripwire
        self.stopped_at: Op | None = None
        self.producer: WeakIdKeyDictionary = WeakIdKeyDictionary()
        self.counts: dict[str, int] = {}
        self.module_names: dict[int, str] = {id(m): name for name, m in model.named_modules()}
        self.param_names: dict[int, str] = {id(p): n for n, p in model.named_parameters()}
        self.param_names.update({id(b): n for n, b in model.named_buffers()})
        self.stack: tuple[str, ...] = ()
        self.module_calls: list[dict[str, Any]] = []
        self._call_stack: list[dict[str, Any]] = []
        self.grad_fns: dict[str, Any] = {}
        self.saved_storage: dict[int, list[Op]] = {}
        self.source = SourceLocator() if options.source_lines else None
        self.suspended = False
        self._save_cache: dict[tuple[str, tuple[str, ...]], bool] = {}
        self._op_hooks: list[tuple[Selector, Any]] = []
        self._module_hooks: list[tuple[Selector, Any]] = []
        self._hook_cache: dict[tuple[str, tuple[str, ...]], list[tuple[Selector, Any]]] = {}
        for selector, callback in options.hooks.entries if options.hooks else ():
            for part in _parts(selector):  # type: ignore[arg-type]  # hook plans hold Selectors
                target = self._module_hooks if part.kind == "module" else self._op_hooks
                target.append((part, callback))

    # ----- selection ---------------------------------------------------------------------
    def wants_save(self, name: str) -> bool:
        if self.save is True or self.save is False:
            return self.save
        key = (name, self.stack)
        hit = self._save_cache.get(key)
        if hit is None:
            hit = self._save_cache[key] = self.save.matches_op(name, self.stack)
        return hit

    def _op_callbacks(self, name: str) -> list[tuple[Selector, Any]]:
        key = (name, self.stack)
        hit = self._hook_cache.get(key)
        if hit is None:
            hit = self._hook_cache[key] = [
                (sel, cb) for sel, cb in self._op_hooks if sel.matches_op(name, self.stack)
            ]
        return hit

    # ----- inputs ------------------------------------------------------------------------
    def record_inputs(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        for tensor in iter_tensors((args, kwargs)):
            if tensor in self.producer:
                continue
            op = self._new_op("input")
            op.is_input = True
            self._finish(op, tensor, (), 0, inplace=False)

    # ----- the per-op path ---------------------------------------------------------------
    def call(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        name = func_name(func)
        if name in _SKIPPED_FUNCS or self.suspended:
            return func(*args, **kwargs)
        inplace = (
            (name.endswith("_") and not name.endswith("__"))
            or name == "setitem"
            or "out" in kwargs
            or kwargs.get("inplace") is True
        )
        if inplace and self.saved_storage:
            self._copy_saved_before_write(args, kwargs)
        start = time.perf_counter_ns()
        out = func(*args, **kwargs)
        duration = time.perf_counter_ns() - start
        if name == "setitem":
            out = args[0]
        first = out if isinstance(out, torch.Tensor) else next(iter_tensors(out), None)
        if first is None:
            return out
        op = self._new_op(name)
        self._finish(op, out, (args, kwargs), duration, inplace)
        return out

    def _new_op(self, name: str) -> Op:
        count = self.counts.get(name, 0) + 1
        self.counts[name] = count
        op = Op(f"{name}_{count}", len(self.ops), name)
        op.module_stack = self.stack
        op.module = self.stack[-1] if self.stack else ""
        if self.source is not None:
            op.file, op.line, op.code_name = self.source.locate(sys._getframe(2))
        self.ops.append(op)
        self.by_label[op.label] = op
        return op

    def _finish(self, op: Op, out: Any, inputs: Any, duration: int, inplace: bool) -> None:
        op.duration_ns = duration
        op.is_inplace = inplace
        parents: list[str] = []
        params: list[str] = []
        meta: list[tuple[tuple[int, ...], str]] = []
        for tensor in iter_tensors(inputs):
            meta.append((tuple(tensor.shape), _dtype_name(tensor.dtype)))
            label = self.producer.get(tensor)
            if label is not None:
                if label not in parents:
                    parents.append(label)
            else:
                pname = self.param_names.get(id(tensor))
                if pname is not None and pname not in params:
                    params.append(pname)
        op.parents = tuple(parents)
        op.param_names = tuple(params)
        op.arg_meta = tuple(meta)
        outputs = [out] if isinstance(out, torch.Tensor) else list(iter_tensors(out))
        op.num_outputs = len(outputs)
        first = outputs[0]
        op.shape = tuple(first.shape)
        op.dtype = _dtype_name(first.dtype)
        op.device = str(first.device)
        op.requires_grad = first.requires_grad
        op.is_view = first._is_view()
        for tensor in outputs:
            self.producer[tensor] = op.label
        if op.requires_grad and self.options.backward_ready and first.grad_fn is not None:
            self.grad_fns[op.label] = first.grad_fn
            op.grad_fn_name = type(first.grad_fn).__name__
        if self.wants_save(op.func):
            self._save(op, outputs)
        callbacks = self._op_callbacks(op.func) if self._op_hooks else ()
        for selector, callback in callbacks:
            self._run_hook(callback, Site(op.label, op.func, op.module, "op", selector), first)
        if self.tripwire is not None and self.tripwire(op, first):
            self.stopped_at = op
            raise _StopCapture

    def _save(self, op: Op, outputs: list[torch.Tensor]) -> None:
        keep = self.options.backward_ready
        values = [t if keep else t.detach() for t in outputs]
        op.out = values[0] if len(values) == 1 else tuple(values)
        op.has_saved = True
        for tensor in values:
            if tensor.layout == torch.strided and tensor.device.type != "meta":
                key = tensor.untyped_storage().data_ptr()
                self.saved_storage.setdefault(key, []).append(op)

    def _copy_saved_before_write(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        target = kwargs.get("out", args[0] if args else None)
        for tensor in iter_tensors(target):
            if tensor.layout != torch.strided or tensor.device.type == "meta":
                continue
            for op in self.saved_storage.pop(tensor.untyped_storage().data_ptr(), ()):
                op.out = (
                    tuple(t.clone() for t in op.out)
                    if isinstance(op.out, tuple)
                    else op.out.clone()
                )

    def _run_hook(self, callback: Any, site: Site, value: Any) -> None:
        self.suspended = True
        try:
            callback(site, value)
        finally:
            self.suspended = False

    # ----- module context ----------------------------------------------------------------
    def enter_module(self, module: torch.nn.Module, args: Any) -> None:
        address = self.module_names.get(id(module))
        if address is None:
            address = f"?{type(module).__name__}"
        if address:  # the root module has address "" and is not part of the stack
            self.stack = (*self.stack, address)
        self._call_stack.append(
            {"address": address, "type": type(module).__name__, "first_op": len(self.ops)}
        )

    def exit_module(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        if not self._call_stack:
            return
        call = self._call_stack.pop()
        address = call["address"]
        if address and self.stack and self.stack[-1] == address:
            self.stack = self.stack[:-1]
        outputs = [] if output is None else list(iter_tensors(output))
        call["last_op"] = len(self.ops)
        call["output_labels"] = tuple(
            label for label in (self.producer.get(t) for t in outputs) if label is not None
        )
        self.module_calls.append(call)
        if self._module_hooks and outputs and call["output_labels"]:
            for selector, callback in self._module_hooks:
                if selector.matches_module(address):
                    op = self.by_label[call["output_labels"][0]]
                    self._run_hook(
                        callback, Site(op.label, op.func, address, "module", selector), outputs[0]
                    )


def _parts(selector: Selector) -> list[Selector]:
    if isinstance(selector, AnySelector):
        return [leaf for part in selector.parts for leaf in _parts(part)]
    return [selector]


_dtype_names: dict[torch.dtype, str] = {}


def _dtype_name(dtype: torch.dtype) -> str:
    name = _dtype_names.get(dtype)
    if name is None:
        name = _dtype_names[dtype] = str(dtype).removeprefix("torch.")
    return name


class RecordingMode(TorchFunctionMode):
    """Routes every intercepted call to its :class:`Recorder` (private: use ``tl.trace``)."""

    def __init__(self, recorder: Recorder) -> None:
        super().__init__()
        self.recorder = recorder

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        return self.recorder.call(func, args, kwargs or {})
