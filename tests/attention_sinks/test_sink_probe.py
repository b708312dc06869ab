"""SinkProbe on small built-in models: the spec's tiny causal layer, exact masses on fixed
logits, what is skipped and why, masks, thresholds and argument errors."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import torchlens_nb as tl
from torchlens_nb.errors import DiagnosticArgumentError


class TinyLayer(nn.Module):
    """One causal attention head over an 8-wide residual stream (the spec's example)."""

    def __init__(self) -> None:
        super().__init__()
        self.query, self.key, self.write = nn.Linear(8, 8), nn.Linear(8, 8), nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scores = (self.query(x) @ self.key(x).transpose(-1, -2)).unsqueeze(1) / 8**0.5
        causal = torch.ones(x.shape[1], x.shape[1], dtype=torch.bool).tril()
        probs = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1)
        return x + self.write((probs @ x.unsqueeze(1)).squeeze(1))


class Softmax(nn.Module):
    """forward(logits) = softmax over the last axis: attention probabilities we choose."""

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        return torch.softmax(logits, dim=-1)


def probed(model: nn.Module, inputs, **kwargs) -> tl.debug.SinkProbe:
    probe = tl.debug.SinkProbe(**kwargs)
    tl.trace(model, inputs, capture=tl.options.CaptureOptions(hooks=probe.hook_plan()))
    return probe


def test_the_spec_tiny_causal_layer_runs_as_written() -> None:
    torch.manual_seed(0)
    tiny = nn.Sequential()
    tiny.add_module("layer", TinyLayer())
    probe = tl.debug.SinkProbe(attention=[tl.func("softmax")], residual=[tl.module("layer")])
    x = torch.randn(2, 6, 8)
    trace = tl.trace(tiny, x, capture=tl.options.CaptureOptions(hooks=probe.hook_plan()))
    facts = probe.facts()
    assert facts["skipped"] == []
    (attention,) = facts["attention"]
    assert (attention["label"], attention["module"], attention["is_causal"]) == (
        "softmax_1",
        "layer",
        True,
    )
    assert attention["rows_scored"] == 10  # 2 samples x 5 queries (query 0 sees 1 key)
    # Independent: recompute the probabilities, drop query 0, mean per key.
    layer = tiny.layer
    with torch.no_grad():
        scores = (layer.query(x) @ layer.key(x).transpose(-1, -2)) / 8**0.5
        probs = torch.softmax(scores.masked_fill(~torch.ones(6, 6).tril().bool(), -math.inf), -1)
    mass, position = probs[:, 1:].mean((0, 1)).max(-1)
    assert attention["heads"][0]["position"] == int(position)
    assert abs(attention["heads"][0]["mass"] - float(mass)) < 1e-6
    assert attention["uniform_share"] == pytest.approx((1 / 2 + 1 / 3 + 1 / 4 + 1 / 5 + 1 / 6) / 5)
    assert float(mass) < 0.5 and probe.sink_heads == ()  # 0.29 at seed 0: no sink
    (residual,) = facts["residual"]
    assert (residual["label"], residual["dims"], residual["tokens_scored"]) == (
        trace["add_1"].label,
        8,
        12,
    )
    assert residual["max_factor"] < 6.0 and probe.outlier_dims == ()


def test_a_head_on_one_key_is_a_sink_with_its_exact_mass() -> None:
    logits = torch.zeros(1, 2, 4, 4)
    logits[0, 0, :, 0] = 10.0  # head 0: every query looks at key 0
    probe = probed(Softmax(), logits, attention=[tl.func("softmax")])
    mass = math.exp(10) / (math.exp(10) + 3)  # 0.99986
    (sink,) = probe.sink_heads
    assert (sink.label, sink.head, sink.position) == ("softmax_1", 0, 0)
    assert sink.mass == pytest.approx(mass, rel=1e-6)
    (layer,) = probe.attention_layers()
    assert layer.masses[1] == pytest.approx(0.25)  # head 1: uniform over 4 keys
    assert layer.is_sink == (True, False) and layer.is_causal is False


@pytest.mark.parametrize(
    ("keys", "causal", "flagged"),
    [
        (2, False, False),  # uniform over 2 keys is 0.5: needs 2 x 0.5, not a sink
        (3, True, False),  # causal uniform: (1/2 + 1/3) / 2 = 0.42 on key 0, query 0 not scored
        (8, False, False),
    ],
    ids=["two-keys", "causal-uniform", "eight-keys"],
)
def test_uniform_attention_is_never_a_sink(keys: int, causal: bool, flagged: bool) -> None:
    logits = torch.zeros(1, 1, keys, keys)
    if causal:
        logits = logits.masked_fill(~torch.ones(keys, keys).tril().bool(), -math.inf)
    (layer,) = probed(Softmax(), logits, attention=[tl.func("softmax")]).attention_layers()
    assert layer.is_sink == (flagged,)
    assert layer.masses[0] == pytest.approx(layer.uniform_share)


class NotAttention(nn.Module):
    """Softmaxes that are not attention patterns, each for a different reason."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (
            torch.softmax(x[0], dim=-1),  # 3-D: heads folded in
            torch.softmax(x, dim=1),  # rows do not sum to 1
            torch.softmax(x.flatten(1), dim=-1),  # 2-D classifier output
            torch.softmax(x[..., :2], dim=-1),
        )  # 4 queries over 2 keys


def test_softmaxes_that_are_not_attention_patterns_are_skipped_with_the_reason() -> None:
    probe = probed(NotAttention(), torch.randn(2, 3, 4, 4), attention=[tl.func("softmax")])
    facts = probe.facts()
    assert facts["attention"] == [] and probe.sink_heads == ()
    reasons = {s["label"]: s["reason"] for s in facts["skipped"]}
    assert list(reasons) == ["softmax_1", "softmax_2", "softmax_3", "softmax_4"]
    assert reasons["softmax_1"].startswith("shape (3, 4, 4) is not (batch, heads, queries, keys)")
    assert reasons["softmax_2"].startswith("rows do not sum to 1 over the last axis")
    assert reasons["softmax_3"].startswith("shape (2, 48) is not (batch, heads, queries, keys)")
    assert reasons["softmax_4"].startswith("4 queries over 2 keys")
    assert {s["kind"] for s in facts["skipped"]} == {"attention"}


class Residual(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + 0.0


def test_an_outlier_dim_is_flagged_with_its_factor_over_the_median_dim() -> None:
    torch.manual_seed(0)
    x = torch.randn(2, 50, 16)
    x[..., 3] *= 10.0
    model = nn.Sequential(Residual())
    probe = probed(model, x, residual=[tl.module("0")])
    mean_abs = x.abs().mean((0, 1))
    (dim,) = probe.outlier_dims
    assert (dim.label, dim.dim) == ("add_1", 3)
    assert dim.factor == pytest.approx(float(mean_abs[3] / mean_abs.median()), rel=1e-5)
    assert probe.facts()["residual"][0]["outliers"] == [[3, dim.factor]]


def test_padded_tokens_and_queries_are_not_scored_when_the_mask_is_given() -> None:
    torch.manual_seed(0)
    x = torch.randn(2, 6, 8)
    mask = torch.tensor([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]])
    padded = x.clone()
    padded[0, 4:] = 1e4  # garbage in the padded slots
    logits = torch.zeros(2, 1, 6, 6)
    logits[0, :, 4:, :] = torch.tensor([50.0, 0, 0, 0, 0, 0])  # padded queries: all on key 0
    logits[..., 4:] = torch.where(mask[:, None, None, 4:].bool(), 0.0, -math.inf)
    model = nn.Sequential(Residual())
    probe = probed(model, padded, residual=[tl.module("0")], attention_mask=mask)
    (layer,) = probe.residual_layers()
    clean = torch.cat([x[0, :4], x[1]]).abs().mean(0)
    assert max(abs(a - b) for a, b in zip(layer.mean_abs, clean.tolist())) < 1e-6
    (attention,) = probed(
        Softmax(), logits, attention=[tl.func("softmax")], attention_mask=mask
    ).attention_layers()
    # 4 real queries see 4 keys, 6 real queries see 6: uniform everywhere.
    assert attention.masses[0] == pytest.approx((4 * 1 / 4 + 6 * 1 / 6) / 10)
    assert attention.uniform_share == pytest.approx((4 / 4 + 6 / 6) / 10)


def test_a_mask_of_the_wrong_shape_skips_the_site_and_says_so() -> None:
    probe = probed(
        Softmax(),
        torch.zeros(1, 1, 4, 4),
        attention=[tl.func("softmax")],
        attention_mask=torch.ones(1, 5),
    )
    (skipped,) = probe.facts()["skipped"]
    assert skipped["reason"] == (
        "attention_mask has shape (1, 5) but this value has batch 1 and 4 positions."
    )


def test_statistics_accumulate_over_captures_until_reset() -> None:
    probe = tl.debug.SinkProbe(attention=[tl.func("softmax")])
    plan = tl.options.CaptureOptions(hooks=probe.hook_plan())
    sharp, flat = torch.zeros(1, 1, 4, 4), torch.zeros(1, 1, 4, 4)
    sharp[..., 0] = 30.0
    tl.trace(Softmax(), sharp, capture=plan)
    tl.trace(Softmax(), flat, capture=plan)
    (layer,) = probe.attention_layers()
    assert layer.masses[0] == pytest.approx((1.0 + 0.25) / 2)
    assert probe.facts()["attention"][0]["calls"] == 2
    probe.reset()
    assert probe.facts()["attention"] == []


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"attention": ["softmax"]},
        {"attention": [tl.func("softmax")], "sink_mass": 0.0},
        {"residual": [tl.module("x")], "outlier_factor": 0.5},
        {"attention": [tl.func("softmax")], "attention_mask": torch.ones(4)},
    ],
    ids=["no-selectors", "string-selector", "zero-sink-mass", "factor-below-1", "1d-mask"],
)
def test_bad_arguments_raise_a_typed_error(kwargs) -> None:
    with pytest.raises(DiagnosticArgumentError, match="SinkProbe|must be"):
        tl.debug.SinkProbe(**kwargs)
