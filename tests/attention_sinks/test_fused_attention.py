"""SinkProbe on fused attention: ``F.scaled_dot_product_attention`` and ``nn.MultiheadAttention``
never materialise their probabilities at a softmax site. By default the probe names each fused
call it could not see and how to see it; with ``fused_attention="recompute"`` and the capture
inside ``with probe:`` it computes the probabilities from the call's own arguments, and they
match an eager reference."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import torchlens_nb as tl
from tests.zoo.archs import ENCODER_CONFIG
from torchlens_nb.errors import DiagnosticArgumentError, ForwardError

HEADS, TOKENS, WIDTH = 4, 6, 8


class Attention(nn.Module):
    """``forward(q, k, v)``: one attention call over ``(batch, heads, tokens, width)``, fused
    (``F.scaled_dot_product_attention``) or eager (``softmax(q @ k^T / sqrt(d) + mask) @ v``)."""

    def __init__(self, *, fused: bool, is_causal: bool) -> None:
        super().__init__()
        self.fused, self.is_causal = fused, is_causal

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        if self.fused:
            return F.scaled_dot_product_attention(q, k, v, is_causal=self.is_causal)
        scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
        if self.is_causal:
            causal = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()
            scores = scores.masked_fill(~causal, float("-inf"))
        return torch.softmax(scores, dim=-1) @ v


class Block(nn.Module):
    """The attention inside a named submodule, so sites carry a module address."""

    def __init__(self, attention: nn.Module) -> None:
        super().__init__()
        self.attn = attention

    def forward(self, *args: torch.Tensor) -> torch.Tensor:
        return self.attn(*args)


def planted_qkv() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random q, k, v (2 samples) where head 0's queries all point at key 0 (a planted sink)."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, HEADS, TOKENS, WIDTH) for _ in range(3))
    q[:, 0] = 1.0
    k[:, 0, 0] = 3.0  # q . k0 / sqrt(8) = 8 * 3 / 2.83 = 8.5 logits above the rest
    return q, k, v


def run(model: nn.Module, inputs, probe: tl.debug.SinkProbe, *, inside: bool) -> tl.Trace:
    options = tl.options.CaptureOptions(hooks=probe.hook_plan())
    if not inside:
        return tl.trace(model, inputs, capture=options)
    with probe:
        return tl.trace(model, inputs, capture=options)


def head_stats(probe: tl.debug.SinkProbe) -> list[tuple[tuple[int, ...], tuple[float, ...]]]:
    return [(layer.positions, layer.masses) for layer in probe.attention_layers()]


# ----- disclose (the default) ------------------------------------------------------------------
def test_sdpa_is_named_as_unseen_with_how_to_see_it() -> None:
    probe = tl.debug.SinkProbe(attention=[tl.func("softmax")])
    run(Block(Attention(fused=True, is_causal=True)), planted_qkv(), probe, inside=False)
    assert probe.attention_layers() == ()
    assert probe.sink_heads == ()
    (unseen,) = probe.unseen_attention
    assert (unseen.label, unseen.module, unseen.func, unseen.calls) == (
        "scaled_dot_product_attention_1",
        "attn",
        "scaled_dot_product_attention",
        1,
    )
    assert unseen.reason == (
        "fused scaled_dot_product_attention never materialises its attention probabilities: "
        'use eager attention (Hugging Face: attn_implementation="eager"), or '
        "SinkProbe(..., fused_attention='recompute') with the capture inside `with probe:`."
    )
    (skipped,) = probe.facts()["skipped"]
    assert skipped == {
        "label": "scaled_dot_product_attention_1",
        "module": "attn",
        "kind": "attention",
        "calls": 1,
        "reason": unseen.reason,
    }


def test_multihead_attention_is_named_as_unseen_with_need_weights() -> None:
    torch.manual_seed(0)
    x = torch.randn(2, TOKENS, 16)
    probe = tl.debug.SinkProbe(attention=[tl.func("softmax")])
    run(Block(nn.MultiheadAttention(16, HEADS, batch_first=True)), (x, x, x), probe, inside=False)
    assert probe.sink_heads == ()
    (unseen,) = probe.unseen_attention
    assert (unseen.label, unseen.module, unseen.func) == (
        "multi_head_attention_forward_1",
        "attn",
        "multi_head_attention_forward",
    )
    assert "need_weights=True, average_attn_weights=False" in unseen.reason
    assert "fused_attention='recompute'" in unseen.reason


# ----- recompute (opt in) ----------------------------------------------------------------------
@pytest.mark.parametrize("is_causal", [True, False], ids=["causal", "full"])
def test_recomputed_sdpa_probabilities_match_the_eager_reference(is_causal: bool) -> None:
    qkv = planted_qkv()
    eager = tl.debug.SinkProbe(attention=[tl.func("softmax")])
    run(Block(Attention(fused=False, is_causal=is_causal)), qkv, eager, inside=False)
    fused = tl.debug.SinkProbe(attention=[tl.func("softmax")], fused_attention="recompute")
    model = Block(Attention(fused=True, is_causal=is_causal))
    trace = run(model, qkv, fused, inside=True)
    assert fused.unseen_attention == ()
    ((positions, masses),) = head_stats(fused)
    ((eager_positions, eager_masses),) = head_stats(eager)
    assert positions == eager_positions
    assert masses == pytest.approx(eager_masses, abs=1e-6)
    (layer,) = fused.attention_layers()
    assert (layer.label, layer.module, layer.is_causal) == (
        "scaled_dot_product_attention_1",
        "attn",
        is_causal,
    )
    assert [(s.head, s.position) for s in fused.sink_heads] == [(0, 0)]
    assert torch.equal(trace.output, model(*qkv))  # the model's own result is untouched


def test_recomputed_multihead_weights_match_need_weights() -> None:
    torch.manual_seed(0)
    x = torch.randn(2, TOKENS, 16)
    mha = nn.MultiheadAttention(16, HEADS, batch_first=True, dropout=0.5).eval()
    probe = tl.debug.SinkProbe(attention=[tl.func("softmax")], fused_attention="recompute")
    model = Block(mha)
    trace = run(model, (x, x, x), probe, inside=True)
    # Eager reference: the per-head weights nn.MultiheadAttention returns when asked.
    _, weights = mha(x, x, x, need_weights=True, average_attn_weights=False)
    masses, positions = weights.detach().mean(dim=(0, 2)).max(dim=-1)  # mean over queries
    ((got_positions, got_masses),) = head_stats(probe)
    assert got_positions == tuple(positions.tolist())
    assert got_masses == pytest.approx(masses.tolist(), abs=1e-6)
    assert all(torch.equal(a, b) for a, b in zip(trace.output, model(x, x, x)))  # untouched


def test_hugging_face_sdpa_matches_eager_attention() -> None:
    from transformers import BertConfig, BertModel

    def bert(implementation: str) -> nn.Module:
        torch.manual_seed(0)
        return BertModel(BertConfig(**ENCODER_CONFIG, attn_implementation=implementation)).eval()

    inputs = {"input_ids": torch.arange(10)[None] % 64}
    eager = tl.debug.SinkProbe(attention=[tl.func("softmax")])
    run(bert("eager"), inputs, eager, inside=False)
    fused = tl.debug.SinkProbe(attention=[tl.func("softmax")], fused_attention="recompute")
    run(bert("sdpa"), inputs, fused, inside=True)
    assert [layer.module for layer in fused.attention_layers()] == [
        "encoder.layer.0.attention.self",
        "encoder.layer.1.attention.self",
    ]
    assert len(head_stats(eager)) == 2
    for (positions, masses), (eager_positions, eager_masses) in zip(
        head_stats(fused), head_stats(eager)
    ):
        assert positions == eager_positions
        assert masses == pytest.approx(eager_masses, abs=1e-5)


def test_recompute_without_the_with_block_says_so() -> None:
    probe = tl.debug.SinkProbe(attention=[tl.func("softmax")], fused_attention="recompute")
    run(Block(Attention(fused=True, is_causal=True)), planted_qkv(), probe, inside=False)
    (unseen,) = probe.unseen_attention
    assert unseen.reason.startswith(
        "fused_attention='recompute' computes the probabilities only while the capture runs "
        "inside `with probe:`"
    )


def test_recompute_outside_a_capture_says_the_hook_plan_is_missing() -> None:
    probe = tl.debug.SinkProbe(attention=[tl.func("softmax")], fused_attention="recompute")
    with probe:
        Attention(fused=True, is_causal=True)(*planted_qkv())
    (unseen,) = probe.unseen_attention
    assert (unseen.label, unseen.func, unseen.calls) == (
        "scaled_dot_product_attention",
        "scaled_dot_product_attention",
        1,
    )
    assert "hooks=probe.hook_plan()" in unseen.reason


def test_the_mode_is_removed_when_the_forward_raises() -> None:
    class Raises(nn.Module):
        def forward(self, q, k, v):
            F.scaled_dot_product_attention(q, k, v)
            raise ValueError("boom")

    probe = tl.debug.SinkProbe(attention=[tl.func("softmax")], fused_attention="recompute")
    before = torch._C._len_torch_function_stack()
    with pytest.raises(ValueError, match="boom"):
        with probe:
            Raises()(*planted_qkv())
    assert torch._C._len_torch_function_stack() == before
    with pytest.raises(ForwardError, match="boom"):
        run(Raises(), planted_qkv(), probe, inside=True)
    assert torch._C._len_torch_function_stack() == before


def test_bad_fused_attention_and_nested_with_raise_typed_errors() -> None:
    with pytest.raises(DiagnosticArgumentError, match="fused_attention must be 'disclose' or"):
        tl.debug.SinkProbe(attention=[tl.func("softmax")], fused_attention="eager")
    probe = tl.debug.SinkProbe(attention=[tl.func("softmax")], fused_attention="recompute")
    with probe:
        with pytest.raises(DiagnosticArgumentError, match="already inside `with probe:`"):
            probe.__enter__()


class MaskedSdpa(nn.Module):
    """SDPA under a boolean mask (True = attend) that hides every key from sample 1's last
    query and that query's token from every other query: a padded query, as ModernBERT's
    sdpa path builds it. SDPA returns a finite output for the hidden row."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        keep = torch.ones(2, 1, TOKENS, TOKENS, dtype=torch.bool)
        keep[1, :, :, -1] = False  # nobody attends to the pad token
        keep[1, :, -1, :] = False  # the pad query attends to nothing
        return F.scaled_dot_product_attention(q, k, v, attn_mask=keep)


def test_a_fully_masked_query_row_is_left_out_and_the_rest_is_scored() -> None:
    q, k, v = planted_qkv()
    probe = tl.debug.SinkProbe(attention=[tl.func("softmax")], fused_attention="recompute")
    trace = run(Block(MaskedSdpa()), (q, k, v), probe, inside=True)
    assert torch.isfinite(trace.output).all()  # SDPA itself is finite there
    assert probe.facts()["skipped"] == []
    (layer,) = probe.attention_layers()
    assert len(layer.masses) == HEADS
    assert probe.facts()["attention"][0]["rows_scored"] == 2 * TOKENS - 1  # one row left out
    # the reference: the same softmax over the visible keys, mean over the 11 visible rows
    logits = q @ k.transpose(-1, -2) / WIDTH**0.5
    logits[1, :, :, -1] = float("-inf")
    probs = logits.softmax(-1)
    rows = torch.cat([probs[0], probs[1, :, :-1]], dim=1)  # (heads, 11, keys)
    expected = rows.mean(dim=1).max(dim=-1)
    assert layer.masses == pytest.approx(expected.values.tolist(), abs=1e-6)
    assert layer.positions == tuple(expected.indices.tolist())


class EagerThenFused(nn.Module):
    """Two attention layers over the same q, k, v: eager softmax, then fused SDPA."""

    def __init__(self) -> None:
        super().__init__()
        self.eager = Block(Attention(fused=False, is_causal=True))
        self.fused = Block(Attention(fused=True, is_causal=True))

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return self.eager(q, k, v) + self.fused(q, k, v)


def test_an_attention_site_left_unscored_is_in_the_lead() -> None:
    report = tl.debug.attention_sinks(EagerThenFused(), planted_qkv())
    assert [layer.module for layer in report.layers] == ["eager.attn"]
    assert report.lead.endswith(
        " 1 attention site was not scored (scaled_dot_product_attention_1: fused "
        "scaled_dot_product_attention never materialises its attention probabilities: use "
        'eager attention (Hugging Face: attn_implementation="eager"), or '
        "SinkProbe(..., fused_attention='recompute') with the capture inside `with probe:`)."
    )
