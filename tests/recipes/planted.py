"""Small models with a planted bug, each beside its healthy twin (seeded, CPU, milliseconds)."""

from __future__ import annotations

import torch
from torch import nn


class TimeMajorMixer(nn.Module):
    """(B, T, D) -> time-major -> Linear -> back. ``bug=True`` uses view instead of transpose,
    which silently reorders elements across the batch."""

    def __init__(self, bug: bool, dim: int = 4) -> None:
        super().__init__()
        self.fc = nn.Linear(dim, dim)
        self.bug = bug

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, dim = x.shape
        time_major = x.view(seq, batch, dim) if self.bug else x.transpose(0, 1)
        out = self.fc(time_major)
        return out.transpose(0, 1)


class PairLeak(nn.Module):
    """Per-example Linear, except that output ``to_row`` also reads input ``from_row``."""

    def __init__(self, from_row: int = 4, to_row: int = 3) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.from_row, self.to_row = from_row, to_row

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.fc(x)
        extra = torch.zeros_like(out)
        extra[self.to_row] = x[self.from_row]
        return out + extra


class CausalAttention(nn.Module):
    """Single-head self-attention with mask ``triu(ones, diagonal)``: diagonal=1 is causal,
    diagonal=2 is the off-by-one bug (position t sees t+1). ``open_pair=(t, s)`` additionally
    unmasks one future key s for query t."""

    def __init__(self, diagonal: int = 1, open_pair: tuple[int, int] | None = None) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.qkv = nn.Linear(4, 12)
        self.diagonal = diagonal
        self.open_pair = open_pair

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        seq = x.shape[1]
        mask = torch.triu(torch.ones(seq, seq, dtype=torch.bool), diagonal=self.diagonal)
        if self.open_pair is not None:
            mask[self.open_pair] = False
        scores = (q @ k.transpose(1, 2)).masked_fill(mask, float("-inf"))
        return scores.softmax(dim=-1) @ v


class CentreRows(nn.Module):
    """Subtracts each row's mean; ``keepdim=False`` is the bug that only runs when B == T."""

    def __init__(self, keepdim: bool) -> None:
        super().__init__()
        self.fc = nn.Linear(16, 4)
        self.keepdim = keepdim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scores = self.fc(x).sum(dim=-1)  # (batch, seq)
        return scores - scores.mean(dim=-1, keepdim=self.keepdim)


class Regressor(nn.Module):
    """Linear(16, 1) predicting (N, 1), compared with targets ``y``: ``squeeze=False`` is the
    (N, 1) - (N,) outer-product bug."""

    def __init__(self, squeeze: bool) -> None:
        super().__init__()
        self.fc = nn.Linear(16, 1)
        self.squeeze = squeeze

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        pred = self.fc(x)
        return (pred.squeeze(-1) if self.squeeze else pred) - y


def teacher_classifier(
    seed: int = 0, features: int = 4, classes: int = 3
) -> tuple[nn.Linear, torch.Tensor, torch.Tensor]:
    """A linear classifier that IS the labelling rule (a "trained" model, no training needed),
    with 200 inputs and their labels."""
    torch.manual_seed(seed)
    weight = torch.randn(classes, features)
    model = nn.Linear(features, classes)
    with torch.no_grad():
        model.weight.copy_(3 * weight)
        model.bias.zero_()
    x = torch.randn(200, features)
    return model, x, (x @ weight.t()).argmax(dim=1)


class IgnoresInput(nn.Module):
    """``fc(x * 0)``: no output depends on any input."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x * 0)
