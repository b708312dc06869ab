"""The isolated-rerun harness behind ``bisect_precision``, ``check_determinism`` and
``guess_input_shape``: seeded captures of fresh model copies that leave the caller's model,
inputs and RNG streams bitwise as they were (tests/compare/test_isolation.py proves each).

torchlens_nb installs nothing on a model (no attributes, no per-module hooks), so a deep copy
taken after a trace needs no "release" step: a copy is already a clean model.
"""

from __future__ import annotations

import copy
import functools
import random
import sys
from collections.abc import Callable, Iterator, Mapping
from typing import Any, ParamSpec, TypeVar

import torch
from torch import nn

from .._undo import Undo, UndoScope, undoing
from .._validate import check_int
from ..capture import Trace, call_arguments, trace, validate_model
from ..errors import DiagnosticArgumentError, InputFormError, ModelCopyError

_TRACE_KWARGS = frozenset({"save", "capture"})
ModelFactory = Callable[[], nn.Module]
T = TypeVar("T")
P = ParamSpec("P")


def preserved_rng_state() -> UndoScope[None]:
    """Save every global RNG stream on entry and restore it on exit (exceptions and a Ctrl-C at
    any instant included: ``_undo.UndoScope``).

    Covers Python's ``random``, NumPy's legacy global generator (only when NumPy is already
    imported: this never imports it), torch's CPU generator and every CUDA generator: saved when
    CUDA is initialized on entry, reset to their first state when the block initialised it. Generator objects the caller owns (``numpy.random.default_rng()``,
    ``torch.Generator()``) are not global state and are not touched.

    Example:
        >>> before = torch.get_rng_state()
        >>> with preserved_rng_state():
        ...     _ = torch.rand(3)
        >>> torch.equal(before, torch.get_rng_state())
        True
    """
    return UndoScope(_keep_rng)


def _keep_rng(undo: Undo) -> None:
    undo.add(rng_restorer())


def rng_restorer() -> Callable[[], None]:
    """Save every global RNG stream now (as :func:`preserved_rng_state` does); the returned
    action puts them back, and may run any number of times (an ``Undo`` action)."""
    python_state = random.getstate()
    numpy = sys.modules.get("numpy")
    numpy_state = numpy.random.get_state() if numpy is not None else None
    torch_state = torch.get_rng_state()
    cuda_states = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None

    def restore() -> None:
        random.setstate(python_state)
        if numpy is not None and numpy_state is not None:
            numpy.random.set_state(numpy_state)
        torch.set_rng_state(torch_state)
        if cuda_states is not None:
            torch.cuda.set_rng_state_all(cuda_states)
        elif torch.cuda.is_initialized():
            _reset_fresh_cuda_generators()

    return restore


def _reset_fresh_cuda_generators() -> None:
    """Put the CUDA generators of a CUDA the block initialised back at their first state.

    A forward that first touches CUDA (``torch.randn(..., device="cuda")``) initialises it, then
    draws; there was no state to save on entry, but a fresh generator's state is its initial
    seed (torch's default, or the one ``torch.manual_seed`` queued) at offset 0, which
    ``manual_seed(initial_seed())`` restores.
    """
    for generator in torch.cuda.default_generators:
        generator.manual_seed(generator.initial_seed())


def keep_model_state(model: nn.Module, undo: Undo) -> None:
    """Register in ``undo`` the restore of ``model``'s buffers and every global RNG stream, as
    they are now (what :func:`preserved_model_state` restores, for a caller that runs under
    ``_undo.undoing``: an interrupt at any instant still restores them)."""
    undo.add(_buffers_restorer(model))
    undo.add(rng_restorer())


def keep_torch_switches(undo: Undo) -> None:
    """Register in ``undo`` the restore of torch's process-wide switches a forward or an
    analysis may flip and, interrupted, leave flipped: grad mode, anomaly mode (and its
    ``check_nan``) and the default dtype. Inference mode has no setter (torch undoes it when its
    guard object is freed), so it is not kept here."""
    grad = torch.is_grad_enabled()
    anomaly = torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled()
    dtype = torch.get_default_dtype()

    def restore() -> None:
        torch._C._set_grad_enabled(grad)
        if (torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled()) != anomaly:
            torch.set_anomaly_enabled(*anomaly)
        if torch.get_default_dtype() != dtype:
            torch.set_default_dtype(dtype)

    undo.add(restore)


def with_torch_switches_kept(function: Callable[[], T]) -> T:
    """``function()``, then torch's process-wide switches (:func:`keep_torch_switches`: grad
    mode, anomaly mode, the default dtype) put back as they were, whatever instant an interrupt
    arrives at (``_undo.undoing``).

    For a recipe whose analyses run ``with torch.no_grad():`` many times over: an interrupt at
    the first line of that block's ``__exit__`` (a Python frame in ``torch/autograd/grad_mode.py``)
    skips the restore and leaves grad mode off for every later cell. The line sweep of
    ``tl.recipes.triage`` found it there (``tests/faults/test_interrupt_sweep_trainers.py``).
    """

    def body(undo: Undo) -> T:
        keep_torch_switches(undo)
        return function()

    return undoing(body)


def keeps_torch_switches(function: Callable[P, T]) -> Callable[P, T]:
    """Decorate a public recipe so that it runs under :func:`with_torch_switches_kept` (torch's
    grad mode, anomaly mode and default dtype put back whatever instant a Ctrl-C lands at): a
    recipe whose analyses enter ``with torch.no_grad():`` (its own or a debug tool's it calls)
    can otherwise be interrupted at the first line of that block's ``__exit__``. The line sweep
    found it in ``gradient_flow``, inside ``debug/lineage/_graph.py``
    (``tests/faults/test_interrupt_sweep_recipes.py``)."""

    @functools.wraps(function)
    def kept(*args: P.args, **kwargs: P.kwargs) -> T:
        return with_torch_switches_kept(lambda: function(*args, **kwargs))

    return kept


def _buffers_restorer(model: nn.Module) -> Callable[[], None]:
    """A copy of each buffer of ``model``, and the action that writes them back (idempotent)."""
    saved = [(buffer, buffer.detach().clone()) for buffer in model.buffers()]

    def restore() -> None:
        for buffer, value in saved:  # through a detached alias: no `with torch.no_grad()`,
            buffer.detach().copy_(value)  # whose __enter__ an interrupt can leave grad off

    return restore


def preserved_model_state(model: nn.Module) -> UndoScope[None]:
    """Run a block on the caller's own model, then restore its buffers and the global RNG streams
    (exceptions and a Ctrl-C at any instant included: ``_undo.UndoScope``).

    For diagnostics that must run the model as it is (a train-mode forward uses batch statistics
    and Dropout, like the training run being debugged) and leave no trace of it: a train-mode
    forward updates BatchNorm running statistics (a NaN there poisons them for good) and Dropout
    draws from the global RNG. Parameters are not copied (a forward does not write them).
    Cost: one copy of each buffer.
    """
    return UndoScope(functools.partial(keep_model_state, model))


def seed_all(seed: int) -> None:
    """Seed Python ``random``, NumPy's global generator (if imported) and torch (CPU and CUDA)."""
    random.seed(seed)
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def map_tensors(tree: Any, function: Callable[[torch.Tensor], Any], depth: int = 0) -> Any:
    """Rebuild ``tree`` (tuples, lists, named tuples, dicts, mappings) with ``function`` applied
    to every tensor; other leaves are returned as they are (not copied)."""
    if isinstance(tree, torch.Tensor):
        return function(tree)
    if depth > 8 or isinstance(tree, (str, bytes)):
        return tree
    if isinstance(tree, tuple):
        items = [map_tensors(item, function, depth + 1) for item in tree]
        return type(tree)(*items) if hasattr(tree, "_fields") else tuple(items)
    if isinstance(tree, list):
        return [map_tensors(item, function, depth + 1) for item in tree]
    if isinstance(tree, Mapping):
        mapped = {key: map_tensors(value, function, depth + 1) for key, value in tree.items()}
        rebuild: Any = type(tree)
        try:
            return rebuild(mapped)  # keeps dict subclasses such as BatchEncoding
        except Exception:  # a mapping type without a dict constructor: a plain dict is passed
            return mapped
    return tree


def _clone_tensor(tensor: torch.Tensor) -> torch.Tensor:
    clone = tensor.detach().clone()
    return clone.requires_grad_(True) if tensor.requires_grad and tensor.is_leaf else clone


def clone_input_tree(inputs: Any) -> Any:
    """A copy of ``inputs`` whose tensors are fresh clones (same values, strides, device and
    ``requires_grad`` on leaves), so a forward that writes its inputs in place cannot reach the
    caller's tensors. Containers are rebuilt; non-tensor leaves are shared.

    Raises:
        InputFormError: ``inputs`` is an iterator (a generator): it could be read only once.

    Example:
        >>> x = torch.ones(2)
        >>> y = clone_input_tree({"x": x})["x"]
        >>> torch.equal(x, y), y is x
        (True, False)
    """
    if isinstance(inputs, Iterator):
        raise InputFormError(
            f"inputs is a {type(inputs).__name__}, which can be read only once (a clone would "
            "share it and the first run would empty it); pass a tuple or list, e.g. "
            "tuple(inputs)."
        )
    return map_tensors(inputs, _clone_tensor)


def copy_model(model: nn.Module) -> nn.Module:
    """A deep copy of ``model``.

    Raises:
        ModelCopyError: ``copy.deepcopy`` refused the model (a lock, an open file, a C handle
            inside it); pass ``model_factory=`` to the helper instead.
    """
    try:
        return copy.deepcopy(model)
    except Exception as exc:  # deepcopy failures are arbitrary user-object exceptions
        raise ModelCopyError(
            f"copy.deepcopy({type(model).__name__}) failed with {type(exc).__name__}: {exc}; "
            "pass model_factory=lambda: <build the same model> so each run gets a fresh one."
        ) from exc


def check_isolation_args(model: Any, inputs: Any, model_factory: ModelFactory | None) -> None:
    """Validate before anything runs: a model (or a factory) and inputs tl.trace accepts."""
    if model_factory is not None:
        if not callable(model_factory):
            raise DiagnosticArgumentError(
                f"model_factory must be a zero-argument callable returning an nn.Module, got "
                f"{type(model_factory).__name__}."
            )
    else:
        validate_model(model)
    call_arguments(inputs)


def fresh_model(model: nn.Module | None, model_factory: ModelFactory | None) -> nn.Module:
    """``model_factory()`` when given, else a deep copy of ``model``."""
    if model_factory is not None:
        return validate_model(model_factory(), "model_factory()")
    assert model is not None  # check_isolation_args guarantees a model or a factory
    return copy_model(model)


def isolated_capture(
    model: nn.Module | None,
    inputs: Any,
    *,
    seed: int,
    prepare: Callable[[nn.Module], nn.Module | None] | None = None,
    model_factory: ModelFactory | None = None,
    **trace_kwargs: Any,
) -> Trace:
    """One seeded ``tl.trace`` of a fresh copy of ``model`` on cloned ``inputs``.

    Inside :func:`preserved_rng_state`, every global RNG is seeded with ``seed``, the model is
    deep-copied (or built by ``model_factory``), ``prepare(copy)`` runs (it may return a
    replacement module, e.g. ``lambda m: m.double()``), the RNGs are seeded again so the forward
    draws the same stream whatever ``prepare`` consumed, and the copy is traced on a clone of
    ``inputs``. The caller's model, inputs and RNG streams are untouched, also when the forward
    raises. Cost: one deep copy of the model plus one capture.

    Args:
        model: the module to copy (may be None when ``model_factory`` is given).
        inputs: every form ``tl.trace`` takes.
        seed: the seed of the run.
        prepare: called on the copy before the forward.
        model_factory: builds a fresh model per call, for models ``copy.deepcopy`` refuses.
        **trace_kwargs: ``save=`` and ``capture=`` of ``tl.trace``.

    Raises:
        ModelCopyError: the model cannot be deep-copied (pass ``model_factory``).
        ForwardError: the copy's forward raised (``err.partial_trace`` holds the ops).
        DiagnosticArgumentError: an unknown keyword or a non-callable ``prepare``.
    """
    unknown = set(trace_kwargs) - _TRACE_KWARGS
    if unknown:
        raise DiagnosticArgumentError(
            f"isolated_capture passes only save= and capture= to tl.trace; got {sorted(unknown)}."
        )
    if prepare is not None and not callable(prepare):
        raise DiagnosticArgumentError(
            f"prepare must be a callable taking the model copy, got {type(prepare).__name__}."
        )
    check_int("seed", seed, hint="pass an int such as 0")
    check_isolation_args(model, inputs, model_factory)
    with preserved_rng_state():
        seed_all(seed)
        fresh = fresh_model(model, model_factory)
        if prepare is not None:
            replaced = prepare(fresh)
            if replaced is not None:
                fresh = validate_model(replaced, "prepare(model)'s return value")
        cloned = clone_input_tree(inputs)
        seed_all(seed)
        return trace(fresh, cloned, **trace_kwargs)
