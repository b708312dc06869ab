"""The models and inputs the fault suite attacks with (seeded, CPU, built in milliseconds)."""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from torch import nn


@dataclass
class Owned:
    """What a user owns when they call a diagnostic: a model mid-training and its data."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    x: torch.Tensor
    y: torch.Tensor

    @property
    def batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x, self.y


def trained_mlp(seed: int = 0) -> nn.Sequential:
    """Linear(8, 16) -> BatchNorm1d -> ReLU -> Dropout -> Linear(16, 4), in train mode.

    BatchNorm (running stats are buffers) and Dropout (draws from the global RNG) make any
    forward the tool runs on the caller's model visible to the guards.
    """
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Dropout(0.25), nn.Linear(16, 4)
    ).train()


def owned(seed: int = 0) -> Owned:
    """A train-mode model after one AdamW step (so the optimizer has moments and a step count),
    with a (4, 8) input batch and class targets; ``.grad`` is populated."""
    model = trained_mlp(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(4, 8)
    y = torch.tensor([0, 1, 2, 3])
    nn.functional.cross_entropy(model(x), y).backward()
    optimizer.step()
    return Owned(model, optimizer, x, y)


class RaisingForward(nn.Module):
    """Runs a Linear, a train-mode BatchNorm and a global-RNG draw, then raises ValueError."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 4)
        self.bn = nn.BatchNorm1d(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = self.bn(self.fc(x))
        torch.rand(1)  # a stochastic layer would draw like this
        raise ValueError(f"shape mismatch in user code after {tuple(hidden.shape)}")


class NoParams(nn.Module):
    """A parameter-free model: ``x[:, :4] * 2``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, :4] * 2


class SleepingForward(nn.Module):
    """A Linear whose forward sleeps ``sleep_s`` first (a wedged data-dependent forward)."""

    def __init__(self, sleep_s: float) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 4)
        self.sleep_s = sleep_s

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(self.sleep_s)
        return self.fc(x)


class LogOfLinear(nn.Module):
    """``log(fc(x))``: the Linear's negative outputs become NaN (the classic origin)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.head = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.log(self.fc(x)))


def in_dtype(model: nn.Module, dtype: torch.dtype) -> nn.Module:
    """``model`` cast to ``dtype`` (CPU runs fp16 and bf16 Linear, log and ReLU)."""
    return model.to(dtype)


def meta_tensor() -> torch.Tensor:
    return torch.empty(4, 8, device="meta")


def sparse_tensor() -> torch.Tensor:
    torch.manual_seed(0)
    return torch.randn(4, 8).to_sparse()


def quantized_tensor() -> torch.Tensor:
    torch.manual_seed(0)
    return torch.quantize_per_tensor(torch.randn(4, 8), 0.1, 0, torch.qint8)
