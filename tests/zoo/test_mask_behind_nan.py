"""``nn.Transformer`` (2 encoder, 2 decoder layers) under its own causal mask
(``generate_square_subsequent_mask``): a NaN planted in ``decoder.layers.0.linear1`` is named
there, never at the mask. Layer 0's attention neutralises the -inf with softmax; layer 1's
attention adds it to scores the planted NaN has already poisoned, which is where a rule that
names "the first non-finite op reaching a NaN" would blame the mask (it did, on every plant).
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import torchlens_nb as tl

pytestmark = pytest.mark.zoo

BLOCK = "decoder.layers.0.linear1"
PLANTS = [("weight", 0), ("weight", -1), ("bias", 0), ("bias", -1)]
"""Where the NaN goes: the first and the last element of the weight and of the bias."""


class CausalTransformer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.core = nn.Transformer(
            d_model=16,
            nhead=2,
            num_encoder_layers=2,
            num_decoder_layers=2,
            dim_feedforward=32,
            dropout=0.0,
            batch_first=True,
        )

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        mask = nn.Transformer.generate_square_subsequent_mask(tgt.shape[1])
        return self.core(src, tgt, tgt_mask=mask)


def inputs() -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(1)
    return torch.randn(2, 6, 16), torch.randn(2, 5, 16)


def test_the_clean_model_has_only_an_intentional_mask() -> None:
    report = tl.debug.nonfinite_origin(CausalTransformer().eval(), inputs())
    assert report.status == "clean"
    assert report.intentional_infinities  # the causal mask, neutralised by softmax


@pytest.mark.parametrize(("name", "index"), PLANTS, ids=[f"{n}[{i}]" for n, i in PLANTS])
def test_a_nan_in_the_first_decoder_ffn_is_not_blamed_on_the_mask(name: str, index: int) -> None:
    model = CausalTransformer().eval()
    with torch.no_grad():
        model.core.get_parameter(f"{BLOCK}.{name}").view(-1)[index] = float("nan")
    trace = tl.trace(model, inputs())
    for tool, report in {
        "nonfinite_origin live": tl.debug.nonfinite_origin(model, inputs()),
        "nonfinite_origin saved": tl.debug.nonfinite_origin(trace),
        "trace.find_nan": trace.find_nan(),
        "find_nan live": tl.debug.find_nan(model, inputs()),
    }.items():
        origin = report.first_bad_thing
        assert (report.status, origin.kind) == ("found", "nan"), tool
        assert origin.module == f"core.{BLOCK}", (tool, origin.op, origin.module)
