"""Fixtures of the autograd-graph tests: losses of the shared small models, and a reference walk.

``reference_graph`` is the independent walk the sketch is checked against: a recursive DFS over
``next_functions`` that collects node objects and (producer, consumer, slot) edges, then numbers
the nodes in the order ``GradFnNode.id`` documents (breadth-first from the outputs, inputs in
``next_functions`` order), so both sides can be compared node by node.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from tests import models


def reference_graph(*outputs: torch.Tensor) -> tuple[list[Any], set[tuple[int, int, int]]]:
    """(node objects in documented id order, {(src id, dst id, slot)}) of ``outputs``' graph."""
    found: set[Any] = set()
    raw_edges: list[tuple[Any, Any, int]] = []

    def dfs(fn: Any) -> None:
        if fn in found:
            return
        found.add(fn)
        for slot, (src, _) in enumerate(fn.next_functions):
            if src is not None:
                raw_edges.append((src, fn, slot))
                dfs(src)

    for out in outputs:
        dfs(out.grad_fn)
    order: list[Any] = []
    for out in outputs:  # breadth-first numbering over the collected set
        if out.grad_fn not in order:
            order.append(out.grad_fn)
    cursor = 0
    while cursor < len(order):
        for src, _ in order[cursor].next_functions:
            if src is not None and src not in order:
                order.append(src)
        cursor += 1
    assert set(order) == found
    ids = {fn: index for index, fn in enumerate(order)}
    return order, {(ids[src], ids[dst], slot) for src, dst, slot in raw_edges}


def _mlp_loss() -> tuple[torch.nn.Module, torch.Tensor]:
    model = models.mlp()
    return model, model(torch.randn(3, 8)).pow(2).mean()


def _cnn_loss() -> tuple[torch.nn.Module, torch.Tensor]:
    model = models.small_cnn()
    return model, torch.nn.functional.cross_entropy(
        model(torch.randn(2, 3, 8, 8)), torch.tensor([0, 1])
    )


def _gpt2_loss() -> tuple[torch.nn.Module, torch.Tensor]:
    model = models.tiny_gpt2()
    ids = torch.arange(8).unsqueeze(0) % 64
    return model, model(input_ids=ids, labels=ids).loss


LOSSES: dict[str, Callable[[], tuple[torch.nn.Module, torch.Tensor]]] = {
    "mlp": _mlp_loss,
    "cnn": _cnn_loss,
    "gpt2": _gpt2_loss,
}


@pytest.fixture(params=sorted(LOSSES))
def model_and_loss(request: pytest.FixtureRequest) -> tuple[torch.nn.Module, torch.Tensor]:
    """(model, loss) for the MLP, the CNN and the 2-layer GPT-2, one test each."""
    torch.manual_seed(0)
    return LOSSES[request.param]()


@pytest.fixture(scope="module")
def gpt2_and_loss() -> tuple[torch.nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return _gpt2_loss()
