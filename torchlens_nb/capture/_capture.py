"""``tl.trace``: run a model's forward once and record it."""

from __future__ import annotations

import sys
import traceback
from collections.abc import Mapping
from functools import partial
from typing import Any

import torch
from torch import nn

from .._undo import Undo, undoing
from ..errors import (
    CaptureOptionsError,
    ForwardError,
    InputFormError,
    ModelTypeError,
    warn,
)
from ..options import CaptureOptions
from ._gc_pause import pause_gc
from ._modules import ModelNames, ModuleTracker
from ._recorder import Recorder, Tripwire, _StopCapture
from ._scope import enter_scope
from ._selectors import Selector
from ._tensors import tensors_in
from ._trace import PartialTrace, Trace

_set_grad_enabled = torch._C._set_grad_enabled
_DEFAULT_OPTIONS = CaptureOptions()
"""Shared by every call without ``capture=`` (a frozen record; building one costs ~2 us)."""


def call_arguments(inputs: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """How ``inputs`` is passed to ``forward``: a tensor or object as the one positional argument,
    a tuple/list as positional arguments, a mapping (dict, Hugging Face ``BatchEncoding``) as
    keyword arguments.

    Raises:
        InputFormError: ``inputs`` is a string or None (tokenize text first).
    """
    if isinstance(inputs, torch.Tensor):  # the common case first: Mapping is a slow ABC check
        return (inputs,), {}
    if isinstance(inputs, str):
        raise InputFormError(
            f"inputs is the string {inputs[:40]!r}; tokenize it first and pass the tensors "
            "(e.g. tokenizer(text, return_tensors='pt'))."
        )
    if inputs is None:
        raise InputFormError(
            "inputs is None; pass a tensor, a tuple of arguments or a dict of "
            "keyword arguments for the model's forward."
        )
    if isinstance(inputs, (tuple, list)):
        return tuple(inputs), {}
    if isinstance(inputs, Mapping):
        for key in inputs:
            if not isinstance(key, str):
                raise InputFormError(
                    f"a dict of inputs is passed as keyword arguments, so its keys must be "
                    f"strings; got key {key!r}. Pass a tuple for positional arguments."
                )
        return (), dict(inputs)
    return (inputs,), {}


def validate_model(model: Any, what: str = "model") -> nn.Module:
    """Return ``model`` if it is an ``nn.Module``, else raise ``ModelTypeError`` naming the fix."""
    if not isinstance(model, nn.Module):
        hint = (
            " (wrap a list of layers in nn.Sequential(*layers))"
            if isinstance(model, (list, tuple))
            else ""
        )
        raise ModelTypeError(f"{what} must be a torch.nn.Module, got {type(model).__name__}{hint}.")
    return model


def _unwrap_compiled(model: nn.Module) -> nn.Module:
    # a Module attribute lives in _modules; getattr(model, "_orig_mod", None) on any other model
    # raised (and caught) an AttributeError, 1-2 us of every call
    original = model._modules.get("_orig_mod")
    if isinstance(original, nn.Module):
        warn(
            "the model is torch.compile'd; capturing its eager original under "
            "torch.compiler.set_stance('force_eager') (compiled code is not what is recorded)."
        )
        return original
    return model


def _warn_if_compiled_regions(names: ModelNames) -> None:
    dynamo = sys.modules.get("torch._dynamo")
    frames = dynamo.utils.counters.get("frames", {}) if dynamo is not None else {}
    if names.compiled:
        warn(
            f"the model holds torch.compile'd submodules {names.compiled[:4]}; capturing their "
            "eager originals under torch.compiler.set_stance('force_eager') (addresses are "
            "spelled without '_orig_mod')."
        )
    elif frames.get("ok", 0) or frames.get("total", 0):
        warn(
            "torch.compile regions exist in this process; the capture ran them eagerly under "
            "torch.compiler.set_stance('force_eager')."
        )


def _check_save(save: Any) -> bool | Selector:
    if isinstance(save, (bool, Selector)):
        return save
    raise CaptureOptionsError(
        f"save must be True, False or a selector such as tl.func('relu'), got {save!r}."
    )


def run_capture(
    model: Any,
    inputs: Any,
    *,
    save: Any = True,
    capture: CaptureOptions | None = None,
    tripwire: Tripwire | None = None,
) -> Trace:
    """The capture behind ``tl.trace``; ``tripwire(op, value)`` may end it early (find_nan).

    Returns a ``Trace``, or a ``PartialTrace`` when the tripwire stopped the run (the recorder's
    ``stopped_at`` op is its last op).
    """
    return undoing(partial(_capture, model, inputs, save, capture, tripwire))


def _capture(
    model: Any,
    inputs: Any,
    save: Any,
    capture: CaptureOptions | None,
    tripwire: Tripwire | None,
    undo: Undo,
) -> Trace:
    """:func:`run_capture`'s body under ``undoing``: no context managers, every install
    registers its undo in ``undo`` before it runs (``_undo``)."""
    grad_enabled = torch.is_grad_enabled()
    completed: list[bool] = []
    # an interrupt inside a hook's `with torch.no_grad():` (a tripwire's, a probe's) skips its
    # exit, and torch's grad mode would stay off: put back unless the capture completed
    undo.add(partial(_restore_grad_unless_completed, grad_enabled, completed))
    try:
        pause_gc(undo)
        model = _unwrap_compiled(validate_model(model))
        save = _check_save(save)
        options = capture if capture is not None else _DEFAULT_OPTIONS
        if not isinstance(options, CaptureOptions):
            raise CaptureOptionsError(
                f"capture must be tl.options.CaptureOptions(...), got {type(options).__name__}."
            )
        args, kwargs = call_arguments(inputs)
        names = ModelNames(model)
        recorder = Recorder(names.params, save, options, tripwire)
        tracker = ModuleTracker(recorder, names)
        _warn_if_compiled_regions(names)
        error: BaseException | None = None
        output: Any = None
        try:
            # Inside the try: a tripwire may stop the capture at an input (a NaN fed to the model),
            # and then the forward never runs.
            recorder.record_inputs(args, kwargs)
            enter_scope(recorder, tracker, undo)
            output = model(*args, **kwargs)
        except _StopCapture as stop:
            if stop.recorder is not recorder:  # an enclosing capture's stop: not ours to end
                raise
        except Exception as exc:  # the user's forward raised: keep what was recorded
            error = exc
        recorder.suspended += 1  # the forward is over: nothing below is recorded
        recorder.paused += 1
        result = _result(model, recorder, tracker, options, save, output, error)
        completed.append(True)  # no signal check between _result's return and this store
        return result
    except KeyboardInterrupt as interrupt:
        # torch enters `_pop_mode_temporarily` (a generator context manager) around our mode's
        # __torch_function__ for Python-level functions (F.relu): interrupted inside its
        # __enter__, it stays suspended in the traceback and pushes the mode back whenever the
        # traceback is freed. Freeing the finished frames' locals closes it now, before the
        # undo pops the mode (the forward's locals are dropped from the traceback).
        traceback.clear_frames(interrupt.__traceback__)
        raise


def _restore_grad_unless_completed(grad_enabled: bool, completed: list[bool]) -> None:
    if not completed:
        _set_grad_enabled(grad_enabled)


def _result(
    model: nn.Module,
    recorder: Recorder,
    tracker: ModuleTracker,
    options: CaptureOptions,
    save: bool | Selector,
    output: Any,
    error: BaseException | None,
) -> Trace:
    """The trace of a finished forward (a ``PartialTrace`` if it raised or was stopped)."""
    recording = recorder.recording
    if isinstance(output, torch.Tensor):
        index = recorder.producer_of(output)
        recording.outputs = () if index is None else (index,)
    else:
        found = map(recorder.producer_of, tensors_in(output))
        recording.outputs = tuple(dict.fromkeys(i for i in found if i is not None))
    common: dict[str, Any] = dict(
        model_type=type(model).__name__,
        output=output if options.keep_output else None,
        save_all=save is True,
        options=options,
        blind_spots=recorder.blind_spots,
        opaque_types=tracker.opaque_types,
    )
    if error is not None or recorder.stopped_at is not None:
        partial = PartialTrace(recording, exception=error or _StopCapture(None), **common)
        if error is not None:
            raise ForwardError(
                f"the model's forward raised {type(error).__name__}: {error} "
                f"(after {len(recording.rows)} recorded ops; the exception's partial_trace "
                "holds them, and tl.debug helpers accept it).",
                partial,
            ) from error
        return partial
    return Trace(recording, **common)


def trace(
    model: nn.Module,
    inputs: Any,
    *,
    save: bool | Selector = True,
    capture: CaptureOptions | None = None,
) -> Trace:
    """Run ``model``'s forward once on ``inputs`` and record every tensor-producing op.

    Args:
        model: the module to run. A ``torch.compile``'d one is captured eagerly, with a warning;
            module addresses are spelled without the wrapper's ``_orig_mod`` segments (``0``,
            not ``_orig_mod.0``; ``block.fc`` for a compiled submodule ``block``), and
            ``trace.module(...)`` and ``tl.module(...)`` accept either spelling.
        inputs: a tensor, a tuple/list of positional arguments, or a dict of keyword arguments
            (a Hugging Face ``BatchEncoding`` included).
        save: which op outputs to keep: True (all), False (metadata only) or a selector such
            as ``tl.func("relu") | tl.module("encoder.*")``.
        capture: ``tl.options.CaptureOptions`` (gradients, hook plans, source lines).

    Returns:
        A :class:`Trace`. Outputs are bitwise what ``model(*inputs)`` returns; the model's
        parameters, buffers and train/eval mode are untouched (the forward itself may update
        BatchNorm running stats in train mode, exactly as a plain call would). No hook or mode
        outlives the call, also when the forward raises.

    Raises:
        ForwardError: the forward raised; ``err.partial_trace`` holds the ops recorded before.
        ModelTypeError, InputFormError, CaptureOptionsError: bad arguments (nothing was run).

    Example:
        >>> import torch
        >>> from torch import nn
        >>> t = trace(nn.Sequential(nn.Linear(2, 2), nn.ReLU()), torch.ones(1, 2))
        >>> [op.label for op in t]
        ['input_1', 'linear_1', 'relu_1']
    """
    return run_capture(model, inputs, save=save, capture=capture)
