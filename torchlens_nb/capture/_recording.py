"""What a capture recorded, as raw rows, and the :class:`Op` objects built from them on demand.

The per-op path (``_recorder``) appends one flat tuple of raw facts per op (a :data:`Row`): the
torch ``Size``, ``dtype`` and ``device`` objects the output had, the producer *indices* of its
inputs, the source location. Labels (``linear_3``), parent labels, ``Op`` objects, children,
dtype and device names and the module calls' output labels are built after the forward, in
execution order, when something first asks for them (``Trace.ops``, a label lookup, a live hook
or tripwire that must see the op as it runs). Nothing here holds a tensor except the saved
values (``saved``) and the kept ``grad_fn`` objects, as before.

Measured on the 801-op chain of ``benchmarks/bench_capture.py`` (2-core CPU, CPU time, median
of per-round ratios to the plain forward, A/B in one process): building ``Op`` objects, labels
and the label table inside the forward cost about 0.5x of the plain forward; as rows the
``tl.trace`` call does none of it. Building every op afterwards (the first ``trace.ops``) costs
about 0.8x: a trace whose ops are read is cheaper than before only by the other cuts of issue
34 (3.96x against 4.21x), one whose ops are never read (dropped, or read only for its
``output``) saves all of it. A live observer (hook plan, tripwire) builds each op as it runs.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from ._op import Op

Row = tuple[Any, ...]
"""One recorded op before it is built, a plain tuple (no field names are read on the per-op
path), in this order: func name, module address, module stack, hook kind, ``(file, line,
code name)``, parent row indices (list, first occurrence order), parameter names (list), argument
metadata (list of ``(torch.Size, torch.dtype)``), the first output's ``(torch.Size, torch.dtype)``
(the very tuple the producer table holds), its ``torch.device`` (None for the CPU: reading
``is_cpu`` allocates nothing), ``requires_grad``, ``is_view``,
``is_inplace``, ``duration_ns``, ``num_outputs``, ``is_input``."""

RawCall = tuple[str, type, int, int, tuple[int, ...]]
"""A closed module call as the tracker appends it: :class:`ModuleCall` with the module's class
for its type name and the output ops as row indices."""


class ModuleCall(NamedTuple):
    """One call of a module during the forward."""

    address: str
    """Module address (``""`` for the root; ``?Type`` for a module outside the model that
    holds parameters or buffers: a stateless one is transparent, ``_modules``)."""
    type_name: str
    first_op: int
    """Index of the first op recorded inside the call."""
    last_op: int
    """One past the index of the last op recorded inside the call (its own hooks included)."""
    output_labels: tuple[str, ...]
    """Labels of the ops that produced the call's tensor outputs."""


class _Names(dict[Any, str]):
    """``str(key)`` without its ``torch.`` prefix, computed once per dtype or device."""

    def __missing__(self, key: Any) -> str:
        name = self[key] = str(key).removeprefix("torch.")
        return name


_NAMES = _Names()


class Recording:
    """The rows of one capture and the ops built from them so far (in order, never twice)."""

    def __init__(self) -> None:
        self.rows: list[Row] = []
        self.saved: dict[int, Any] = {}
        """Row index -> saved output value (a tensor, or a tuple for multi-output ops)."""
        self.grad_fns: dict[int, Any] = {}
        """Row index -> the first output's ``grad_fn`` (``backward_ready`` captures)."""
        self.calls: list[RawCall] = []
        """Closed module calls, output ops by row index."""
        self.outputs: tuple[int, ...] = ()
        """Row indices of the ops that produced the forward's outputs."""
        self.ops: list[Op] = []
        self.by_label: dict[str, Op] = {}
        self._counts: dict[str, int] = {}

    def op(self, index: int) -> Op:
        """The op of row ``index`` (built now, with every row before it, if not yet)."""
        if index >= len(self.ops):
            self.build(index + 1)
        return self.ops[index]

    def build(self, stop: int | None = None) -> list[Op]:
        """Build the ops of ``rows[:stop]`` not built yet (all rows when ``stop`` is None)."""
        ops, rows, by_label, counts = self.ops, self.rows, self.by_label, self._counts
        saved, grad_fns, names = self.saved, self.grad_fns, _NAMES
        for index in range(len(ops), len(rows) if stop is None else stop):
            (func, module, stack, hook_kind, (file, line, code_name), parents, params, meta,
             (shape, dtype), device, requires_grad, is_view, inplace, duration, num_outputs,
             is_input) = rows[index]  # fmt: skip
            count = counts.get(func, 0) + 1
            label = f"{func}_{count}"
            op = Op(
                label, index, func, module, stack, file, line, code_name,
                tuple([ops[parent].label for parent in parents]), tuple(params),
                tuple([(tuple(size), names[kind]) for size, kind in meta]),
                tuple(shape), names[dtype], "cpu" if device is None else names[device],
                requires_grad, is_view, inplace, duration, num_outputs, hook_kind, is_input,
            )  # fmt: skip
            if index in saved:
                op.out = saved[index]
                op.has_saved = True
            if index in grad_fns:
                op.grad_fn_name = type(grad_fns[index]).__name__
            # committed at once: no signal check runs between these stores and the append's
            # return, so an interrupt leaves the row built or not, never half counted
            counts[func] = count
            by_label[label] = op
            ops.append(op)
        return ops

    def replace_saved(self, index: int, value: Any) -> None:
        """Make ``value`` the saved output of row ``index`` (copy on write), built or not."""
        self.saved[index] = value
        if index < len(self.ops):
            self.ops[index].out = value

    def module_calls(self) -> list[ModuleCall]:
        """The module calls with their output ops' labels (builds every op)."""
        ops = self.build()
        return [
            ModuleCall(address, kind.__name__, first, last, tuple(ops[i].label for i in outputs))
            for address, kind, first, last, outputs in self.calls
        ]
