"""``tl.debug.walk_grad_fn``: the autograd graph of a tensor you already have.

Capture-free: nothing is re-executed and no hook or mode is installed. The walk reads
``tensor.grad_fn``, ``next_functions``, ``AccumulateGrad.variable`` (for its shape and name),
autograd's input metadata (forward output shapes) and saved-tensor SIZES. It never reads a
value: a saved tensor's shape comes from ``_saved_<name>_sym_sizes`` when autograd keeps one,
else from the stored tensor (``SavedTensor.data``, which does not unpack), and a saved tensor
behind an unpack hook (activation checkpointing, CPU offloading) is not read at all, since
unpacking would run the hook (for checkpointing, a recomputation of the forward).

Cost (``benchmarks/bench_grad_fn.py``, 2-core CPU): the GPT-2 small loss at 1x64 tokens (822
nodes, 894 edges) walks in 14-30 ms with names, saved shapes and module groups, 0.04x of
torchviz ``make_dot`` + ``dot -Tsvg``. ``make_dot`` recurses and raises ``RecursionError`` past
about 40 GPT-2 layers; this walk is iterative (an explicit queue) and has no depth limit
(tests/grad_fn/test_walk.py walks a 3,002-node chain).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch

from ..._validate import check_int
from ...capture import validate_model
from ...errors import DiagnosticArgumentError, GradFnWalkError
from ...report import Exit
from ...report._grad_fn import (
    STRUCTURE_ONLY_LEGEND,
    GradFnEdge,
    GradFnGroup,
    GradFnNode,
    GradFnOutput,
    GradFnReport,
    SavedShape,
    sketch_findings,
)
from ._groups import GroupInput, infer_groups

if TYPE_CHECKING:
    from torch import nn

MAX_NODES_DEFAULT = 20_000
"""Defensive ceiling: a 48-layer GPT-2 loss graph has about 3,200 nodes, so 20,000 only stops
graphs nobody can read anyway (and keeps the payload of the panel under a few MB)."""

_RAW_PREFIX = "_raw_saved_"


def walk_grad_fn(
    outputs: Any,
    *,
    params: Mapping[str, torch.Tensor] | None = None,
    model: nn.Module | None = None,
    max_nodes: int = MAX_NODES_DEFAULT,
) -> GradFnReport:
    """Walk the autograd graph above ``outputs`` into a frozen, structure-only sketch.

    Args:
        outputs: a tensor with a ``grad_fn``, or a sequence of them (e.g. ``(loss, logits)``).
        params: names for leaf tensors, torchviz style (name -> tensor); wins over ``model``.
        model: gives leaf names through ``named_parameters()`` (tied weights keep every name)
            and turns on module groups.
        max_nodes: stop after this many nodes (breadth-first from the outputs, so the nodes
            nearest the outputs are kept); ``truncated`` is then set and disclosed.

    Returns:
        A :class:`~torchlens_nb.report.GradFnReport`: nodes in breadth-first order, forward
        edges (producer -> consumer), groups, outputs, ``truncated``.

    Raises:
        GradFnWalkError: an output is not a tensor, or has no graph (a leaf, or computed under
            ``torch.no_grad()`` / from inputs that do not require grad); the message says which.
        DiagnosticArgumentError: ``max_nodes < 1`` or ``params`` is not a name -> tensor mapping.
        ModelTypeError: ``model`` is not an ``nn.Module``.

    Example::

        >>> import torch, torchlens_nb as tl
        >>> from torch import nn
        >>> net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
        >>> loss = net(torch.randn(2, 8)).sum()
        >>> sketch = tl.debug.walk_grad_fn(loss, model=net)
        >>> [n.label for n in sketch.nodes][:4]
        ['SumBackward0', 'AddmmBackward0', '2.bias', 'ReluBackward0']
        >>> sorted(g.address for g in sketch.groups)
        ['0', '2']
    """
    roots = _roots(outputs)
    check_int("max_nodes", max_nodes, low=1, hint=f"the default is {MAX_NODES_DEFAULT}")
    num_roots = len({id(t.grad_fn) for _, t in roots})
    if max_nodes < num_roots:
        raise DiagnosticArgumentError(
            f"max_nodes={max_nodes} cannot hold the {num_roots} distinct grad_fns of the outputs; "
            f"pass max_nodes >= {num_roots}."
        )
    names, types = _leaf_names(params, model)
    walked, producers, edges, truncated = _walk(roots, max_nodes)
    group_inputs = [_group_input(fn, inputs, names) for fn, inputs in zip(walked, producers)]
    groups, node_groups = infer_groups(group_inputs, types)
    nodes = tuple(
        _node(
            index,
            fn,
            node_groups[index],
            group_inputs[index].names,
            truncated and len(producers[index]) < _num_inputs(fn),
        )
        for index, fn in enumerate(walked)
    )
    ids = {fn: index for index, fn in enumerate(walked)}
    outs = tuple(GradFnOutput(i, ids[t.grad_fn], tuple(t.shape), _dtype(t.dtype)) for i, t in roots)
    unreached = () if model is None or truncated else _unreached(model, walked)
    return _sketch(
        nodes,
        tuple(edges),
        groups,
        outs,
        truncated=truncated,
        max_nodes=max_nodes,
        unreached=unreached,
    )


def _unreached(model: nn.Module, walked: list[Any]) -> tuple[str, ...]:
    """Names of trainable parameters that are no leaf of the walked graph (frozen ones are
    expected to be absent). Only meaningful for a complete walk."""
    leaves = {id(fn.variable) for fn in walked if hasattr(fn, "variable")}
    return tuple(
        name for name, p in model.named_parameters() if p.requires_grad and id(p) not in leaves
    )


def _sketch(
    nodes: tuple[GradFnNode, ...],
    edges: tuple[GradFnEdge, ...],
    groups: tuple[GradFnGroup, ...],
    outs: tuple[GradFnOutput, ...],
    *,
    truncated: bool,
    max_nodes: int,
    unreached: tuple[str, ...],
) -> GradFnReport:
    shapes = ", ".join(_shape_text(o.shape) for o in outs[:3]) + (", ..." if len(outs) > 3 else "")
    subject = (
        f"1 output, shape {shapes}" if len(outs) == 1 else f"{len(outs)} outputs, shapes {shapes}"
    )
    num_leaves = sum(n.kind == "leaf" for n in nodes)
    lead = (
        f"{len(nodes)} autograd nodes ({num_leaves} leaves), {len(edges)} edges, "
        f"{len(groups)} module groups"
        + (f"; TRUNCATED at max_nodes={max_nodes}" if truncated else "")
    )
    disclosures = [STRUCTURE_ONLY_LEGEND]
    if groups:
        disclosures.append(
            "module groups are inferred from parameter use and forward order; "
            "ops of parameter-free submodules (Dropout, activations) sit in "
            "their parent."
        )
    return GradFnReport(
        subject=subject,
        status="truncated" if truncated else "complete",
        lead=lead,
        findings=sketch_findings(
            nodes, truncated=truncated, max_nodes=max_nodes, unreached=unreached
        ),
        disclosures=tuple(disclosures),
        exits=(
            Exit(
                "Render a static picture",
                "tl.debug.sketch_grad_fn(outputs, 'grad_fn', file_format='svg', model=model)",
            ),
        ),
        nodes=nodes,
        edges=edges,
        groups=groups,
        outputs=outs,
        truncated=truncated,
        max_nodes=max_nodes,
    )


def _roots(outputs: Any) -> list[tuple[int, torch.Tensor]]:
    if isinstance(outputs, torch.Tensor):
        items = [outputs]
    elif isinstance(outputs, Mapping):
        keys = [
            k for k, v in outputs.items() if isinstance(v, torch.Tensor) and v.grad_fn is not None
        ]
        raise GradFnWalkError(
            f"outputs is a {type(outputs).__name__} mapping; pass its tensors instead, e.g. "
            f"outputs[{keys[0]!r}]"
            if keys
            else f"outputs is a {type(outputs).__name__} mapping with no tensor that has a grad_fn; "
            "pass a tensor computed with requires_grad inputs."
        )
    elif isinstance(outputs, Sequence) and not isinstance(outputs, (str, bytes)):
        items = list(outputs)
        if not items:
            raise GradFnWalkError("outputs is empty; pass a tensor with a grad_fn, e.g. the loss.")
    else:
        raise GradFnWalkError(
            f"outputs must be a tensor or a sequence of tensors, got {type(outputs).__name__}; "
            "pass the loss or another tensor computed from the model."
        )
    for index, item in enumerate(items):
        where = "outputs" if isinstance(outputs, torch.Tensor) else f"outputs[{index}]"
        if not isinstance(item, torch.Tensor):
            raise GradFnWalkError(
                f"{where} is a {type(item).__name__}, not a tensor; pass "
                "tensors computed from the model."
            )
        if item.grad_fn is None:
            raise GradFnWalkError(f"{where} has no autograd graph: {_why_no_graph(item)}")
    return list(enumerate(items))


def _why_no_graph(tensor: torch.Tensor) -> str:
    if tensor.requires_grad:
        return (
            "it is a leaf tensor (requires_grad=True, no grad_fn), so nothing is above it; "
            "pass a tensor computed from it, e.g. the loss."
        )
    if tensor.is_inference():
        return (
            "it was computed under torch.inference_mode(); recompute it outside "
            "inference_mode with requires_grad inputs."
        )
    return (
        "requires_grad is False: compute it with requires_grad inputs or parameters, "
        "outside torch.no_grad() (and not from a .detach()ed tensor)."
    )


def _leaf_names(
    params: Mapping[str, Any] | None, model: nn.Module | None
) -> tuple[dict[int, tuple[str, ...]], dict[str, str]]:
    """id(tensor) -> names (``params`` first), and module address -> class name."""
    names: dict[int, list[str]] = {}
    types: dict[str, str] = {}
    if params is not None:
        if not isinstance(params, Mapping):
            raise DiagnosticArgumentError(
                f"params must map names to tensors (e.g. dict(model.named_parameters())), got "
                f"{type(params).__name__}."
            )
        for name, tensor in params.items():
            if not isinstance(tensor, torch.Tensor):
                raise DiagnosticArgumentError(
                    f"params[{name!r}] is a {type(tensor).__name__}, not a tensor."
                )
            names.setdefault(id(tensor), []).append(str(name))
    if model is not None:
        validate_model(model)
        for name, tensor in model.named_parameters(remove_duplicate=False):
            known = names.setdefault(id(tensor), [])
            if name not in known:
                known.append(name)
        types = {address: type(module).__name__ for address, module in model.named_modules()}
    return {key: tuple(value) for key, value in names.items()}, types


def _walk(
    roots: list[tuple[int, torch.Tensor]], max_nodes: int
) -> tuple[list[Any], list[list[int]], list[GradFnEdge], bool]:
    """Breadth-first over ``next_functions``; returns nodes, producer ids, edges, truncated."""
    ids: dict[Any, int] = {}
    walked: list[Any] = []
    truncated = False
    queue: deque[Any] = deque()
    for _, tensor in roots:
        if tensor.grad_fn not in ids:
            ids[tensor.grad_fn] = len(walked)
            walked.append(tensor.grad_fn)
            queue.append(tensor.grad_fn)
    producers: list[list[int]] = [[] for _ in walked]
    edges: list[GradFnEdge] = []
    while queue:
        fn = queue.popleft()
        dst = ids[fn]
        for slot, (src_fn, output_nr) in enumerate(fn.next_functions):
            if src_fn is None:
                continue
            if src_fn not in ids:
                if len(walked) == max_nodes:
                    truncated = True
                    continue
                ids[src_fn] = len(walked)
                walked.append(src_fn)
                producers.append([])
                queue.append(src_fn)
            producers[dst].append(ids[src_fn])
            edges.append(GradFnEdge(ids[src_fn], dst, slot, output_nr))
    return walked, producers, edges, truncated


def _group_input(fn: Any, inputs: list[int], names: dict[int, tuple[str, ...]]) -> GroupInput:
    variable = getattr(fn, "variable", None)
    if variable is not None:
        return GroupInput(None, True, names.get(id(variable), ()), (), 0, variable.numel())
    shapes, _ = _output_meta(fn)
    numel = math.prod(shapes[0]) if shapes else None
    return GroupInput(_sequence_nr(fn), False, (), tuple(inputs), len(fn.next_functions), numel)


def _num_inputs(fn: Any) -> int:
    return sum(src is not None for src, _ in fn.next_functions)


def _node(index: int, fn: Any, group: str, names: tuple[str, ...], is_cut: bool) -> GradFnNode:
    variable = getattr(fn, "variable", None)
    if variable is not None:
        return GradFnNode(
            id=index,
            name=type(fn).__name__,
            kind="leaf",
            group=group,
            param_name=names[0] if names else None,
            aliases=names[1:],
            shapes=(tuple(variable.shape),),
            dtype=_dtype(variable.dtype),
            is_cut=is_cut,
        )
    shapes, dtype = _output_meta(fn)
    return GradFnNode(
        id=index,
        name=type(fn).__name__,
        kind="op",
        group=group,
        shapes=shapes,
        dtype=dtype,
        saved=_saved_shapes(fn),
        is_cut=is_cut,
    )


def _output_meta(fn: Any) -> tuple[tuple[tuple[int, ...], ...], str | None]:
    """Forward output shapes from autograd's input metadata (absent on some custom nodes)."""
    shapes = []
    dtype = None
    for meta in getattr(fn, "_input_metadata", ()):
        if getattr(meta, "is_nested_tensor", False):
            continue
        shapes.append(tuple(int(d) for d in meta.shape))
        dtype = dtype or _dtype(meta.dtype)
    return tuple(shapes), dtype


_SAVED_SLOTS: dict[type, tuple[tuple[str, bool], ...]] = {}


def _saved_slots(fn: Any) -> tuple[tuple[str, bool], ...]:
    """(slot name, has ``_sym_sizes``) per saved tensor slot; cached per node type."""
    kind = type(fn)
    if kind not in _SAVED_SLOTS:
        attrs = set(dir(fn))
        _SAVED_SLOTS[kind] = tuple(
            (attr[len(_RAW_PREFIX) :], f"_saved_{attr[len(_RAW_PREFIX) :]}_sym_sizes" in attrs)
            for attr in sorted(attrs)
            if attr.startswith(_RAW_PREFIX)
        )
    return _SAVED_SLOTS[kind]


def _saved_shapes(fn: Any) -> tuple[SavedShape, ...]:
    result = []
    for slot, has_sizes in _saved_slots(fn):
        if has_sizes:
            sizes = getattr(fn, f"_saved_{slot}_sym_sizes")
            result.append(SavedShape(slot, tuple(int(d) for d in sizes), "ok"))
            continue
        try:
            raw = getattr(fn, _RAW_PREFIX + slot)
        except RuntimeError:  # python Function nodes raise once backward freed their buffers
            result.append(SavedShape(slot, None, "freed"))
            continue
        if isinstance(raw, (tuple, list)):
            items: list[tuple[str, Any, str | None]] = [
                (f"{slot}[{i}]", item, None) for i, item in enumerate(raw)
            ]
        else:
            items = [(slot, raw, f"_saved_{slot}")]
        for name, item, attr in items:
            saved = _saved_one(fn, name, item, attr)
            if saved is not None:
                result.append(saved)
    return tuple(result)


def _saved_one(fn: Any, name: str, raw: Any, attr: str | None) -> SavedShape | None:
    """Shape of one saved slot; None when the slot holds no tensor (an unused optional)."""
    if raw is None:
        return None
    if raw.unpack_hook is not None:
        return SavedShape(name, None, "hooked")
    data = raw.data  # the stored tensor, without unpacking; None when empty or freed
    if data is not None:
        return SavedShape(name, tuple(int(d) for d in data.shape), "ok")
    if attr is None:
        return SavedShape(name, None, "freed")
    try:  # no hook registered, so unpacking only returns the stored tensor (or None if empty)
        value = getattr(fn, attr)
    except RuntimeError:  # "Trying to backward through the graph a second time ..."
        return SavedShape(name, None, "freed")
    return None if value is None else SavedShape(name, tuple(int(d) for d in value.shape), "ok")


def _sequence_nr(fn: Any) -> int | None:
    getter = getattr(fn, "_sequence_nr", None)
    return getter() if getter is not None else None


def _dtype(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def _shape_text(shape: tuple[int, ...]) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ")"
