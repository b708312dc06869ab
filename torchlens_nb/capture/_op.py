"""One recorded operation of a captured forward pass (``trace["relu_1"]``)."""

from __future__ import annotations

import linecache
from typing import Any


class Op:
    """A tensor-producing torch call, in execution order.

    Attributes are plain data, except ``out`` (the saved output value, or None when the ``save``
    selector skipped this op) and the per-backward gradients in ``grads``. Slots keep the record
    small: a GPT-2 small trace holds about 1,000 of them.
    """

    __slots__ = (
        "__weakref__",
        "_trace_ref",
        "arg_meta",
        "children",
        "code_name",
        "device",
        "dtype",
        "duration_ns",
        "file",
        "func",
        "grad_fn_name",
        "grads",
        "has_saved",
        "index",
        "is_inplace",
        "is_input",
        "is_output",
        "is_view",
        "label",
        "line",
        "module",
        "module_stack",
        "num_outputs",
        "out",
        "param_names",
        "parents",
        "requires_grad",
        "shape",
    )

    def __init__(self, label: str, index: int, func: str) -> None:
        self.label = label
        """Unique readable label, ``{func}_{n}`` with n counting calls of ``func`` from 1."""
        self.index = index
        """Position in execution order (0-based)."""
        self.func = func
        """Normalised function name: ``linear``, ``add`` (for ``+``), ``add_`` (in place)."""
        self.module: str = ""
        """Innermost module address (``""`` when the op ran in the root module's forward)."""
        self.module_stack: tuple[str, ...] = ()
        """Addresses of every module the op ran inside, outermost first (root excluded)."""
        self.file: str | None = None
        """User source file: the first frame outside torch and torchlens_nb."""
        self.line: int | None = None
        self.code_name: str | None = None
        """Function name of that frame (e.g. ``forward``)."""
        self.shape: tuple[int, ...] | None = None
        """Shape of the (first) tensor output."""
        self.dtype: str | None = None
        self.device: str | None = None
        self.parents: tuple[str, ...] = ()
        """Labels of the ops whose outputs this op consumed, in argument order."""
        self.children: tuple[str, ...] = ()
        self.param_names: tuple[str, ...] = ()
        """Qualified names of the parameters/buffers among the arguments."""
        self.arg_meta: tuple[tuple[tuple[int, ...], str], ...] = ()
        """``(shape, dtype)`` of every tensor argument, in argument order."""
        self.is_input = False
        self.is_output = False
        self.is_inplace = False
        self.is_view = False
        self.out: Any = None
        """The saved output value (a tensor, or a tuple for multi-output ops), or None."""
        self.has_saved = False
        self.duration_ns = 0
        """Wall time of the call itself (CPU dispatch time on accelerators)."""
        self.grads: list[Any] = []
        """Gradient w.r.t. the output, one entry per logged backward (None where not reached)."""
        self.grad_fn_name: str | None = None
        self.num_outputs = 1
        self.requires_grad = False
        self._trace_ref: Any = None

    @property
    def grad(self) -> Any:
        """Gradient from the most recent logged backward, or None."""
        return self.grads[-1] if self.grads else None

    @property
    def code(self) -> str | None:
        """Text of the source line (stripped), read lazily from ``linecache``."""
        if self.file is None or self.line is None:
            return None
        return linecache.getline(self.file, self.line).strip() or None

    @property
    def numel(self) -> int:
        """Element count of the output (0 when it has no shape)."""
        if self.shape is None:
            return 0
        count = 1
        for size in self.shape:
            count *= size
        return count

    def __repr__(self) -> str:
        where = f" in {self.module}" if self.module else ""
        return f"<Op {self.label}: {self.func}{where} -> {self.shape} {self.dtype}>"
