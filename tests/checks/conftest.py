"""Fixtures of the checks-kit tests: a seeded MLP with its optimizer, and gradient injection."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import torch
from torch import nn

from tests import models


@pytest.fixture
def mlp_adamw() -> tuple[nn.Sequential, torch.optim.AdamW]:
    """Linear(8, 16) -> ReLU -> Linear(16, 4) under default AdamW."""
    model = models.mlp()
    return model, torch.optim.AdamW(model.parameters())


@pytest.fixture
def poison() -> Iterator[Callable[[torch.Tensor, float], None]]:
    """``poison(param, value)``: the next backward writes ``value`` into ``param``'s gradient
    at element 0 (a tensor hook, removed after that backward or at teardown)."""
    handles = []

    def install(param: torch.Tensor, value: float) -> None:
        def hook(grad: torch.Tensor) -> torch.Tensor:
            handle.remove()
            bad = grad.clone()
            bad.view(-1)[0] = value
            return bad

        handle = param.register_hook(hook)
        handles.append(handle)

    yield install
    for handle in handles:
        handle.remove()


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
