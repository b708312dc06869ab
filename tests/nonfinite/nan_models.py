"""Models whose NaN/Inf is born at a known op inside the submodule ``block``.

``Net(block)`` runs ``pre`` (an identity-initialised Linear, so ``block`` sees the input
itself), then ``block``, then ``head(h * 2)``: two downstream ops (``mul``, ``linear``) that only
propagate what ``block`` produced. ``line_of`` finds the expected source line with ``inspect``.
"""

from __future__ import annotations

import inspect

import torch
from torch import nn

X = torch.tensor([[0.5, 3.0]])
"""The input every test feeds: block sees 0.5 and 3.0."""


def line_of(function: object, text: str) -> int:
    """Line number of the one source line of ``function`` that contains ``text``."""
    lines, start = inspect.getsourcelines(function)
    hits = [start + i for i, line in enumerate(lines) if text in line]
    assert len(hits) == 1, f"{text!r} occurs {len(hits)} times"
    return hits[0]


class Net(nn.Module):
    def __init__(self, block: nn.Module) -> None:
        super().__init__()
        self.pre = nn.Linear(2, 2)
        self.block = block
        self.head = nn.Linear(2, 1)
        with torch.no_grad():
            self.pre.weight.copy_(torch.eye(2))
            self.pre.bias.zero_()
            self.head.weight.fill_(0.5)
            self.head.bias.zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.pre(x)
        h = self.block(h)
        return self.head(h * 2)


class LogOfNegative(nn.Module):
    def forward(self, h: torch.Tensor) -> torch.Tensor:
        shifted = h - 1.0
        return torch.log(shifted)  # log(0.5 - 1) = nan


class ZeroOverZero(nn.Module):
    def forward(self, h: torch.Tensor) -> torch.Tensor:
        zeros = h - h
        return zeros / zeros  # 0 / 0 = nan


class SqrtOfNegative(nn.Module):
    def forward(self, h: torch.Tensor) -> torch.Tensor:
        shifted = h - 1.0
        return torch.sqrt(shifted)  # sqrt(-0.5) = nan


class LogOfZero(nn.Module):
    def forward(self, h: torch.Tensor) -> torch.Tensor:
        shifted = h - 0.5
        return torch.log(shifted)  # log(0) = -inf


class Float16Overflow(nn.Module):
    def forward(self, h: torch.Tensor) -> torch.Tensor:
        half = h.half()
        big = half * 60000.0  # 3 * 60000 = 180000 > 65504 (float16 max) -> inf
        return big.float()


class Float32Overflow(nn.Module):
    def forward(self, h: torch.Tensor) -> torch.Tensor:
        scaled = h * 100.0
        return torch.exp(scaled)  # exp(300) > 3.4e38 (float32 max) -> inf


class Finite(nn.Module):
    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return torch.tanh(h) + 1.0


class SqrtAtZero(nn.Module):
    """Finite forward (sqrt(0) = 0) whose backward is born non-finite (d sqrt/dx at 0 = inf)."""

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        zeros = h * 0.0
        return torch.sqrt(zeros)


class HealedSqrt(nn.Module):
    """Backward: sqrt's gradient is born inf, mul turns it into nan, clamp masks it to 0."""

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        clamped = torch.clamp(h, max=0.0)  # h > 0, so clamp's gradient masks everything
        return torch.sqrt(clamped * 0.0)


# (id, block, origin label, text on the origin's line, kind, downstream ops that propagate)
BORN_IN_BLOCK = [
    ("log_of_negative", LogOfNegative, "log_1", "torch.log(shifted)", "nan", 2),
    ("zero_over_zero", ZeroOverZero, "div_1", "zeros / zeros", "nan", 2),
    ("sqrt_of_negative", SqrtOfNegative, "sqrt_1", "torch.sqrt(shifted)", "nan", 2),
    ("log_of_zero", LogOfZero, "log_1", "torch.log(shifted)", "-inf", 2),
    ("float16_overflow", Float16Overflow, "mul_1", "half * 60000.0", "inf", 3),  # float, mul, head
    ("float32_overflow", Float32Overflow, "exp_1", "torch.exp(scaled)", "inf", 2),
]
