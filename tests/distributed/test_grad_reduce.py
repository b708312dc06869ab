"""The watch on ``torch.distributed.all_reduce`` that tells a hand-written data-parallel loop
(``checks/distributed/_grad_reduce.py``): which calls it counts, and that the function is put
back, also when the loop raises. One process; the collective itself is a stand-in (the real
2-rank runs are in ``tests/corpus/test_corpus_distributed.py``)."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
import torch
from torch import nn

from torchlens_nb.checks.distributed._grad_reduce import GradReduceWatch
from torchlens_nb.checks.session._params import Roster


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[tuple[torch.Tensor, Any]]:
    """``torch.distributed.all_reduce`` replaced by a recorder (no process group needed)."""
    calls: list[tuple[torch.Tensor, Any]] = []

    def all_reduce(tensor: torch.Tensor, op: Any = None, group: Any = None) -> None:
        calls.append((tensor, group))

    monkeypatch.setattr(torch.distributed, "all_reduce", all_reduce)
    return calls


def _trained() -> tuple[nn.Linear, Roster]:
    model = nn.Linear(3, 2)
    model(torch.ones(1, 3)).sum().backward()
    return model, Roster(model, torch.optim.SGD(model.parameters(), lr=0.1))


def test_only_an_all_reduce_of_a_gradient_counts_and_only_once(sent: list[Any]) -> None:
    model, roster = _trained()
    seen: list[Any] = []
    stand_in = torch.distributed.all_reduce
    with contextlib.ExitStack() as stack:
        GradReduceWatch(roster, lambda: 1, seen.append).install(stack)
        assert torch.distributed.all_reduce is not stand_in
        torch.distributed.all_reduce(torch.ones(2))  # a logged loss, not a gradient
        torch.distributed.all_reduce(model.weight.detach().clone())
        assert seen == []
        assert model.bias.grad is not None
        torch.distributed.all_reduce(model.bias.grad.data, group="dp")  # the tutorial's form
        torch.distributed.all_reduce(model.bias.grad, None, "dp")
        assert seen == ["dp"]
    assert torch.distributed.all_reduce is stand_in
    assert len(sent) == 4  # every call still went through


def test_all_reduce_is_put_back_when_the_loop_raises(sent: list[Any]) -> None:
    _, roster = _trained()
    stand_in = torch.distributed.all_reduce
    with pytest.raises(RuntimeError, match="the loop failed"):
        with contextlib.ExitStack() as stack:
            GradReduceWatch(roster, lambda: 1, lambda group: None).install(stack)
            GradReduceWatch(roster, lambda: 1, lambda group: None).install(stack)
            raise RuntimeError("the loop failed")
    assert torch.distributed.all_reduce is stand_in
