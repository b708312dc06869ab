"""``tl.bridge.transformers.record_attention`` on 2-layer Hugging Face configs built from config
(random init, no download): what it records equals eager ``output_attentions=True``, in eager and
sdpa alike, each SDPA call carries its cross-check, sink logits skip it with the reason, and the
patched attention lookup is restored whatever happens inside the block."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
import transformers
from torch import nn
from torch.overrides import _get_current_function_mode_stack
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS, AttentionInterface

import torchlens_nb as tl
from tests.capture.golden_models import hf_bert, hf_gpt2, hf_llama
from torchlens_nb.bridge.transformers._record import S_AUX_REASON
from torchlens_nb.errors import DiagnosticArgumentError, ModelTypeError

record_attention = tl.bridge.transformers.record_attention
ORIGINAL_LOOKUP = AttentionInterface.__dict__["get_interface"]


def padded_bert() -> tuple[nn.Module, dict[str, torch.Tensor]]:
    """BERT on two sequences, the second right-padded by 5 of 16 tokens."""
    model, inputs = hf_bert()
    ids = torch.cat([inputs["input_ids"], inputs["input_ids"].flip(-1)])
    mask = torch.ones_like(ids)
    mask[1, -5:] = 0
    return model, {"input_ids": ids, "attention_mask": mask}


MODELS: dict[str, tuple[Callable[[], tuple[nn.Module, Any]], tuple[str, ...]]] = {
    "gpt2": (hf_gpt2, ("transformer.h.0.attn", "transformer.h.1.attn")),
    "llama": (hf_llama, ("model.layers.0.self_attn", "model.layers.1.self_attn")),  # 4 q, 2 kv
    "bert": (hf_bert, ("encoder.layer.0.attention.self", "encoder.layer.1.attention.self")),
    "bert_padded": (
        padded_bert,
        ("encoder.layer.0.attention.self", "encoder.layer.1.attention.self"),
    ),
}


def tiny_gpt_oss() -> tuple[nn.Module, dict[str, torch.Tensor]]:
    """GPT-OSS, whose attention passes its learned sink logits as ``s_aux`` (eager only:
    ``_supports_sdpa = False`` in transformers, since SDPA has no sink column)."""
    torch.manual_seed(0)
    config = transformers.GptOssConfig(
        num_hidden_layers=2, hidden_size=32, intermediate_size=32, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, num_local_experts=2, num_experts_per_tok=1,
        vocab_size=64, max_position_embeddings=64, sliding_window=4,
        layer_types=["sliding_attention", "full_attention"], attn_implementation="eager",
    )  # fmt: skip
    return transformers.GptOssForCausalLM(config).eval(), {"input_ids": torch.arange(6)[None]}


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
@pytest.mark.parametrize("name", list(MODELS))
def test_recorded_probabilities_equal_eager_output_attentions(
    name: str, implementation: str
) -> None:
    build, sites = MODELS[name]
    model, inputs = build()
    with torch.no_grad():
        reference = model(**inputs, output_attentions=True)  # built with eager attention
        model.set_attn_implementation(implementation)
        with record_attention(model) as recording:
            outputs = model(**inputs)
    assert recording.sites == sites
    assert recording.unrecorded == ()
    for recorded, expected in zip(recording.attentions, reference.attentions, strict=True):
        assert recorded.dtype == torch.float32 and recorded.shape == expected.shape
        torch.testing.assert_close(recorded, expected, rtol=0, atol=1e-5)
        torch.testing.assert_close(
            recorded.sum(-1), torch.ones(recorded.shape[:-1]), rtol=0, atol=1e-5
        )
    torch.testing.assert_close(outputs[0], reference[0], rtol=0, atol=1e-5)  # its own outputs
    statuses = {check.status for check in recording.sdpa_checks}
    if implementation == "sdpa":  # one measured number per SDPA call, near float rounding
        assert statuses == {"checked"}
        assert all(
            c.max_abs_diff is not None and c.max_abs_diff < 1e-5 for c in recording.sdpa_checks
        )
    else:
        assert statuses == {"not_fused"} and len(recording.sdpa_checks) == 2


def test_the_sdpa_check_fires_when_dropout_changed_the_probabilities_the_kernel_used() -> None:
    model, inputs = hf_gpt2()
    model.config.attn_pdrop = 0.5  # GPT-2 hands attn_dropout.p to SDPA's dropout_p in training
    for layer in model.transformer.h:
        layer.attn.attn_dropout.p = 0.5
    model.set_attn_implementation("sdpa")
    model.train()
    torch.manual_seed(0)
    with torch.no_grad(), record_attention(model) as recording:
        model(**inputs)
    errors = [check.max_abs_diff for check in recording.sdpa_checks]
    assert [c.status for c in recording.sdpa_checks] == ["checked", "checked"]
    assert all(e is not None and e > 1e-2 for e in errors), errors  # eval twin: < 1e-5 above


def test_check_sdpa_false_records_and_says_why_there_is_no_number() -> None:
    model, inputs = hf_gpt2()
    model.set_attn_implementation("sdpa")
    with torch.no_grad(), record_attention(model, check_sdpa=False) as recording:
        model(**inputs)
    assert len(recording.attentions) == 2
    assert [(c.status, c.max_abs_diff) for c in recording.sdpa_checks] == [("skipped", None)] * 2
    assert recording.sdpa_checks[0].reason == "record_attention(check_sdpa=False): not measured."


def test_calls_with_sink_logits_are_recorded_and_their_sdpa_check_skipped_with_the_reason() -> None:
    model, inputs = tiny_gpt_oss()
    with torch.no_grad():
        reference = model(**inputs, output_attentions=True)
        with record_attention(model) as recording:
            model(**inputs)
    assert recording.sites == ("model.layers.0.self_attn", "model.layers.1.self_attn")
    assert [(c.status, c.reason) for c in recording.sdpa_checks] == [("skipped", S_AUX_REASON)] * 2
    for recorded, expected in zip(recording.attentions, reference.attentions, strict=True):
        torch.testing.assert_close(recorded, expected, rtol=0, atol=1e-5)
        assert bool((recorded.sum(-1) < 1 - 1e-3).all())  # the sink column took the rest


def test_an_implementation_that_gives_no_probabilities_is_named_with_the_fix(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def manual(module, query, key, value, attention_mask, scaling=None, **kwargs):  # type: ignore[no-untyped-def]
        probabilities = (query @ key.transpose(-1, -2) * scaling).softmax(-1)
        return (probabilities @ value).transpose(1, 2).contiguous(), None  # like flash: no weights

    monkeypatch.setitem(AttentionInterface._global_mapping, "manual_math", manual)
    model, inputs = hf_bert()
    model.set_attn_implementation("manual_math")
    with torch.no_grad(), record_attention(model) as recording:
        model(**inputs)
    assert recording.attentions == () and recording.sdpa_checks == ()
    assert [(c.site, c.implementation) for c in recording.unrecorded] == [
        ("encoder.layer.0.attention.self", "manual_math"),
        ("encoder.layer.1.attention.self", "manual_math"),
    ]
    first = recording.unrecorded[0]
    assert first.reason.startswith(
        "manual_math attention neither returns its probabilities nor calls "
        "scaled_dot_product_attention"
    )
    assert 'attn_implementation="eager" or "sdpa"' in first.reason


def test_a_subscript_lookup_is_recorded_and_a_direct_sdpa_call_is_disclosed() -> None:
    model, _ = hf_gpt2()
    attn = model.transformer.h[0].attn
    torch.manual_seed(0)
    q = torch.randn(1, 4, 6, 16)
    with torch.no_grad(), record_attention(model) as recording:
        ALL_ATTENTION_FUNCTIONS["sdpa"](attn, q, q, q, None, scaling=0.25)  # as SAM models do
        F.scaled_dot_product_attention(q, q, q)  # no attention module asked for it
    assert recording.sites == ("transformer.h.0.attn",)
    assert recording.sdpa_checks[0].status == "checked"
    (outside,) = recording.unrecorded
    assert outside.site == "" and outside.reason.startswith(
        "1 scaled_dot_product_attention calls ran outside this model's attention-interface calls"
    )


class InlineAttention(transformers.PreTrainedModel):
    """A transformers model whose attention is written inline (no attention interface)."""

    config_class = transformers.PretrainedConfig

    def __init__(self, config: transformers.PretrainedConfig) -> None:
        super().__init__(config)
        self.proj = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.proj(x) @ x.transpose(-1, -2), dim=-1) @ x


def test_a_model_that_never_asks_the_attention_interface_is_disclosed_not_empty() -> None:
    model = InlineAttention(transformers.PretrainedConfig())
    with torch.no_grad(), record_attention(model) as recording:
        model(torch.ones(1, 3, 4))
        model(torch.ones(1, 3, 4))
    assert recording.attentions == ()
    (missing,) = recording.unrecorded
    assert missing.reason.startswith(
        "the model ran 2 forward calls but none asked transformers' attention interface"
    )


def test_no_hook_remains_after_an_exception_inside_an_attention_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def interrupted(*args, **kwargs):  # type: ignore[no-untyped-def]
        sdpa_attention_forward(*args, **kwargs)
        raise KeyboardInterrupt  # Ctrl-C while the recompute mode is on

    monkeypatch.setitem(AttentionInterface._global_mapping, "interrupted", interrupted)
    model, inputs = hf_gpt2()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    model.set_attn_implementation("interrupted")
    with pytest.raises(KeyboardInterrupt), record_attention(model):
        model(**inputs)
    assert AttentionInterface.__dict__["get_interface"] is ORIGINAL_LOOKUP
    assert "__getitem__" not in AttentionInterface.__dict__  # inherited again
    assert _get_current_function_mode_stack() == []
    assert not model._forward_pre_hooks
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    with record_attention(model) as again:  # the next recording starts cleanly
        pass
    assert again.attentions == ()


def test_no_hook_remains_after_an_exception_in_the_block() -> None:
    model, inputs = hf_gpt2()
    with pytest.raises(ValueError, match="after the forward"), record_attention(model) as rec:
        model(**inputs)
        raise ValueError("after the forward")
    assert len(rec.attentions) == 2
    assert AttentionInterface.__dict__["get_interface"] is ORIGINAL_LOOKUP


def test_other_models_are_refused_with_a_typed_error_before_anything_is_patched() -> None:
    with pytest.raises(ModelTypeError, match="needs a Hugging Face transformers model"):
        record_attention(nn.Linear(2, 2))
    model, _ = hf_gpt2()
    with pytest.raises(DiagnosticArgumentError, match="check_sdpa must be True or False"):
        record_attention(model, check_sdpa="yes")  # type: ignore[arg-type]
    with record_attention(model):
        with pytest.raises(DiagnosticArgumentError, match="record one model at a time"):
            record_attention(model).__enter__()
    assert AttentionInterface.__dict__["get_interface"] is ORIGINAL_LOOKUP


def test_importing_torchlens_nb_does_not_import_transformers() -> None:
    code = "import sys, torchlens_nb; print('transformers' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.strip() == "False", result.stderr


def test_a_recording_of_sdpa_gives_the_sink_statistics_of_eager_attention() -> None:
    model, inputs = hf_gpt2()
    eager = tl.debug.attention_sinks(model, inputs, sink_mass=0.2)
    model.set_attn_implementation("sdpa")
    with torch.no_grad(), record_attention(model) as recording:
        model(**inputs)
    probe = tl.debug.SinkProbe(recording=recording, sink_mass=0.2)
    from_recording = tl.debug.attention_sinks(model, inputs, recording=recording, sink_mass=0.2)
    expected = [(layer.positions, layer.masses) for layer in eager.layers]
    for layers in (probe.attention_layers(), from_recording.layers):
        assert [layer.label for layer in layers] == list(recording.sites)
        assert [layer.positions for layer in layers] == [p for p, _ in expected]
        for layer, (_, masses) in zip(layers, expected, strict=True):
            assert layer.masses == pytest.approx(masses, abs=1e-6)
    assert [(s.head, s.position) for s in from_recording.sink_heads] == [
        (s.head, s.position) for s in eager.sink_heads
    ]
    assert len(from_recording.residual) == 2  # the capture still read the block outputs


def test_a_probe_refuses_something_that_is_not_a_recording() -> None:
    with pytest.raises(DiagnosticArgumentError, match="recording must have .sites"):
        tl.debug.SinkProbe(recording=[torch.ones(1, 1, 2, 2)])
