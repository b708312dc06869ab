"""Module groups: inferred from parameter use and forward order, nested by address."""

from __future__ import annotations

import torch
from torch import nn

import torchlens_nb as tl
from torchlens_nb.debug.grad_fn._groups import common_module


def _groups_of(sketch) -> dict[str, str]:
    return {f"{n.id}:{n.label}": n.group for n in sketch.nodes}


def test_mlp_nodes_go_to_their_linear_and_the_relu_between_stays_at_top(mlp) -> None:
    sketch = tl.debug.walk_grad_fn(mlp(torch.randn(2, 8)).sum(), model=mlp)

    assert _groups_of(sketch) == {
        "0:SumBackward0": "",
        "1:AddmmBackward0": "2",
        "2:2.bias": "2",
        "3:ReluBackward0": "",  # nn.ReLU has no parameter: between "0" and "2" -> root
        "4:TBackward0": "2",
        "5:AddmmBackward0": "0",
        "6:2.weight": "2",
        "7:0.bias": "0",
        "8:TBackward0": "0",
        "9:0.weight": "0",
    }
    assert [(g.address, g.parent, g.type_name, g.num_nodes) for g in sketch.groups] == [
        ("0", "", "Linear", 4),
        ("2", "", "Linear", 4),
    ]


def test_gpt2_groups_nest_so_a_block_folds_into_one_box(gpt2_and_loss) -> None:
    model, loss = gpt2_and_loss
    sketch = tl.debug.walk_grad_fn(loss, model=model)
    groups = {g.address: g for g in sketch.groups}

    assert groups["transformer.h.0"].parent == "transformer.h"
    assert groups["transformer.h.0.attn"].parent == "transformer.h.0"
    assert groups["transformer.h.0.attn"].type_name == "GPT2Attention"
    assert groups["transformer.h.0.attn.c_attn"].parent == "transformer.h.0.attn"
    members = [
        n
        for n in sketch.nodes
        if n.group.startswith("transformer.h.0.") or n.group == "transformer.h.0"
    ]
    assert groups["transformer.h.0"].num_nodes == len(members)
    # parents come before their children in sketch.groups
    order = [g.address for g in sketch.groups]
    assert all(order.index(g.parent) < order.index(g.address) for g in sketch.groups if g.parent)


def test_gpt2_ops_land_in_the_module_that_ran_them(gpt2_and_loss) -> None:
    model, loss = gpt2_and_loss
    sketch = tl.debug.walk_grad_fn(loss, model=model)

    def groups_of(name: str) -> set[str]:
        return {n.group for n in sketch.nodes if n.name == name}

    # the softmax runs in the attention module between its c_attn and c_proj anchors
    assert groups_of("SoftmaxBackward0") == {"transformer.h.0.attn", "transformer.h.1.attn"}
    assert groups_of("NativeLayerNormBackward0") == {
        "transformer.h.0.ln_1",
        "transformer.h.0.ln_2",
        "transformer.h.1.ln_1",
        "transformer.h.1.ln_2",
        "transformer.ln_f",
    }
    # wte is tied to lm_head: an op using it may have run in either, so it goes to their
    # common module (root); the untied position table keeps its own module
    assert groups_of("EmbeddingBackward0") == {"", "transformer.wpe"}
    assert groups_of("NllLossBackward0") == {""}  # the loss is computed after the last anchor


def test_ops_of_a_parameter_free_submodule_sit_in_its_parent() -> None:
    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc1, self.act, self.fc2 = nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc2(self.act(self.fc1(x)))

    torch.manual_seed(0)
    model = nn.Sequential(Block(), Block())
    sketch = tl.debug.walk_grad_fn(model(torch.randn(2, 4)).sum(), model=model)

    assert {n.group for n in sketch.nodes if n.name == "TanhBackward0"} == {"0", "1"}


def test_an_embedding_table_is_not_taken_for_a_parameter_transform() -> None:
    class Scaled(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb, self.fc = nn.Embedding(10, 4), nn.Linear(4, 2)

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            return self.fc(self.emb(ids) * 2.0)  # the scale runs in the parent

    model = Scaled()
    sketch = tl.debug.walk_grad_fn(model(torch.tensor([1, 2, 3])).sum(), model=model)

    (scale,) = [n for n in sketch.nodes if n.name == "MulBackward0"]
    assert scale.group == ""


def test_common_module_is_the_deepest_shared_address() -> None:
    assert common_module(["a.b.c", "a.b.d"]) == "a.b"
    assert common_module(["a.b", "a.bc"]) == "a"
    assert common_module(["a", ""]) == ""
    assert common_module(["h.1.attn"]) == "h.1.attn"
