"""Outputs that are not tensors, tuples or dicts: dataclasses, named tuples, caches, objects."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import nn

import torchlens_nb as tl
from tests.capture.golden_models import hf_llama
from torchlens_nb.capture import iter_tensors


@dataclass
class Heads:
    logits: torch.Tensor
    features: torch.Tensor
    name: str = "heads"


class Pair(NamedTuple):
    left: torch.Tensor
    right: torch.Tensor


class KeyValueStore:
    """Holds tensors as public attributes, like a Hugging Face ``DynamicCache`` layer."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        self.keys = keys
        self.values = values
        self._scratch = torch.zeros(1)  # private: not part of what the object exposes


class TwoHeads(nn.Module):
    def __init__(self, wrap: type) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.body = nn.Linear(4, 4)
        self.head = nn.Linear(4, 2)
        self.wrap = wrap

    def forward(self, x: torch.Tensor) -> object:
        features = self.body(x).relu()
        return self.wrap(self.head(features), features)


def test_a_dataclass_output_names_its_tensor_fields() -> None:
    trace = tl.trace(TwoHeads(Heads), torch.ones(1, 4))
    assert trace.output_layers == ("linear_2", "relu_1")
    assert trace["relu_1"].is_output
    assert [c.output_labels for c in trace.module_calls if c.address == ""] == [
        ("linear_2", "relu_1")
    ]


def test_a_named_tuple_output_names_its_fields() -> None:
    trace = tl.trace(TwoHeads(Pair), torch.ones(1, 4))
    assert trace.output_layers == ("linear_2", "relu_1")


def test_an_object_exposing_tensors_names_its_public_attributes() -> None:
    trace = tl.trace(TwoHeads(KeyValueStore), torch.ones(1, 4))
    assert trace.output_layers == ("linear_2", "relu_1")


def test_the_tensors_of_a_hugging_face_cache_are_outputs() -> None:
    model, inputs = hf_llama()
    trace = tl.trace(model, inputs, save=False)
    cache = trace.output.past_key_values
    # 2 layers x (keys, values): each cache tensor is the output of a cache update (a cat)
    cached = [cache.layers[i].keys for i in range(2)] + [cache.layers[i].values for i in range(2)]
    assert len(trace.output_layers) == 5
    assert trace.output_layers[0] == trace.ops[-1].label  # the logits
    assert {trace[label].func for label in trace.output_layers[1:]} == {"cat"}
    assert sorted(trace[label].shape for label in trace.output_layers[1:]) == sorted(
        tuple(t.shape) for t in cached
    )


def test_the_walk_is_bounded_on_cyclic_and_deep_values() -> None:
    store = KeyValueStore(torch.ones(1), torch.zeros(1))
    store.me = store  # type: ignore[attr-defined]  # a cycle: walked to the depth bound only
    assert len(list(iter_tensors(store))) == 2 * 5  # keys and values at depths 0 to MAX_DEPTH
    deep: list[object] = [torch.ones(1)]
    for _ in range(10):
        deep = [deep]
    assert list(iter_tensors(deep)) == []  # deeper than MAX_DEPTH: not opened
    assert list(iter_tensors(nn.Linear(2, 2))) == []  # modules are not opened
