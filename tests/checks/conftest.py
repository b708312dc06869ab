"""Fixtures of the checks-kit tests: a seeded MLP with its optimizer, and gradient injection."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

import torchlens_nb as tl
from tests import models


@pytest.fixture
def mlp_adamw() -> tuple[nn.Sequential, torch.optim.AdamW]:
    """Linear(8, 16) -> ReLU -> Linear(16, 4) under default AdamW."""
    model = models.mlp()
    return model, torch.optim.AdamW(model.parameters())


def poison_next_backward(param: torch.Tensor, value: float) -> RemovableHandle:
    """The next backward writes ``value`` into element 0 of ``param``'s incoming gradient (a
    tensor hook that removes itself when it fires); returns the hook's handle."""

    def hook(grad: torch.Tensor) -> torch.Tensor:
        handle.remove()
        bad = grad.clone()
        bad.view(-1)[0] = value
        return bad

    handle = param.register_hook(hook)
    return handle


@pytest.fixture
def poison() -> Iterator[Callable[[torch.Tensor, float], None]]:
    """``poison(param, value)``: :func:`poison_next_backward`, with the hook also removed at
    teardown when no backward fired it."""
    handles: list[RemovableHandle] = []
    yield lambda param, value: handles.append(poison_next_backward(param, value))
    for handle in handles:
        handle.remove()


ChangeRun = tuple[torch.optim.Optimizer, "tl.debug.ChecksSession"]


def nonfinite_session(model: nn.Module, optimizer: torch.optim.Optimizer) -> tl.debug.ChecksSession:
    """A session that declares no GradScaler and runs the non-finite check (raise at S-B)."""
    session = tl.debug.ChecksSession(model, optimizer, scaler=None)
    session.register_nonfinite_grad_check()
    return session


def change_session(model: nn.Module, *, window: int, min_hits: int) -> ChangeRun:
    """SGD(lr=0.1) on ``model`` and a session collecting the change check on that window."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    session = tl.debug.ChecksSession(model, optimizer, scaler=None)
    session.register_change_check(window=window, min_hits=min_hits, action="collect")
    return optimizer, session


def clip_recipe_step(model: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor) -> None:
    """The canonical step: zero_grad, backward, clip_grad_norm_(1.0), step."""
    optimizer.zero_grad()
    model(x).square().mean().backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
    optimizer.step()


def hook_counts(model: nn.Module, optimizer: torch.optim.Optimizer) -> tuple[int, int, int]:
    """(tensor post-accumulate-grad hooks, optimizer pre hooks, optimizer post hooks)."""
    tensor_hooks = sum(len(p._post_accumulate_grad_hooks or {}) for p in model.parameters())
    return (
        tensor_hooks,
        len(optimizer._optimizer_step_pre_hooks),
        len(optimizer._optimizer_step_post_hooks),
    )


def snapshot(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, torch.Tensor]:
    """Copies of every parameter and optimizer-state tensor, keyed by a readable name."""
    copies = {f"param.{n}": p.detach().clone() for n, p in model.named_parameters()}
    for index, state in enumerate(optimizer.state.values()):
        for key, value in state.items():
            if isinstance(value, torch.Tensor):
                copies[f"state.{index}.{key}"] = value.detach().clone()
    return copies


def is_bitwise_equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    """Same keys and the same bytes (NaN == NaN, -0.0 != 0.0)."""

    def raw(t: torch.Tensor) -> torch.Tensor:
        return t.reshape(-1).view(torch.uint8) if t.dtype.is_floating_point else t

    return a.keys() == b.keys() and all(torch.equal(raw(a[k]), raw(b[k])) for k in a)
