"""The forward probe reads, per attention call, the max pre-softmax logit and the least mean
entropy over heads, the same from an explicit softmax and from ``scaled_dot_product_attention``
with its causal mask."""

from __future__ import annotations

import contextlib

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from torchlens_nb.checks.stability._probe import ForwardProbe


class Attention(nn.Module):
    def __init__(self, fused: bool) -> None:
        super().__init__()
        self.fused = fused

    def forward(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        if self.fused:
            return F.scaled_dot_product_attention(q, k, k, is_causal=True, scale=1.0)
        mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).triu(1)
        return (q @ k.transpose(-1, -2)).masked_fill(mask, float("-inf")).softmax(-1) @ k


class Model(nn.Module):
    def __init__(self, fused: bool) -> None:
        super().__init__()
        self.attention = Attention(fused)

    def forward(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        return self.attention(q, k)


def expected(q: torch.Tensor, k: torch.Tensor) -> tuple[float, float]:
    scores = q @ k.transpose(-1, -2)
    mask = torch.ones(scores.shape[-2:], dtype=torch.bool).triu(1)
    p = scores.masked_fill(mask, float("-inf")).softmax(-1)
    entropy = -(p * p.clamp_min(1e-30).log()).sum(-1)  # (B, H, T)
    return scores.masked_fill(mask, float("-inf")).amax().item(), entropy.mean(
        dim=(0, 2)
    ).min().item()


@pytest.mark.parametrize("fused", [False, True], ids=["softmax", "sdpa"])
def test_the_probe_reads_the_max_logit_and_the_least_head_entropy(fused: bool) -> None:
    torch.manual_seed(0)
    q, k = torch.randn(2, 3, 5, 4, requires_grad=True), torch.randn(2, 3, 5, 4)
    k[:, 1] *= 8  # head 1 is the peaked one
    model = Model(fused)
    probe = ForwardProbe(model)
    with contextlib.ExitStack() as stack:
        probe.install(stack)
        model(q, k)
    assert probe.reading is not None
    [(where, values)] = probe.reading.attention
    assert where == "attention"
    max_logit, entropy = expected(q.detach(), k)
    assert values.tolist() == pytest.approx([max_logit, entropy], rel=1e-4)
    assert not torch.overrides._get_current_function_mode_stack()
