"""``Trace``: the recorded forward pass (and its logged backward passes)."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import torch

from .._undo import Undo, undoing
from ..errors import BackwardError, OpNotFoundError
from ._backward import BackwardPass, log_backward
from ._blind_spots import BlindSpot, blind_spots
from ._gc_pause import pause_gc
from ._op import Op
from ._recording import ModuleCall, Recording
from ._selectors import canonical_address

if TYPE_CHECKING:
    from ..report import FindNanReport, HealthReport


_build_lock = threading.Lock()


class _Built:
    """A :class:`Trace` attribute built with the ops on its first read (``Trace._build``), a
    plain instance attribute from then on (a non-data descriptor: the instance dict wins)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, trace: Trace | None, owner: type | None = None) -> Any:
        if trace is None:
            return self
        trace._build()
        return trace.__dict__[self.name]


class Trace:
    """A captured forward pass: ops in execution order plus module calls and backward logs.

    Index with a label (``trace["relu_1"]``) or an execution index (``trace[0]``); iterate for ops
    in order. The trace holds saved output values (per the ``save`` selector), and, when captured
    with ``backward_ready``, each op's ``grad_fn``: that keeps the autograd graph alive until the
    trace is released. ``blind_spots`` lists what the capture could not see into (TorchScript
    modules, vmap calls); an analysis must not call a trace with blind spots fully checked.

    The ``Op`` objects and the tables below are built from the capture's raw rows
    (``_recording``) on the first read of any of them (``ops``, a label lookup, iteration,
    ``len``), once: a trace dropped unread, or read only for ``output`` and ``options``, never
    builds them.
    """

    is_partial = False

    ops: list[Op] = _Built()  # type: ignore[assignment]
    """The ops in execution order."""
    _by_label: dict[str, Op] = _Built()  # type: ignore[assignment]
    module_calls: list[ModuleCall] = _Built()  # type: ignore[assignment]
    """Every module call, in the order the calls ended."""
    output_layers: tuple[str, ...] = _Built()  # type: ignore[assignment]
    """Labels of the ops that produced the forward's outputs."""
    input_layers: tuple[str, ...] = _Built()  # type: ignore[assignment]
    blind_spots: tuple[BlindSpot, ...] = _Built()  # type: ignore[assignment]
    """What the capture could not see into (see ``tl.capture.BlindSpot``)."""
    _grad_fns: dict[str, Any] = _Built()  # type: ignore[assignment]

    def __init__(
        self,
        recording: Recording,
        *,
        model_type: str,
        output: Any,
        save_all: bool,
        options: Any,
        blind_spots: Mapping[tuple[str, str], list[int]],
        opaque_types: Mapping[str, str],
    ) -> None:
        self._recording: Recording | None = recording
        self._raw_blind_spots = (blind_spots, opaque_types)
        self.model_type = model_type
        self.output = output
        self.save_all = save_all
        """True when every op's output was saved (full coverage for value scans)."""
        self.options = options
        self.backward_passes: list[BackwardPass] = []

    def _build(self) -> None:
        """Build every op and the tables above from the recording (once, under the gc pause).

        An interrupt leaves nothing half done: the pause is undone by an ``Undo`` registered
        before it (``_undo``: a ``paused_gc()`` block interrupted in its exit kept the
        objects frozen), each op is committed at once (``Recording.build``) and the tables are
        set before ``ops``, so the next read builds the rest.
        """
        with _build_lock:
            undoing(self._build_paused)

    def _build_paused(self, undo: Undo) -> None:
        pause_gc(undo)
        self._build_tables()

    def _build_tables(self) -> None:
        recording = self._recording
        if recording is None:  # another thread built them while this one waited
            return
        ops = recording.build()
        for index in recording.outputs:
            ops[index].is_output = True
        children: dict[int, list[str]] = {}  # ops without consumers keep Op.children == ()
        for op in ops:
            for parent in op.parents:
                children.setdefault(recording.by_label[parent].index, []).append(op.label)
        for index, consumers in children.items():
            ops[index].children = tuple(consumers)
        found, opaque_types = self._raw_blind_spots
        fields = self.__dict__
        fields["_by_label"] = recording.by_label
        fields["module_calls"] = recording.module_calls()
        fields["output_layers"] = tuple(ops[index].label for index in recording.outputs)
        fields["input_layers"] = tuple(op.label for op in ops if op.is_input)
        fields["blind_spots"] = blind_spots(
            {key: [ops[i].label for i in indices] for key, indices in found.items()},
            opaque_types,
        )
        fields["_grad_fns"] = {ops[i].label: fn for i, fn in recording.grad_fns.items()}
        fields["ops"] = ops
        self._recording = None  # the rows are not needed again
        self._raw_blind_spots = ({}, {})

    # ----- lookup ------------------------------------------------------------------------
    def __getitem__(self, key: str | int | Op) -> Op:
        if isinstance(key, Op):
            key = key.label
        if isinstance(key, bool) or not isinstance(key, (str, int)):
            raise OpNotFoundError(
                f"index a trace with an op label (e.g. {self._example()}) or an int, "
                f"got {type(key).__name__}."
            )
        if isinstance(key, int):
            if -len(self.ops) <= key < len(self.ops):
                return self.ops[key]
            raise OpNotFoundError(f"op index {key} is out of range for {len(self.ops)} ops.")
        op = self._by_label.get(key)
        if op is None:
            close = [label for label in self._by_label if label.split("_")[0] == key.split("_")[0]]
            hint = f" Labels like it: {close[:5]}." if close else f" Try {self._example()}."
            raise OpNotFoundError(f"no op labelled {key!r} in this trace.{hint}")
        return op

    def _example(self) -> str:
        return repr(self.ops[-1].label) if self.ops else "'linear_1'"

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and key in self._by_label

    def __iter__(self) -> Iterator[Op]:
        return iter(self.ops)

    def __len__(self) -> int:
        return len(self.ops)

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} of {self.model_type}: {len(self.ops)} ops, "
            f"{len(self.backward_passes)} backward passes>"
        )

    @property
    def labels(self) -> tuple[str, ...]:
        """Every op label in execution order."""
        return tuple(op.label for op in self.ops)

    @property
    def modules(self) -> dict[str, list[ModuleCall]]:
        """Module address -> its calls, in first-call order."""
        table: dict[str, list[ModuleCall]] = {}
        for call in sorted(self.module_calls, key=lambda c: c.first_op):
            table.setdefault(call.address, []).append(call)
        return table

    def module(self, address: str) -> list[Op]:
        """Ops recorded inside the module at ``address`` (every call), in execution order.

        ``address`` may be spelled with the ``_orig_mod`` segments of a ``torch.compile``
        wrapper (``_orig_mod.0``, as ``named_modules()`` of the compiled model spells it) or
        without them (``0``, the trace's own spelling).
        """
        address = canonical_address(address)
        if address and address not in self.modules:
            raise OpNotFoundError(
                f"no module {address!r} ran in this trace; modules: {sorted(self.modules)[:8]}."
            )
        return [op for op in self.ops if address == "" or address in op.module_stack]

    def grad_fn_of(self, label: str) -> Any:
        """The ``grad_fn`` recorded for ``label`` (None when it had none or was not kept)."""
        return self._grad_fns.get(self[label].label)

    # ----- backward ----------------------------------------------------------------------
    def backward(
        self,
        loss: torch.Tensor,
        *,
        gradient: torch.Tensor | None = None,
        retain_graph: bool = False,
    ) -> BackwardPass:
        """Run ``loss.backward()`` while logging grad_fn fires (and gradients with save_grads).

        Accumulates ``.grad`` on leaves exactly like ``loss.backward()``. Hooks are installed on
        the graph's nodes for the duration of the call only and removed also when it raises.

        Raises:
            BackwardError: the trace was captured without ``backward_ready``/``save_grads``,
                ``loss`` has no graph, or autograd failed (e.g. a second backward without
                ``retain_graph=True``).
        """
        if not self.options.backward_ready:
            raise BackwardError(
                "this trace was captured without backward support; capture with "
                "capture=tl.options.CaptureOptions(save_grads=True) (or backward_ready=True)."
            )
        if not isinstance(loss, torch.Tensor) or loss.grad_fn is None:
            raise BackwardError(
                f"loss must be a tensor with a grad_fn (computed from the trace's outputs), got "
                f"{type(loss).__name__}{' without grad_fn' if isinstance(loss, torch.Tensor) else ''}."
            )
        record = log_backward(
            self,
            loss,
            gradient=gradient,
            retain_graph=retain_graph,
            save_grads=self.options.save_grads,
            index=len(self.backward_passes),
        )
        self.backward_passes.append(record)
        for op in self.ops:
            op.grads.append(record.op_grads.get(op.label))
        return record

    # ----- analyses provided by tl.debug ------------------------------------------------------
    # The spec spells these two analyses as Trace methods. They live in tl.debug, which capture
    # may not import at import time; each method imports its analysis when called (the layering
    # exception recorded in tests/test_layering.py).
    def find_nan(self) -> FindNanReport:
        """Scan saved outputs for the first non-finite value: ``tl.debug.find_nan_in_trace``."""
        from ..debug.nonfinite import find_nan_in_trace

        return find_nan_in_trace(self)

    def audit(self) -> HealthReport:
        """Run every trace-local health diagnostic in one report (``debug/audit/``)."""
        from ..debug.audit import audit

        return audit(self)


class PartialTrace(Trace):
    """The ops recorded before the forward raised, plus that exception (``exception``)."""

    is_partial = True

    def __init__(self, *args: Any, exception: BaseException, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.exception = exception
        """The exception the model's forward raised."""
