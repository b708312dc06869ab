"""One recorded operation of a captured forward pass (``trace["relu_1"]``)."""

from __future__ import annotations

import linecache
from typing import Any, Literal

HookKind = Literal["forward_pre_hook", "forward_hook"]
"""Which of a module's own hooks an op ran in (``Op.hook_kind``)."""


class Op:
    """A tensor-producing torch call, in execution order.

    Attributes are plain data, except ``out`` (the saved output value, or None when the ``save``
    selector skipped this op) and the per-backward gradients in ``grads``. Slots keep the record
    small: a GPT-2 small trace holds about 1,000 of them. The recorder fills every recorded fact
    through the constructor in one call (the per-op path of ``capture/_recorder.py``).
    """

    __slots__ = (
        "__weakref__",
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
        "hook_kind",
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

    def __init__(
        self,
        label: str,
        index: int,
        func: str,
        module: str = "",
        module_stack: tuple[str, ...] = (),
        file: str | None = None,
        line: int | None = None,
        code_name: str | None = None,
        parents: tuple[str, ...] = (),
        param_names: tuple[str, ...] = (),
        arg_meta: tuple[tuple[tuple[int, ...], str], ...] = (),
        shape: tuple[int, ...] | None = None,
        dtype: str | None = None,
        device: str | None = None,
        requires_grad: bool = False,
        is_view: bool = False,
        is_inplace: bool = False,
        duration_ns: int = 0,
        num_outputs: int = 1,
        hook_kind: HookKind | None = None,
        is_input: bool = False,
    ) -> None:
        self.label = label
        """Unique readable label, ``{func}_{n}`` with n counting calls of ``func`` from 1."""
        self.index = index
        """Position in execution order (0-based)."""
        self.func = func
        """Normalised function name: ``linear``, ``add`` (for ``+``), ``add_`` (in place);
        ``jit_module`` for a TorchScript module call, ``vmap`` for a ``torch.vmap`` call (each
        one op, see ``Trace.blind_spots``)."""
        self.module = module
        """Innermost module address (``""`` when the op ran in the root module's forward)."""
        self.module_stack = module_stack
        """Addresses of every module the op ran inside, outermost first (root excluded)."""
        self.file = file
        """User source file: the first frame outside torch and torchlens_nb."""
        self.line = line
        self.code_name = code_name
        """Function name of that frame (e.g. ``forward``)."""
        self.parents = parents
        """Labels of the ops whose outputs this op consumed, in argument order."""
        self.param_names = param_names
        """Qualified names of the parameters/buffers among the arguments (for a ``jit_module``
        op: the parameters and buffers of that module)."""
        self.arg_meta = arg_meta
        """``(shape, dtype)`` of every tensor argument, in argument order."""
        self.shape = shape
        """Shape of the (first) tensor output."""
        self.dtype = dtype
        self.device = device
        self.requires_grad = requires_grad
        self.is_view = is_view
        self.is_inplace = is_inplace
        self.duration_ns = duration_ns
        """Wall time of the call itself (CPU dispatch time on accelerators)."""
        self.num_outputs = num_outputs
        self.hook_kind = hook_kind
        """``"forward_pre_hook"`` / ``"forward_hook"`` when the op ran inside one of ``module``'s
        own hooks (``register_forward_pre_hook`` / ``register_forward_hook``), else None."""
        self.is_input = is_input
        self.is_output = False
        self.children: tuple[str, ...] = ()
        self.out: Any = None
        """The saved output value (a tensor, or a tuple for multi-output ops), or None."""
        self.has_saved = False
        self.grads: list[Any] = []
        """Gradient w.r.t. the output, one entry per logged backward (None where not reached)."""
        self.grad_fn_name: str | None = None

    @property
    def in_hook(self) -> bool:
        """True when the op ran inside one of its module's own forward (pre-)hooks."""
        return self.hook_kind is not None

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
