"""The per-op path: a private ``TorchFunctionMode`` that records every tensor-producing call.

Design (measured in ``benchmarks/bench_capture.py``): one torch-function mode sees every torch
function, ``nn.functional`` call, tensor method and operator at the Python boundary, so nested
internals (``F.layer_norm`` calling ``torch.layer_norm``) are recorded once, at the outermost
call. Module context comes from ``_modules.ModuleTracker`` (module calls reach it through the
wrapped ``nn.Module._call_impl``, see ``_scope``). Producer lookup is by tensor identity:
``id(tensor)`` -> ``(weakref, row index, (Size, dtype))``, checked against the weak reference, so
a ``save=False`` capture keeps no activation alive and a recycled id is never mistaken for a
producer.

Each op appends one flat tuple of raw facts (``_recording.Row``): the output's ``torch.Size``,
``dtype`` and (off the CPU) ``device`` objects as torch returns them, the producers' row indices,
the parameter names, the source location. Labels, parent labels, ``Op`` objects, children and
dtype/device names are built after the forward, when the trace is first read
(``_recording.Recording.build``); a live observer (hook plan, tripwire) has the op built as it
runs. Saved values are kept by row index; the storage index that copy on write needs is built
at the first in-place op that finds values saved.

Measured on the 801-op chain ``200 x (Linear(16) -> tanh -> mul -> add)``, batch 2, no grad,
2-core CPU shared with other jobs (CPU time, median of per-round ratios to the plain forward,
the code before and after side by side in one process, 21 rounds): save=False 4.2-4.9x ->
3.1-3.4x, save=True 4.7-5.5x -> 3.5-3.7x, against 1.5-1.6x for a bare recording mode (function
and calling frame only); reading ``trace.ops`` afterwards brings save=False to 3.96x (the build
is about 0.8x). Of the cut, building ``Op`` objects and labels after the forward is about 0.5x
(A/B 4.64x -> 4.12x), module calls through the wrapper instead of global hooks about 0.5x (the
hooks cost 0.6x by ablation), the lazy storage index about 0.35x of save=True; the cheaper
argument scan, the unpacked function facts and the CPU outputs' skipped device object could not
be told apart in the noise one by one. Tried and not kept: folding ``record`` into
``__torch_function__`` (inlined argument scan and first source-frame step): 3.47x against
3.49x, within the noise.
What remains per op (ablations, each about 0.1-0.3x): the source walk (four frames for an op
inside ``nn.Linear.forward``), the producer table (a weak reference per output), reading
``shape``/``dtype``/``requires_grad``/``_is_view``, the functorch level check, the two clock
reads.

Saved outputs are detached references, not copies; an in-place op on a tensor whose storage backs
a saved value first replaces that saved value by a clone (copy on write), so saving every op costs
memory only for what the forward would have freed.
"""

from __future__ import annotations

import sys
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from ..options import CaptureOptions, Site
from ._blind_spots import BlindSpotKind
from ._funcs import _infos, func_info
from ._op import HookKind, Op
from ._recording import Recording
from ._selectors import AnySelector, Selector
from ._source import NO_LOCATION, locate
from ._tensors import arg_tensors, tensors_in

Tensor = torch.Tensor
_ref = weakref.ref
_now_ns = time.perf_counter_ns
_getframe = sys._getframe
_STRIDED = torch.strided
_functorch_level = torch._C._functorch.maybe_current_level


class _StopCapture(BaseException):
    """Raised by a tripwire to end its own capture early (``Recorder.stopped_at`` is set).

    A ``BaseException``, so a forward's own ``except Exception`` cannot swallow it; it names the
    recorder that raised it, so a nested capture never takes the outer one's stop for its own.
    """

    def __init__(self, recorder: Recorder | None) -> None:
        super().__init__("capture stopped by its tripwire")
        self.recorder = recorder


Tripwire = Callable[[Op, tuple[Any, ...]], bool]
"""``tripwire(op, outputs) -> True`` ends the capture right after ``op`` (live find_nan);
``outputs`` holds every tensor the op returned (``topk``: values and indices)."""


def _may_carry_a_value(tensor: Tensor) -> bool:
    """Whether a tensor of unknown origin can carry what the checks look for: a floating or
    complex value (a NaN, an Inf) or an autograd history."""
    return tensor.is_floating_point() or tensor.is_complex() or tensor.grad_fn is not None


class Recorder(TorchFunctionMode):
    """Holds the state of one capture; ``__torch_function__`` is the per-op path."""

    def __init__(
        self,
        param_names: dict[int, str],
        save: bool | Selector,
        options: CaptureOptions,
        tripwire: Tripwire | None = None,
    ) -> None:
        super().__init__()
        self.recording = Recording()
        self.rows = self.recording.rows
        self.producer: dict[int, tuple[Any, int, tuple[Any, Any] | None]] = {}
        """``id(tensor)`` -> (weak reference, row index of the op that produced it, its
        (``torch.Size``, ``torch.dtype``) as recorded then, for the first output of an op; None
        for the others)."""
        self.param_names = param_names
        self.options = options
        self.save_all = save is True
        self.save_selector = save if isinstance(save, Selector) else None
        self.backward_ready = options.backward_ready
        self.saved = self.recording.saved
        self.saved_storage: dict[int, list[int]] | None = None
        """Storage address -> row indices of the ops whose saved values it backs; built at the
        first in-place op that finds values saved, kept up to date from then on (a forward
        without in-place ops never reads a storage address)."""
        self.source_lines = options.source_lines
        self.tripwire = tripwire
        self.stopped_at: Op | None = None
        self.thread = threading.get_ident()
        self.functorch_level = _functorch_level()
        """The torch.func transform level the capture started at (None: outside any)."""
        # module context, written by _modules.ModuleTracker
        self.stack: tuple[str, ...] = ()
        self.module = ""
        self.hook_kind: HookKind | None = None
        self.suspended = 0
        """> 0: torch calls are not recorded (hook callbacks, opaque regions, nested captures)."""
        self.paused = 0
        """> 0: module calls are not tracked either (hook-plan callbacks)."""
        self.blind_spots: dict[tuple[str, str], list[int]] = {}
        """``(kind, where)`` -> row indices of the ops holding what came out (``_blind_spots``)."""
        self._save_cache: dict[tuple[str, tuple[str, ...]], bool] = {}
        self._op_hooks: list[tuple[Selector, Any]] = []
        self.module_hooks: list[tuple[Selector, Any]] = []
        self._hook_cache: dict[tuple[str, tuple[str, ...]], list[tuple[Selector, Any]]] = {}
        for selector, callback in options.hooks.entries if options.hooks else ():
            for part in _parts(selector):  # type: ignore[arg-type]  # hook plans hold Selectors
                target = self.module_hooks if part.kind == "module" else self._op_hooks
                target.append((part, callback))

    # ----- the per-op path ---------------------------------------------------------------
    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name, is_skipped, inplace = _infos.get(func) or func_info(func)
        if is_skipped or self.suspended:
            return func(*args, **kwargs) if kwargs else func(*args)
        if kwargs:
            inplace = inplace or "out" in kwargs or kwargs.get("inplace") is True
            if inplace and self.saved:
                self._copy_saved_before_write(args, kwargs)
            start = _now_ns()
            out = func(*args, **kwargs)
        else:
            if inplace and self.saved:
                self._copy_saved_before_write(args, kwargs)
            start = _now_ns()
            out = func(*args)
        duration = _now_ns() - start
        if name == "setitem":
            out = args[0]
        if isinstance(out, Tensor):
            outputs = [out]
        else:
            outputs = tensors_in(out)
            if not outputs:
                return out
        self.record(name, arg_tensors(args, kwargs), outputs, duration, inplace, _getframe(1))
        return out

    def record(
        self,
        name: str,
        inputs: list[Tensor],
        outputs: list[Tensor],
        duration: int,
        inplace: bool,
        frame: Any,
        is_input: bool = False,
        observe: bool = True,
    ) -> int:
        """Append the row of the op ``name`` that read ``inputs`` and produced ``outputs``
        (non-empty); returns its index (``Recording.op`` builds its ``Op``).

        ``frame`` is where the call was made (the first frame outside torch and torchlens_nb
        above it is the op's source line). With ``observe`` (the default) the hook plan's op
        callbacks and the tripwire see the op before this returns.
        """
        producer = self.producer
        rows = self.rows
        index = len(rows)
        parents: list[int] = []
        params: list[str] = []
        meta: list[tuple[Any, Any]] = []
        is_untracked = False
        for tensor in inputs:
            entry = producer.get(id(tensor))
            if entry is not None and entry[0]() is tensor:
                # the producer's recorded (shape, dtype): an op that changed them in place was
                # recorded too and replaced the entry
                meta.append(entry[2] or (tensor.shape, tensor.dtype))
                if entry[1] not in parents:
                    parents.append(entry[1])
            else:
                meta.append((tensor.shape, tensor.dtype))
                pname = self.param_names.get(id(tensor))
                if pname is None:
                    # made where the capture did not look; an integer or bool tensor with no
                    # autograd history (class-index targets, masks) can hold no NaN or Inf and
                    # carries no gradient: nothing born in it can show up here
                    is_untracked = is_untracked or _may_carry_a_value(tensor)
                elif pname not in params:
                    params.append(pname)
        first = outputs[0]
        out_meta = (first.shape, first.dtype)
        requires_grad = first.requires_grad
        rows.append((
            name, self.module, self.stack, self.hook_kind,
            locate(frame) if self.source_lines else NO_LOCATION, parents, params, meta, out_meta,
            None if first.is_cpu else first.device, requires_grad, first._is_view(), inplace,
            duration, len(outputs), is_input,
        ))  # fmt: skip
        producer[id(first)] = (_ref(first), index, out_meta)
        if len(outputs) > 1:
            for tensor in outputs[1:]:
                producer[id(tensor)] = (_ref(tensor), index, None)
        if requires_grad and self.backward_ready and first.grad_fn is not None:
            self.recording.grad_fns[index] = first.grad_fn
        if _functorch_level() != self.functorch_level:
            # inside a torch.func transform (grad, jacrev, jvp, ...): the values are wrappers
            # that die with the transform, and the links to the ops outside are lost
            self._note("functorch_transform", index)
        else:
            if is_untracked:
                self._note("untracked_input", index)
            if self.save_all or (self.save_selector is not None and self._wants_save(name)):
                if requires_grad or len(outputs) > 1 or self.saved_storage is not None:
                    self._save(index, outputs)
                else:  # one output outside autograd, nothing indexed: inline (save=True
                    self.saved[index] = first  # chain A/B 0.96x of the call to _save)
        if observe and (self._op_hooks or self.tripwire is not None):
            self.observe(index, outputs)
        return index

    def observe(self, index: int, outputs: Sequence[Tensor]) -> None:
        """Show the op of row ``index`` to the hook plan's op callbacks (its first output), then
        to the tripwire (every output), which may stop."""
        op = self.recording.op(index)
        if self._op_hooks:
            value = outputs[0]
            for selector, callback in self._op_callbacks(op.func):
                self.run_hook(callback, Site(op.label, op.func, op.module, "op", selector), value)
        if self.tripwire is not None and self.tripwire(op, tuple(outputs)):
            self.stopped_at = op
            self.suspended += 1  # nothing more is recorded, even if the forward swallows the stop
            raise _StopCapture(self)

    def record_unseen(
        self,
        kind: BlindSpotKind,
        where: str | None,
        name: str,
        inputs: list[Tensor],
        outputs: list[Tensor],
        duration: int,
        frame: Any,
    ) -> None:
        """Record a region the capture could not see into (a TorchScript module, a vmap call) as
        one op ``name`` from ``inputs`` to ``outputs``, and a blind spot at ``where`` (the op's
        label when None) naming that op as the holder of what came out. A region that returned
        no tensor gets the blind spot alone."""
        if not outputs:
            self.blind_spots.setdefault((kind, where or f"{name} in {self.module or '(root)'}"), [])
            return
        # called from a module hook or the vmap entry point, where the mode is live: what the
        # recording itself runs (detach for saving, the tripwire's checks) must not be recorded
        self.suspended += 1
        try:
            index = self.record(name, inputs, outputs, duration, False, frame, observe=False)
            if where is None:
                where = self.recording.op(index).label
            self.blind_spots.setdefault((kind, where), []).append(index)
            self.observe(index, outputs)
        finally:
            self.suspended -= 1

    def _note(self, kind: BlindSpotKind, index: int) -> None:
        self.blind_spots.setdefault((kind, self.module or "(root)"), []).append(index)

    def producer_of(self, tensor: Tensor) -> int | None:
        """Row index of the op that produced ``tensor`` in this capture, or None."""
        entry = self.producer.get(id(tensor))
        return entry[1] if entry is not None and entry[0]() is tensor else None

    def record_inputs(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """One ``input`` op per distinct tensor among the forward's arguments, with no source
        location: the frame that called the capture is where the batch was handed over (a
        ``tl.trace`` line, ``investigate()``, or a library such as ipywidgets' comm callback
        when a panel button replays a step), not where its values came from."""
        for tensor in arg_tensors(args, kwargs):
            if self.producer_of(tensor) is None:
                self.record("input", [], [tensor], 0, False, None, is_input=True)

    # ----- selection ---------------------------------------------------------------------
    def _wants_save(self, name: str) -> bool:
        key = (name, self.stack)
        hit = self._save_cache.get(key)
        if hit is None:
            assert self.save_selector is not None
            hit = self._save_cache[key] = self.save_selector.matches_op(name, self.stack)
        return hit

    def _op_callbacks(self, name: str) -> list[tuple[Selector, Any]]:
        key = (name, self.stack)
        hit = self._hook_cache.get(key)
        if hit is None:
            hit = self._hook_cache[key] = [
                (sel, cb) for sel, cb in self._op_hooks if sel.matches_op(name, self.stack)
            ]
        return hit

    def run_hook(self, callback: Any, site: Site, value: Any) -> None:
        """Run a hook-plan callback with recording suspended (its torch calls add no op)."""
        self.suspended += 1
        self.paused += 1
        try:
            callback(site, value)
        finally:
            self.suspended -= 1
            self.paused -= 1

    # ----- saved values ------------------------------------------------------------------
    def _save(self, index: int, outputs: list[Tensor]) -> None:
        # a detached alias cuts the autograd graph; an output outside autograd has none to cut
        # (skipping detach there saves 0.36 us per op, a third of what saving costs)
        if self.backward_ready:
            values = outputs
        else:
            values = [t.detach() if t.requires_grad else t for t in outputs]
        self.saved[index] = values[0] if len(values) == 1 else tuple(values)
        if self.saved_storage is not None:
            self._index_storage(index, values)

    def _index_storage(self, index: int, values: Sequence[Tensor]) -> None:
        saved_storage = self.saved_storage
        assert saved_storage is not None
        for tensor in values:
            key = _storage_key(tensor)
            if key is not None:
                owners = saved_storage.get(key)
                if owners is None:
                    saved_storage[key] = [index]
                else:
                    owners.append(index)

    def _copy_saved_before_write(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if self.saved_storage is None:  # the first in-place op: index what was saved so far
            self.saved_storage = {}
            for index, value in self.saved.items():
                self._index_storage(index, value if isinstance(value, tuple) else (value,))
        first = args[0] if args else None
        target = kwargs.get("out", first) if kwargs else first
        recording = self.recording
        for tensor in tensors_in(target):
            key = _storage_key(tensor)
            for index in self.saved_storage.pop(key, ()) if key is not None else ():
                value = recording.saved[index]
                recording.replace_saved(
                    index,
                    tuple(t.clone() for t in value) if isinstance(value, tuple) else value.clone(),
                )


def _storage_key(tensor: Tensor) -> int | None:
    if tensor.layout is not _STRIDED or tensor.is_meta:
        return None
    try:
        return tensor.untyped_storage().data_ptr()
    except (NotImplementedError, RuntimeError):  # functorch wrappers have no storage
        return None


def _parts(selector: Selector) -> list[Selector]:
    if isinstance(selector, AnySelector):
        return [leaf for part in selector.parts for leaf in _parts(part)]
    return [selector]
