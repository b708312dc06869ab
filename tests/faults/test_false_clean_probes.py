"""No false clean from the gradient and attention probes: what they could not read is named.

Each case is a model whose interesting part runs where the tool cannot see it: ops inside a
custom ``torch.autograd.Function`` (no gradient is recorded for them), attention fused into one
call (``nn.TransformerEncoderLayer``, a Hugging Face model's default ``sdpa``). The verdict must
not be clean, and the unseen part must be named with its fix.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import torchlens_nb as tl
from tests.zoo.archs import archs
from torchlens_nb.options import CaptureOptions

pytestmark = pytest.mark.fault("no_false_clean")


class Scale(torch.autograd.Function):
    """``2 * tanh(x)`` with a hand-written backward: its forward ops run without autograd."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        y = torch.tanh(x)
        ctx.save_for_backward(y)
        return y * 2

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        (y,) = ctx.saved_tensors
        return grad * 2 * (1 - y * y)


class CustomFunctionNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(Scale.apply(self.a(x)))


def test_grad_health_over_a_custom_autograd_function_names_its_ops() -> None:
    trace = tl.trace(CustomFunctionNet(), torch.ones(2, 4), capture=CaptureOptions(save_grads=True))
    trace.backward(trace.output.sum())
    report = tl.debug.grad_health(trace)
    # tanh_1 and mul_1 ran inside Scale.forward: two ops whose gradients no backward records.
    assert report.to_pandas().attrs["unrecorded_ops"] == ["tanh_1", "mul_1"]
    assert report.status != "clean"
    assert [u.code for u in report.unavailable] == ["gradients_not_recorded"]
    assert trace.audit().status != "clean"


def test_sink_probe_names_the_attention_of_a_transformer_encoder_layer() -> None:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 4, 32, batch_first=True).eval()
    probe = tl.debug.SinkProbe(attention=[tl.func("softmax")])
    tl.trace(layer, torch.randn(1, 6, 16), capture=CaptureOptions(hooks=probe.hook_plan()))
    assert probe.sink_heads == () and probe.attention_layers() == ()
    assert [(u.label, u.module) for u in probe.unseen_attention] == [
        ("multi_head_attention_forward_1", "self_attn")
    ]


def test_sink_probe_names_every_sdpa_layer_of_a_hugging_face_model() -> None:
    (llama,) = [arch for arch in archs() if arch.name == "llama"]  # default attention: sdpa
    probe = tl.debug.SinkProbe(attention=[tl.func("softmax")])
    tl.trace(llama.build(), llama.inputs(), capture=CaptureOptions(hooks=probe.hook_plan()))
    assert probe.sink_heads == ()
    assert [u.module for u in probe.unseen_attention] == [
        "model.layers.0.self_attn",
        "model.layers.1.self_attn",
    ]
    assert all("attn_implementation" in u.reason for u in probe.unseen_attention)
