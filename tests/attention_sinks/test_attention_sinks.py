"""tl.debug.attention_sinks: site discovery, tokens, patterns, fused-attention guidance, and
its report's views."""

from __future__ import annotations

import json
import math

import pytest
import torch
from torch import nn

import torchlens_nb as tl
from tests import models
from torchlens_nb.debug.attention_sinks._attention_sinks import find_blocks
from torchlens_nb.errors import DiagnosticArgumentError
from torchlens_nb.report._attention_sinks import AttentionLayer, AttentionSinksReport, ResidualLayer


def test_minilm_report_names_cls_sinks_and_carries_the_real_patterns(
    minilm, minilm_batch, minilm_tokenizer
) -> None:
    report = tl.debug.attention_sinks(minilm, minilm_batch, minilm_tokenizer, sample=1)
    assert report.status == "flagged"
    assert [layer.module for layer in report.layers] == [
        f"encoder.layer.{i}.attention.self" for i in range(6)
    ]
    assert [r.module for r in report.residual] == [f"encoder.layer.{i}" for i in range(6)]
    assert report.tokens[:3] == ("[CLS]", "a", "quick") and len(report.tokens) == 16
    assert report.lead.startswith("40 of 72 heads are attention sinks (40 on position 0 '[CLS]')")
    heads = report.to_pandas("heads")
    assert set(heads[heads.is_sink].token) == {"[CLS]"}
    # Sample 1 has 16 real tokens; its decoded pattern matches HF's own attentions.
    with torch.no_grad():
        attentions = minilm(**minilm_batch, output_attentions=True).attentions
    assert report.patterns.positions == tuple(range(16))
    expected = attentions[3][1, 4]
    decoded = torch.tensor(report.pattern(3, 4))
    assert bool(((decoded - expected).abs() <= expected.sqrt() / 255 + 1 / 510**2 + 1e-6).all())
    assert {o.dim for o in report.outlier_dims} == {157, 223}
    assert [f.code for f in report.findings] == ["attention_sinks", "outlier_residual_dims"]


def test_padding_is_cut_from_the_shown_pattern(minilm, minilm_batch) -> None:
    report = tl.debug.attention_sinks(minilm, minilm_batch, sample=0)
    assert report.patterns.positions == tuple(range(9))  # 9 real tokens, 7 pads
    assert report.tokens[0] == "#101" and report.tokens[-1] == "#0"  # [CLS] ... [PAD] ids
    assert sum(report.pattern(2, 0)[0]) == pytest.approx(1.0, abs=0.02)


def test_gpt2_blocks_and_causal_softmaxes_are_found_by_themselves(tiny_gpt2) -> None:
    report = tl.debug.attention_sinks(
        tiny_gpt2, {"input_ids": torch.arange(12)[None]}, tokens=[f"t{i}" for i in range(12)]
    )
    assert [r.module for r in report.residual] == ["transformer.h.0", "transformer.h.1"]
    assert [(layer.module, layer.is_causal) for layer in report.layers] == [
        ("transformer.h.0.attn", True),
        ("transformer.h.1.attn", True),
    ]
    assert report.tokens[5] == "t5" and len(report.layers[0].positions) == 4


def test_fused_sdpa_is_unavailable_and_says_how_to_switch() -> None:
    model = models.tiny_gpt2()
    model.set_attn_implementation("sdpa")
    report = tl.debug.attention_sinks(model, {"input_ids": torch.arange(6)[None]})
    assert report.status == "unavailable" and report.layers == ()
    (missing,) = report.unavailable
    assert missing.code == "fused_sdpa"
    assert "scaled_dot_product_attention 2 times" in missing.reason
    assert 'model.set_attn_implementation("eager")' in missing.reason
    assert report.exits[0].code == 'model.set_attn_implementation("eager")'
    assert [r.module for r in report.residual] == ["transformer.h.0", "transformer.h.1"]


def test_fused_sdpa_recomputed_gives_the_eager_report() -> None:
    inputs = {"input_ids": torch.arange(6)[None]}
    eager = tl.debug.attention_sinks(models.tiny_gpt2(), inputs)
    model = models.tiny_gpt2()
    model.set_attn_implementation("sdpa")
    report = tl.debug.attention_sinks(model, inputs, fused_attention="recompute")
    assert report.status == eager.status and report.unavailable == ()
    assert [layer.label for layer in report.layers] == [
        "scaled_dot_product_attention_1",
        "scaled_dot_product_attention_2",
    ]
    assert [(layer.module, layer.is_causal) for layer in report.layers] == [
        ("transformer.h.0.attn", True),
        ("transformer.h.1.attn", True),
    ]
    for fused, reference in zip(report.layers, eager.layers):
        assert fused.positions == reference.positions
        assert fused.masses == pytest.approx(reference.masses, abs=1e-6)
    assert report.patterns is not None and report.patterns.levels == eager.patterns.levels
    fused_rows, eager_rows = report.pattern(1, 2), eager.pattern(1, 2)
    for fused_row, eager_row in zip(fused_rows, eager_rows):  # the same bytes, up to one
        assert fused_row == pytest.approx(eager_row, abs=2 / 255)  # rounding step at an edge
    assert not any("not covered" in note for note in report.disclosures)


def test_the_fused_report_offers_the_recompute() -> None:
    model = models.tiny_gpt2()
    model.set_attn_implementation("sdpa")
    report = tl.debug.attention_sinks(model, {"input_ids": torch.arange(6)[None]})
    assert [e.code for e in report.exits] == [
        'model.set_attn_implementation("eager")',
        "tl.debug.attention_sinks(model, inputs, fused_attention='recompute')",
    ]


def test_blocks_are_the_longest_list_of_identical_composite_modules() -> None:
    layer = nn.TransformerEncoderLayer(16, 2, 32, batch_first=True)
    encoder = nn.TransformerEncoder(layer, 3, enable_nested_tensor=False)
    assert find_blocks(encoder) == ("layers.0", "layers.1", "layers.2")
    assert find_blocks(nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))) == ()
    assert find_blocks(models.tiny_gpt2(n_layer=3)) == (
        "transformer.h.0",
        "transformer.h.1",
        "transformer.h.2",
    )


def test_a_model_without_attention_probabilities_says_why() -> None:
    encoder = nn.TransformerEncoder(
        nn.TransformerEncoderLayer(16, 2, 32, batch_first=True), 2, enable_nested_tensor=False
    ).eval()
    report = tl.debug.attention_sinks(encoder, torch.randn(1, 5, 16))
    assert (report.status, report.subject) == ("unavailable", "TransformerEncoder (27 ops)")
    assert report.unavailable[0].code == "fused_mha"
    assert report.lead == (
        "no attention probabilities: nn.MultiheadAttention computes them inside one call (2 calls)."
    )
    assert report.residual and report.residual[0].module == "layers.0"


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"tokens": ["a", "b"]}, "tokens has 2 strings but the attention covers 12 positions"),
        ({"tokens": [["x"] * 12], "sample": 1}, "sample must be a batch index in \\[0, 1\\)"),
        ({"tokens": 42}, "tokens must be a list of strings"),
        ({"max_pattern_bytes": 0}, "max_pattern_bytes must be an int in \\[1, 6291456\\]"),
        ({"residual": ["transformer.h.0"]}, "takes selectors such as tl.func"),
    ],
    ids=["wrong-length", "sample-out-of-range", "not-strings", "zero-budget", "string-site"],
)
def test_bad_arguments_raise_a_typed_error(tiny_gpt2, kwargs, match) -> None:
    with pytest.raises(DiagnosticArgumentError, match=match):
        tl.debug.attention_sinks(tiny_gpt2, {"input_ids": torch.arange(12)[None]}, **kwargs)


def test_the_report_is_json_safe_with_nan_and_its_card_is_bounded() -> None:
    layers = tuple(
        AttentionLayer(
            f"softmax_{i}", f"h.{i}", (0, 1), (math.nan, math.inf), (False, False), True, 0.5
        )
        for i in range(40)
    )
    residual = (ResidualLayer("add_1", "h.0", (1.0, math.nan, -math.inf), math.nan, ()),)
    report = AttentionSinksReport(
        subject="made up",
        status="none_flagged",
        lead="x" * 500,
        layers=layers,
        residual=residual,
        tokens=("a", "b"),
        disclosures=tuple(f"note {i}" for i in range(10)),
    )
    json.dumps(report.to_dict(), allow_nan=False)
    card = report.card()
    assert len(card.splitlines()) <= 6 and max(map(len, card.splitlines())) <= 240
