"""Fixtures of the gradient/activation health tests: small seeded models with a known defect."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import torchlens_nb as tl
from torchlens_nb.options import CaptureOptions

DEAD_BLOCK = 2
"""Index of the block whose ReLU never fires in ``dead_block_mlp``."""


def five_block_mlp(dead_block: int | None = DEAD_BLOCK) -> nn.Sequential:
    """Five Linear(8, 8) -> ReLU blocks and a Linear(8, 1) head; block ``dead_block`` has bias
    -100, so its ReLU outputs 0 for every input of magnitude ~1 (a dead block)."""
    torch.manual_seed(0)
    blocks = [nn.Sequential(nn.Linear(8, 8), nn.ReLU()) for _ in range(5)]
    if dead_block is not None:
        with torch.no_grad():
            blocks[dead_block][0].bias.fill_(-100.0)
    return nn.Sequential(*blocks, nn.Linear(8, 1))


def traced_backward(model: nn.Module, x: torch.Tensor, scale=None) -> tl.Trace:
    """``tl.trace`` with saved gradients, then one backward of ``mean(out ** 2)`` (optionally
    passed through ``scale``, e.g. ``scaler.scale``)."""
    trace = tl.trace(model, x, capture=CaptureOptions(save_grads=True))
    loss = trace[trace.output_layers[0]].out.square().mean()
    trace.backward(scale(loss) if scale is not None else loss)
    return trace


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
