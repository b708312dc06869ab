"""``GradFnReport`` (the spec's ``GradFnSketch``): the autograd graph of a tensor, as structure only.

The sketch is what ``tl.debug.walk_grad_fn`` read from ``tensor.grad_fn`` and
``next_functions``: one node per autograd node (``AccumulateGrad`` nodes stand for the leaf
tensors they feed), edges in the FORWARD direction (producer -> consumer), module groups when
parameter names were known, and saved-tensor SHAPES. It holds no tensor, no value and no timing,
and it verifies nothing: every view carries :data:`STRUCTURE_ONLY_LEGEND`.

Views: ``card()``; ``to_pandas("nodes")`` / ``to_pandas("edges")``; ``to_dot()`` (the DOT source
``tl.debug.sketch_grad_fn`` renders); the ``grad_fn`` panel, which lays out folded groups
first and unfolds on demand.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from ..errors import ReportOptionError
from ._base import PAYLOAD_EXCLUDED, Finding, Report, Table, payload_as
from ._status import tones

STRUCTURE_ONLY_LEGEND = (
    "STRUCTURE-ONLY: read from grad_fn/next_functions; no values, no timing, no verification."
)
"""Shown on every render of a sketch (card, DOT label, panel)."""

NodeKind = Literal["op", "leaf"]
SavedStatus = Literal["ok", "freed", "hooked"]

LAYOUT_MAX_UNITS = 1500
"""Most boxes + nodes the panel lays out at once. Its JS layout (dagre) took 1.0-1.5 s for
1,626 units (24-layer GPT-2 fully unfolded) and overflowed the browser's call stack at 2,850
(48 layers); benchmarks/bench_grad_fn.py measures it."""
LAYOUT_INITIAL_UNITS = 150
"""The panel opens at the deepest fold level that shows at most this many boxes and nodes
(GPT-2 small's loss: 66, one box per block; chromium paints it 80-110 ms after render)."""

NODE_COLUMNS = (
    "id",
    "name",
    "kind",
    "group",
    "param_name",
    "aliases",
    "shapes",
    "dtype",
    "saved",
    "is_cut",
)
EDGE_COLUMNS = ("src", "dst", "slot", "output_nr")


@dataclass(frozen=True)
class SavedShape:
    """One tensor an autograd node saved for backward: its shape only, never its values."""

    name: str
    """The saved slot without its ``_saved_`` prefix, e.g. ``"mat2"``; list items get an index,
    e.g. ``"indices[0]"``."""
    shape: tuple[int, ...] | None
    """The shape, or None when ``status`` is not ``"ok"``."""
    status: SavedStatus
    """``ok``; ``freed`` (backward already released it and autograd kept no sizes);
    ``hooked`` (a saved-tensor unpack hook is registered, e.g. activation checkpointing or
    offloading: reading it would run that hook, so it is not read)."""


@dataclass(frozen=True)
class GradFnNode:
    """One autograd node."""

    id: int
    """Position in breadth-first order from the outputs (0 is the first output's grad_fn)."""
    name: str
    """The node type, e.g. ``"AddmmBackward0"``; ``"AccumulateGrad"`` for a leaf tensor."""
    kind: NodeKind
    """``leaf`` for ``AccumulateGrad`` (a tensor that collects ``.grad``), else ``op``."""
    group: str
    """Address of the module the node was inferred to come from; ``""`` when not inferred."""
    param_name: str | None = None
    """Name of the leaf tensor (``params`` first, then ``model.named_parameters()``)."""
    aliases: tuple[str, ...] = ()
    """Other names of the same leaf tensor (tied weights), in discovery order."""
    shapes: tuple[tuple[int, ...], ...] = ()
    """Leaf: the tensor's shape. Op: the shape of each forward output (autograd input metadata)."""
    dtype: str | None = None
    """dtype of the first forward output (or of the leaf), e.g. ``"float32"``."""
    saved: tuple[SavedShape, ...] = ()
    """Tensors saved for backward, shapes only."""
    is_cut: bool = False
    """True when some inputs of this node were not walked because ``max_nodes`` was reached."""

    @property
    def label(self) -> str:
        """What renders show: the parameter name for named leaves, else the node type."""
        return self.param_name or self.name


@dataclass(frozen=True)
class GradFnEdge:
    """A forward-direction edge: ``src`` produced a tensor that ``dst`` consumed."""

    src: int
    """``id`` of the node that produced the tensor."""
    dst: int
    """``id`` of the node that consumed it."""
    slot: int
    """Index in ``dst``'s ``next_functions`` (which forward input of ``dst``)."""
    output_nr: int
    """Which forward output of ``src`` it was (autograd's ``input_nr``)."""


@dataclass(frozen=True)
class GradFnGroup:
    """A module address that owns nodes; groups nest by address (``a.b`` is inside ``a``)."""

    address: str
    """The module address (e.g. ``transformer.h.0.attn``)."""
    parent: str
    """Enclosing group address, ``""`` at top level."""
    type_name: str | None
    """Class name of the module when a model was given, e.g. ``"GPT2Attention"``."""
    num_nodes: int
    """Nodes in this group and every group nested inside it."""


@dataclass(frozen=True)
class GradFnOutput:
    """One walked output tensor and the node that produced it."""

    index: int
    """Position of the tensor among the walked outputs."""
    node: int
    """``id`` of the node that produced it (its ``grad_fn``)."""
    shape: tuple[int, ...]
    """The tensor's shape."""
    dtype: str
    """The tensor's dtype, e.g. ``float32``."""


@dataclass(frozen=True)
class LayoutBudget:
    """The panel's layout budget, in layout units (see :data:`LAYOUT_MAX_UNITS`)."""

    max_units: int
    initial_units: int


@dataclass(frozen=True, kw_only=True, repr=False)
class GradFnReport(Report):
    """The autograd graph of one or more tensors; nodes and edges are also the tables.

    The spec calls it ``GradFnSketch``; that name is kept as an alias.
    """

    report_type = "grad_fn"
    status_tones = tones({"complete": "findings", "truncated": "warning"})
    payload_properties = ("legend", "num_nodes", "num_edges", "node_columns", "node_rows", "layout")
    status: Literal["complete", "truncated"]
    """``complete``: every node was walked (its tone is its findings': unreached parameters warn)."""
    nodes: tuple[GradFnNode, ...] = field(default=(), metadata=PAYLOAD_EXCLUDED)
    """Every node (they travel as ``node_rows``, one row per node in ``node_columns`` order)."""
    edges: tuple[GradFnEdge, ...] = field(default=(), metadata=payload_as("edge_pairs"))
    """Every edge, in forward direction (they travel as ``edge_pairs``)."""
    groups: tuple[GradFnGroup, ...] = ()
    """Every group, parents before children."""
    outputs: tuple[GradFnOutput, ...] = ()
    """The walked tensors, each with the node that produced it."""
    truncated: bool = False
    """True exactly when the graph has more nodes than ``max_nodes``."""
    max_nodes: int = 0
    """The walk's node cap (``max_nodes=``; 20,000 by default)."""

    def __post_init__(self) -> None:
        if not self.tables:
            object.__setattr__(self, "tables", grad_fn_tables(self.nodes, self.edges))
        super().__post_init__()

    def node(self, node_id: int) -> GradFnNode:
        """The node with ``node_id`` (ids are positions in ``nodes``)."""
        if not 0 <= node_id < len(self.nodes):
            raise ReportOptionError(
                f"no node {node_id}; this sketch has ids 0..{len(self.nodes) - 1}."
            )
        return self.nodes[node_id]

    # The panel needs every node and edge; tables reach it cut to a page (and may be replaced
    # by a cut copy), so the graph travels in the payload too.
    @property
    def legend(self) -> str:
        return STRUCTURE_ONLY_LEGEND

    @property
    def num_nodes(self) -> int:
        return len(self.nodes)

    @property
    def num_edges(self) -> int:
        return len(self.edges)

    @property
    def node_columns(self) -> tuple[str, ...]:
        return NODE_COLUMNS

    @property
    def node_rows(self) -> tuple[tuple[Any, ...], ...]:
        return tuple(_node_row(n) for n in self.nodes)

    @property
    def edge_pairs(self) -> tuple[tuple[int, int], ...]:
        """``(src, dst)`` node ids of every edge."""
        return tuple((e.src, e.dst) for e in self.edges)

    @property
    def layout(self) -> LayoutBudget:
        return LayoutBudget(LAYOUT_MAX_UNITS, LAYOUT_INITIAL_UNITS)

    def to_dot(self, *, clusters: bool = True) -> str:
        """DOT source of the sketch (forward edges, leaves named, groups as nested clusters)."""
        return dot_source(self, clusters=clusters)


GradFnSketch = GradFnReport
"""The spec's name of :class:`GradFnReport` (``tl.debug.walk_grad_fn`` returns one)."""


def grad_fn_tables(
    nodes: tuple[GradFnNode, ...], edges: tuple[GradFnEdge, ...]
) -> tuple[Table, Table]:
    """The ``nodes`` and ``edges`` tables (saved shapes as ``(name, shape, status)`` triples)."""
    node_rows = tuple(_node_row(n) for n in nodes)
    edge_rows = tuple((e.src, e.dst, e.slot, e.output_nr) for e in edges)
    return (
        Table("nodes", NODE_COLUMNS, node_rows, {"legend": STRUCTURE_ONLY_LEGEND}),
        Table("edges", EDGE_COLUMNS, edge_rows, {"direction": "forward (src -> dst)"}),
    )


def _node_row(n: GradFnNode) -> tuple[Any, ...]:
    return (
        n.id,
        n.name,
        n.kind,
        n.group,
        n.param_name,
        n.aliases,
        n.shapes,
        n.dtype,
        tuple((s.name, s.shape, s.status) for s in n.saved),
        n.is_cut,
    )


UNREACHED_NAMES_SHOWN = 5
"""The message names this many unreached parameters; ``fields["names"]`` holds them all."""


def sketch_findings(
    nodes: tuple[GradFnNode, ...],
    *,
    truncated: bool,
    max_nodes: int,
    unreached: tuple[str, ...] = (),
) -> tuple[Finding, ...]:
    """Facts a reader needs before trusting the picture: truncation, unreadable saved tensors,
    and the trainable parameters of the model that are not leaves of the graph."""
    findings = []
    if unreached:
        shown = ", ".join(unreached[:UNREACHED_NAMES_SHOWN])
        more = len(unreached) - UNREACHED_NAMES_SHOWN
        findings.append(
            Finding(
                "grad_fn_unreached_parameters",
                "info",
                f"{len(unreached)} trainable parameter{'s' if len(unreached) != 1 else ''} of the "
                f"model {'are' if len(unreached) != 1 else 'is'} not in this graph, so these outputs "
                f"give {'them' if len(unreached) != 1 else 'it'} no gradient: {shown}"
                + (f" and {more} more" if more > 0 else "")
                + ".",
                remedy="if they should learn from these outputs, look for .detach(), torch.no_grad() "
                "or a cache on their path; if not, freeze them (requires_grad_(False)).",
                fields={"names": list(unreached)},
            )
        )
    if truncated:
        cut = sum(n.is_cut for n in nodes)
        findings.append(
            Finding(
                "grad_fn_truncated",
                "warning",
                f"the walk stopped at max_nodes={max_nodes}; {cut} nodes have inputs not shown.",
                remedy="pass a larger max_nodes to walk the whole graph.",
                fields={"max_nodes": max_nodes, "num_cut": cut},
            )
        )
    for status, message, remedy in (
        (
            "freed",
            "saved tensors were already freed by backward, so their shapes are not shown",
            "walk before calling backward, or call backward(retain_graph=True).",
        ),
        (
            "hooked",
            "saved tensors sit behind saved-tensor hooks (checkpointing or offloading) "
            "and were not unpacked",
            None,
        ),
    ):
        count = sum(s.status == status for n in nodes for s in n.saved)
        if count:
            findings.append(
                Finding(
                    f"grad_fn_saved_{status}",
                    "info",
                    f"{count} {message}.",
                    remedy=remedy,
                    fields={"num_saved": count},
                )
            )
    return tuple(findings)


# ----- DOT lowering ---------------------------------------------------------------------------
_FILL = {"op": "lightgrey", "leaf": "lightblue", "output": "darkolivegreen1"}


def dot_source(sketch: GradFnReport, *, clusters: bool = True) -> str:
    """Build the DOT text of ``sketch``: one statement per line, deterministic order."""
    legend = STRUCTURE_ONLY_LEGEND
    if sketch.truncated:
        legend += (
            f"\\nTRUNCATED at max_nodes={sketch.max_nodes}: dashed nodes have inputs not shown."
        )
    lines = [
        "digraph grad_fn {",
        f'  graph [label="{legend}" labelloc=t fontsize=12 fontname="Helvetica"];',
        '  node [shape=box style=filled fontsize=10 fontname="Helvetica" height=0.2];',
    ]
    by_group: dict[str, list[GradFnNode]] = {}
    for node in sketch.nodes:
        by_group.setdefault(node.group if clusters else "", []).append(node)
    children: dict[str, list[str]] = {}
    for group in sketch.groups:
        children.setdefault(group.parent, []).append(group.address)
    lines.extend(_cluster_lines("", by_group, children if clusters else {}, indent=1))
    for out in sketch.outputs:
        lines.append(
            f'  o{out.index} [label="{_esc(f"output {out.index}")}\\n{_shape(out.shape)}"'
            f" fillcolor={_FILL['output']}];"
        )
        lines.append(f"  n{out.node} -> o{out.index};")
    lines.extend(f"  n{e.src} -> n{e.dst};" for e in sketch.edges)
    lines.append("}")
    return "\n".join(lines) + "\n"


def _cluster_lines(
    address: str, by_group: dict[str, list[GradFnNode]], children: dict[str, list[str]], indent: int
) -> list[str]:
    pad = "  " * indent
    lines = [pad + _node_statement(node) for node in by_group.get(address, ())]
    for child in children.get(address, ()):
        inner = _cluster_lines(child, by_group, children, indent + 1)
        lines.append(f'{pad}subgraph "cluster_{_esc(child)}" {{')
        lines.append(f'{pad}  label="{_esc(child)}"; style=rounded; fontsize=10;')
        lines.extend(inner)
        lines.append(pad + "}")
    return lines


def _node_statement(node: GradFnNode) -> str:
    text = _esc(node.label)
    if node.kind == "leaf" and node.shapes:
        text += "\\n" + _shape(node.shapes[0])
    style = ' style="filled,dashed"' if node.is_cut else ""
    return f'n{node.id} [label="{text}" fillcolor={_FILL[node.kind]}{style}];'


def _shape(shape: tuple[int, ...]) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ")"


def _esc(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
