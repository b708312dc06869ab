"""What the attention-sinks panel receives: compact binary patterns, never JSON lists.

A 12-layer x 12-head x 128-token capture must ship (payload JSON + binary arrays) in under 2 MB;
uint8 without compression would already be 2.36 MB, float16 4.72 MB.
"""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

import torchlens_nb as tl
import torchlens_nb.widgets

TWO_MB = 2_000_000


class FixedBlock(nn.Module):
    """A residual block whose 12 heads attend with fixed random logits of a chosen spread."""

    def __init__(self, spread: float, heads: int = 12, tokens: int = 128, width: int = 48) -> None:
        super().__init__()
        self.logits = nn.Parameter(torch.randn(1, heads, tokens, tokens) * spread)
        self.mix = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, tokens, width = x.shape
        heads = self.logits.shape[1]
        probs = torch.softmax(self.logits, dim=-1).expand(batch, -1, -1, -1)
        values = x.view(batch, tokens, heads, width // heads).transpose(1, 2)
        return x + self.mix((probs @ values).transpose(1, 2).reshape(batch, tokens, width))


class PlainTransformer(nn.Module):
    def __init__(self, spread: float, layers: int = 12) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.blocks = nn.ModuleList(FixedBlock(spread) for _ in range(layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return x


def shipped_bytes(report) -> int:
    arrays = tl.widgets.panel_arrays(report)
    return len(json.dumps(tl.widgets.panel_payload(report), allow_nan=False)) + sum(
        len(spec["data"]) for spec in arrays.values()
    )


@pytest.mark.parametrize("spread", [1.0, 2.0], ids=["randn", "2-randn"])
def test_twelve_layers_twelve_heads_128_tokens_ship_under_2_mb(spread: float) -> None:
    model = PlainTransformer(spread)
    report = tl.debug.attention_sinks(model, torch.randn(1, 128, 48))
    assert (len(report.layers), len(report.layers[0].positions)) == (12, 12)
    assert len(report.patterns.positions) == 128 and report.patterns.levels == 255
    # The two largest measured (benchmarks/bench_sinks.py): 1.65 MB at spread 1, 1.69 MB at 2;
    # spread 0.3 gives 1.30 MB, 8 gives 0.58 MB, uniform 0.02 MB.
    assert shipped_bytes(report) < TWO_MB
    assert tl.widgets.panel_arrays(report)["patterns"]["dtype"] == "uint8"
    # The bytes decode to the probabilities within the stated bound: sqrt(p) is rounded to a
    # multiple of 1/255, off by <= 1/510, so p is off by <= sqrt(p)/255 + 1/510**2.
    expected = torch.softmax(model.blocks[7].logits[0, 5].detach(), dim=-1)
    decoded = torch.tensor(report.pattern(7, 5))
    assert bool(((decoded - expected).abs() <= expected.sqrt() / 255 + 1 / 510**2 + 1e-7).all())


def test_patterns_coarsen_to_fit_a_smaller_budget() -> None:
    report = tl.debug.attention_sinks(
        PlainTransformer(1.0, layers=4), torch.randn(1, 128, 48), max_pattern_bytes=200_000
    )
    assert report.pattern_bytes <= 200_000 and report.patterns.levels < 255
    assert f"round({report.patterns.levels} * sqrt(p))" in " ".join(report.disclosures)


def test_the_payload_json_carries_no_pattern_numbers() -> None:
    report = tl.debug.attention_sinks(PlainTransformer(1.0, layers=2), torch.randn(1, 128, 48))
    data = tl.widgets.panel_payload(report)["data"]
    assert data["patterns"]["bytes"] == report.pattern_bytes
    assert set(data["patterns"]) == {"layers", "heads", "positions", "levels", "encoding", "bytes"}
    assert [sorted(site) for site in data["residual"]] == [
        ["dims", "label", "median_mean_abs", "module", "outliers"]
    ] * 2
    arrays = tl.widgets.panel_arrays(report)
    assert arrays["residual_mean_abs"]["shape"] == [2, 48]
    assert arrays["residual_mean_abs"]["dtype"] == "float32"
