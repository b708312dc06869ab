"""GradFnSketch as a report: frozen plain data, bounded card, JSON payload, DOT lowering."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

import torchlens_nb as tl
from torchlens_nb.report import STRUCTURE_ONLY_LEGEND, GradFnSketch


@pytest.fixture
def mlp_sketch(mlp) -> GradFnSketch:
    return tl.debug.walk_grad_fn(mlp(torch.randn(2, 8)).sum(), model=mlp)


def test_card_states_counts_and_the_structure_only_legend(mlp_sketch: GradFnSketch) -> None:
    lines = mlp_sketch.card().splitlines()
    assert lines[:2] == [
        "grad_fn [complete] 1 output, shape (): 10 autograd nodes (4 leaves), 9 edges, "
        "2 module groups",
        f"  note: {STRUCTURE_ONLY_LEGEND}",
    ]
    assert lines[-1] == (
        "  next: tl.debug.sketch_grad_fn(outputs, 'grad_fn', file_format='svg', model=model)"
    )


def test_card_stays_bounded_on_a_big_truncated_graph(gpt2_and_loss) -> None:
    model, loss = gpt2_and_loss
    sketch = tl.debug.walk_grad_fn(loss, model=model, max_nodes=20)
    card = sketch.card()

    assert len(card.splitlines()) <= 10 and max(len(line) for line in card.splitlines()) <= 240
    assert "TRUNCATED at max_nodes=20" in card.splitlines()[0]


def test_payload_is_strict_json_and_carries_the_whole_graph(mlp_sketch: GradFnSketch) -> None:
    payload = json.loads(json.dumps(mlp_sketch.to_dict(), allow_nan=False))
    data = payload["data"]

    assert payload["report_type"] == "grad_fn" and payload["status"] == "complete"
    assert data["legend"] == STRUCTURE_ONLY_LEGEND
    assert len(data["node_rows"]) == 10 and len(data["edges"]) == 9
    assert data["node_columns"][:4] == ["id", "name", "kind", "group"]
    assert data["node_rows"][1][:4] == [1, "AddmmBackward0", "op", "2"]
    assert data["node_rows"][1][8] == [["mat1", [2, 16], "ok"], ["mat2", [16, 4], "ok"]]
    assert data["groups"][0] == {
        "address": "0",
        "parent": "",
        "type_name": "Linear",
        "num_nodes": 4,
    }


def test_payload_survives_non_finite_values_in_the_walked_tensors() -> None:
    x = torch.tensor([float("nan"), float("inf")], requires_grad=True)
    sketch = tl.debug.walk_grad_fn((x * 2).sum(), params={"x": x})

    text = json.dumps(sketch.to_dict(), allow_nan=False)
    assert "$float" not in text  # no tensor value is ever read, so none reaches the payload
    assert sketch.nodes[-1].shapes == ((2,),)


def test_the_sketch_is_frozen_plain_data(mlp_sketch: GradFnSketch) -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        mlp_sketch.truncated = True  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        mlp_sketch.nodes[0].group = "x"  # type: ignore[misc]
    assert dataclasses.replace(mlp_sketch) == mlp_sketch  # equality is by value


def test_to_pandas_gives_the_nodes_and_edges_tables(mlp_sketch: GradFnSketch) -> None:
    nodes = mlp_sketch.to_pandas("nodes")
    edges = mlp_sketch.to_pandas("edges")

    assert list(nodes.columns) == [
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
    ]
    assert nodes.loc[9, "param_name"] == "0.weight" and nodes.loc[9, "shapes"] == ((16, 8),)
    assert list(edges.columns) == ["src", "dst", "slot", "output_nr"]
    assert edges.attrs["direction"] == "forward (src -> dst)"


def test_node_lookup_refuses_an_unknown_id(mlp_sketch: GradFnSketch) -> None:
    assert mlp_sketch.node(9).param_name == "0.weight"
    with pytest.raises(tl.errors.ReportOptionError, match=r"no node 10; this sketch has ids 0..9"):
        mlp_sketch.node(10)


def test_dot_has_forward_edges_nested_clusters_and_the_legend(gpt2_and_loss) -> None:
    model, loss = gpt2_and_loss
    dot = tl.debug.walk_grad_fn(loss, model=model).to_dot()
    lines = [line.strip() for line in dot.splitlines()]

    assert lines[0] == "digraph grad_fn {"
    assert STRUCTURE_ONLY_LEGEND in lines[1]
    attn = lines.index('subgraph "cluster_transformer.h.0.attn" {')
    block = lines.index('subgraph "cluster_transformer.h.0" {')
    assert block < attn  # the attention cluster sits inside the block's cluster
    assert "n0 -> o0;" in lines and "n1 -> n0;" in lines  # producer -> consumer


def test_dot_marks_truncation_and_escapes_names(mlp) -> None:
    loss = mlp(torch.randn(2, 8)).sum()
    dot = tl.debug.walk_grad_fn(loss, params={'say "hi"\\': mlp[2].bias}, max_nodes=4).to_dot()

    assert "TRUNCATED at max_nodes=4" in dot
    assert 'n2 [label="say \\"hi\\"\\\\\\n(4)" fillcolor=lightblue];' in dot
    assert 'n1 [label="AddmmBackward0" fillcolor=lightgrey style="filled,dashed"];' in dot


def test_flat_dot_has_no_clusters(mlp_sketch: GradFnSketch) -> None:
    assert "subgraph" not in mlp_sketch.to_dot(clusters=False)
    assert mlp_sketch.to_dot().count("subgraph") == 2
