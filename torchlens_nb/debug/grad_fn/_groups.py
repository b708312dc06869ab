"""Module groups of an autograd graph, inferred without running the model.

An autograd node does not record which module created it, so ``walk_grad_fn`` infers it from
two facts autograd does keep: which leaf tensors (parameters, by name) an op consumed, and the
order in which forward created the nodes (``Node._sequence_nr()``, a per-thread counter).

The rule, in three steps:

1. A named leaf belongs to the module that owns it (``h.0.attn.c_attn.weight`` ->
   ``h.0.attn.c_attn``); a tied weight with several names belongs to their deepest common module.
   A PARAMETER TRANSFORM (a single-input op such as ``TBackward0``, a view or a dtype cast, whose
   output keeps the parameter's element count) carries its parameter's modules onwards.
2. An op that consumes parameters or parameter transforms is an ANCHOR of their module when they
   all belong to one module (``AddmmBackward0`` of a Linear, ``EmbeddingBackward0``). When they
   belong to several (a tied embedding used as the LM head), the op goes to their deepest common
   module and is not an anchor.
3. Every other op (no parameter input: views, activations, attention matmuls, residual adds)
   goes to the deepest common module of the nearest anchors created before and after it. An op
   before the first or after the last anchor stays at top level (``""``).

Why step 3 is sound: a module's forward runs as one contiguous stretch of node creation, and
the one call of the deepest common module of two anchors contains both anchors' calls, so an op
created between the two ran inside that call. It names a CONTAINING module, not always the
innermost one: ops of parameter-free submodules (Dropout,
activation modules) land in their parent. Limits, each a broken assumption of the argument:
a module whose forward runs more than once per graph (weight sharing across calls, recurrent
loops), a parameter used outside its owner's forward (``F.linear(x, self.other.weight)``), and
graphs built on several threads (separate counters). In those cases an op may sit in a group
whose call did not contain it; the grouping is a reading aid, never a verified fact, which is
why the sketch's disclosures say it is inferred.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ...report._grad_fn import GradFnGroup


@dataclass(frozen=True)
class GroupInput:
    """What the grouping needs to know about one walked node."""

    sequence_nr: int | None
    is_leaf: bool
    names: tuple[str, ...]
    """Names of a leaf tensor (empty for ops and unnamed leaves)."""
    producers: tuple[int, ...]
    """Indices of the walked nodes this node consumed."""
    num_slots: int
    """Length of ``next_functions`` (inputs that do not require grad count too)."""
    numel: int | None
    """Element count of the (first) forward output, or of the leaf; None when unknown."""


def infer_groups(
    items: Sequence[GroupInput], module_types: Mapping[str, str]
) -> tuple[tuple[GradFnGroup, ...], list[str]]:
    """Return every group (parents first) and the group address of each node (``""`` = none)."""
    if not any(item.names for item in items):
        return (), [""] * len(items)
    candidates = _parameter_modules(items)
    node_groups = [""] * len(items)
    anchors: list[tuple[int, str]] = []
    for index, item in enumerate(items):
        owners = candidates[index]
        if item.is_leaf:
            node_groups[index] = common_module(owners) if owners else ""
        elif len(owners) == 1:
            (node_groups[index],) = owners
            if item.sequence_nr is not None:
                anchors.append((item.sequence_nr, node_groups[index]))
        elif owners:
            node_groups[index] = common_module(owners)
    anchors.sort()
    order = [seq for seq, _ in anchors]
    for index, item in enumerate(items):
        if item.is_leaf or candidates[index] or item.sequence_nr is None:
            continue
        position = bisect.bisect_left(order, item.sequence_nr)
        if 0 < position < len(anchors):
            node_groups[index] = common_module((anchors[position - 1][1], anchors[position][1]))
    return _group_records(node_groups, module_types), node_groups


def _parameter_modules(items: Sequence[GroupInput]) -> list[frozenset[str]]:
    """Per node: the modules owning the parameters it consumes, directly or through transforms.

    Nodes are visited producers-first (Kahn's order) so a transform's modules are known before
    its consumers read them. Requiring the element count to stay the parameter's keeps data ops
    out: ``EmbeddingBackward0`` has one input slot (the ids are not differentiable) but its output
    is batch x sequence x width, not the table's size, so what follows an embedding is not
    mistaken for a transform of the table.
    """
    consumers: list[list[int]] = [[] for _ in items]
    waiting = [len(item.producers) for item in items]
    for index, item in enumerate(items):
        for producer in item.producers:
            consumers[producer].append(index)
    owners: list[frozenset[str]] = [frozenset()] * len(items)
    carries: list[int | None] = [None] * len(items)  # param element count a node passes on
    ready = deque(index for index, count in enumerate(waiting) if count == 0)
    while ready:
        index = ready.popleft()
        item = items[index]
        if item.names:
            owners[index] = frozenset(_owner(name) for name in item.names)
            carries[index] = item.numel
        elif not item.is_leaf:
            sources = [p for p in item.producers if carries[p] is not None]
            owners[index] = frozenset().union(*(owners[p] for p in sources))
            if (
                item.num_slots == 1
                and len(sources) == 1
                and item.numel is not None
                and item.numel == carries[sources[0]]
            ):
                carries[index] = item.numel
        for consumer in consumers[index]:
            waiting[consumer] -= 1
            if waiting[consumer] == 0:
                ready.append(consumer)
    return owners


def _owner(name: str) -> str:
    return name.rpartition(".")[0]


def common_module(addresses: Sequence[str] | frozenset[str]) -> str:
    """Deepest address containing all ``addresses`` (``""`` is the root module)."""
    split = [address.split(".") if address else [] for address in addresses]
    prefix: list[str] = []
    for parts in zip(*split):
        if any(part != parts[0] for part in parts):
            break
        prefix.append(parts[0])
    return ".".join(prefix)


def _group_records(
    node_groups: list[str], module_types: Mapping[str, str]
) -> tuple[GradFnGroup, ...]:
    counts: dict[str, int] = {}
    for address in node_groups:
        while address:
            counts[address] = counts.get(address, 0) + 1
            address = address.rpartition(".")[0]
    return tuple(
        GradFnGroup(address, address.rpartition(".")[0], module_types.get(address), count)
        for address, count in sorted(counts.items(), key=lambda item: _address_key(item[0]))
    )


def _address_key(address: str) -> tuple[tuple[int, int, str], ...]:
    """Natural order: ``h.2`` before ``h.10``, and a parent before its children."""
    return tuple(
        (0, int(part), "") if part.isdigit() else (1, 0, part) for part in address.split(".")
    )
