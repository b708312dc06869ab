"""Fixtures of the gradient, activation and audit tests: the five-block MLP with a dead block,
after one logged backward (``tests.models.five_block_mlp``). ``tests/activations`` and
``tests/audit`` import these fixtures from here."""

from __future__ import annotations

import pytest
import torch

import torchlens_nb as tl
from tests.models import five_block_mlp, traced_backward


@pytest.fixture
def batch() -> torch.Tensor:
    torch.manual_seed(1)
    return torch.randn(4, 8)


@pytest.fixture
def dead_trace(batch: torch.Tensor) -> tl.Trace:
    """The five-block MLP with block 2 dead, after one backward."""
    return traced_backward(five_block_mlp(), batch)


@pytest.fixture
def healthy_trace(batch: torch.Tensor) -> tl.Trace:
    return traced_backward(five_block_mlp(dead_block=None), batch)
