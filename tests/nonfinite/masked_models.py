"""Models that hold infinities by design (masks, sentinels), with and without a real NaN later.

``CausalDecoder`` is ``nn.TransformerDecoder`` fed PyTorch's own causal-mask idiom
(``torch.full((T, T), -inf).triu(1)``); ``MaskedFillAttention`` writes the -inf itself with
``masked_fill``. Their outputs are finite: the -inf entries are turned into 0 by softmax.
``tiny_t5`` is a 2-layer Hugging Face T5 whose relative-position bucket takes ``log(0) = -inf``
on purpose and removes it with an integer cast.
"""

from __future__ import annotations

import torch
from torch import nn

T, D = 5, 8
X = torch.linspace(-1.0, 1.0, T * D).reshape(1, T, D)
"""The batch every test feeds (1 sequence of 5 tokens, width 8)."""


class CausalDecoder(nn.Module):
    """``nn.TransformerDecoder`` (2 layers) under the standard -inf causal mask."""

    def __init__(self) -> None:
        super().__init__()
        layer = nn.TransformerDecoderLayer(D, 2, 16, dropout=0.0, batch_first=True)
        self.decoder = nn.TransformerDecoder(layer, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mask = torch.full((x.shape[1], x.shape[1]), float("-inf")).triu(1)
        return self.decoder(x, x, tgt_mask=mask)


class LogOfNegativeHead(nn.Module):
    """A later module whose ``log`` of a negative is a real NaN."""

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        shifted = h - 10.0  # layer-normed values are far below 10
        return torch.log(shifted)  # log(negative) = nan


class DecoderThenNaN(nn.Module):
    """The causal decoder, then a head whose log is born NaN."""

    def __init__(self) -> None:
        super().__init__()
        self.body = CausalDecoder()
        self.head = LogOfNegativeHead()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x)) * 2.0


class MaskedFillAttention(nn.Module):
    """Single-head causal attention written by hand: masked_fill(-inf), then softmax."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(D, 3 * D)
        self.out = nn.Linear(D, D)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        scores = q @ k.transpose(-2, -1) / D**0.5
        future = torch.ones(x.shape[1], x.shape[1], dtype=torch.bool).triu(1)
        scores = scores.masked_fill(future, float("-inf"))
        return self.out(torch.softmax(scores, dim=-1) @ v)


class FullyMaskedRow(nn.Module):
    """A mask that hides every key of the first query: softmax of all -inf is NaN."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scores = x @ x.transpose(-2, -1)
        mask = torch.zeros(x.shape[1], x.shape[1])
        mask[0] = float("-inf")  # no key left for query 0
        return torch.softmax(scores + mask, dim=-1)


class NaNWeightBehindMask(nn.Module):
    """Two causal blocks; the late block's ``fc`` holds a NaN weight (set by the test)."""

    def __init__(self) -> None:
        super().__init__()
        self.early = MaskedFillAttention()
        self.late = MaskedFillAttention()
        self.fc = nn.Linear(D, D)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.late(self.early(x)))


def tiny_t5() -> nn.Module:
    """A 2-layer T5 (random init, eager attention): inputs ``t5_inputs()``."""
    from transformers import T5Config, T5Model

    torch.manual_seed(0)
    config = T5Config(
        vocab_size=32,
        d_model=16,
        d_kv=8,
        d_ff=32,
        num_layers=2,
        num_decoder_layers=2,
        num_heads=2,
        decoder_start_token_id=0,
        attn_implementation="eager",
    )
    return T5Model(config).eval()


def t5_inputs() -> dict[str, torch.Tensor]:
    return {
        "input_ids": torch.arange(1, 7).unsqueeze(0),
        "decoder_input_ids": torch.arange(0, 4).unsqueeze(0),
    }


class NaNBehindMask(nn.Module):
    """A real NaN (``log`` of a negative) added to an intentional -inf causal mask built first."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        T = x.shape[1]
        mask = torch.full((T, T), float("-inf")).triu(1)  # intentional -inf
        h = torch.log(x - 10.0)  # the real NaN origin: every value is below 10
        return torch.softmax(h @ h.transpose(-1, -2) + mask, -1) @ h
