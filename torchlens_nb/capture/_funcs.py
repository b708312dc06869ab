"""What the per-op path needs to know about a torch function, computed once per function.

``func_info(func)`` answers three questions with one dict lookup on the hot path: the normalised
op name (``__add__`` -> ``add``), whether a call is never recorded (bookkeeping such as
``requires_grad_``, or a query that never returns a tensor such as ``size`` or ``x.shape``), and
whether the name alone makes it in-place (``add_``, ``__iadd__``, ``setitem``). Queries return
before the call is timed: on the 2-layer Hugging Face configs of ``tests/capture/golden_models.py``
they are 10-25% of the calls the mode sees (BERT 8 of 80, LLaMA 37 of 218, GPT-2 41 of 164).
"""

from __future__ import annotations

from typing import Any, NamedTuple

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
"""Calls that yield a tensor but are bookkeeping, not computation (by normalised name)."""

_QUERIES = frozenset(
    {
        "size",
        "dim",
        "numel",
        "nelement",
        "element_size",
        "stride",
        "storage_offset",
        "is_contiguous",
        "is_floating_point",
        "is_complex",
        "get_device",
        "item",
        "tolist",
        "__len__",
        "__bool__",
        "__index__",
        "__int__",
        "__float__",
        "__format__",
        "__repr__",
        "__hash__",
    }
)
"""Methods that never return a tensor (by raw ``__name__``: ``__bool__`` is a query, the method
``bool()`` a cast that returns one)."""

_QUERY_PROPERTIES = frozenset(
    {
        "shape",
        "dtype",
        "device",
        "ndim",
        "layout",
        "names",
        "requires_grad",
        "is_cuda",
        "is_cpu",
        "is_meta",
        "is_sparse",
        "is_quantized",
        "is_nested",
        "_version",
    }
)
"""Tensor properties whose getter never returns a tensor (``x.shape`` reaches the mode)."""

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


class FuncInfo(NamedTuple):
    """The per-function facts the recorder reads on every call."""

    name: str
    """Normalised op name (``add``, ``add_``, ``T``)."""
    is_skipped: bool
    """Never recorded: bookkeeping, or a query that returns no tensor."""
    is_inplace: bool
    """In place by name alone (``out=`` / ``inplace=True`` keyword arguments are checked per call)."""


_infos: dict[Any, FuncInfo] = {}


def func_name(func: Any) -> str:
    """Normalised op name: ``__add__`` -> ``add``, ``__iadd__`` -> ``add_``, ``T.__get__`` -> ``T``."""
    return func_info(func).name


def func_info(func: Any) -> FuncInfo:
    """The cached :class:`FuncInfo` of ``func`` (any callable the function mode is handed)."""
    info = _infos.get(func)
    if info is None:
        info = _infos[func] = _describe(func)
    return info


def _describe(func: Any) -> FuncInfo:
    raw = getattr(func, "__name__", None) or type(func).__name__
    is_query = raw in _QUERIES
    if raw == "__get__":
        raw = getattr(getattr(func, "__self__", None), "__name__", "attr")
        is_query = raw in _QUERY_PROPERTIES
    name = raw
    if raw.startswith("__") and raw.endswith("__") and len(raw) > 4:
        name = raw[2:-2]
        if name.startswith("i") and name[1:] in _INPLACE_DUNDERS:
            name = name[1:] + "_"
    is_inplace = (name.endswith("_") and not name.endswith("__")) or name == "setitem"
    return FuncInfo(name, is_query or name in _SKIPPED_FUNCS, is_inplace)
