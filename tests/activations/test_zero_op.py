"""The zero-op guarantee: probes observe through the hook seam and add nothing to a trace."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import torchlens_nb as tl
from tests import models
from tests.attention_sinks.test_sink_probe import TinyLayer


def all_probes() -> tuple[tl.options.HookPlan, tuple]:
    probes = (
        tl.debug.RangeProbe(
            {
                tl.func("relu"): (0.0, 1.0),
                tl.func("softmax"): (0.0, 1.0),
                tl.module("*"): (-1.0, 1.0),
            }
        ),
        tl.debug.LivenessProbe([tl.func("relu", "gelu", "linear")]),
        tl.debug.SinkProbe(attention=[tl.func("softmax")], residual=[tl.module("*")]),
    )
    return tl.options.HookPlan.combine(p.hook_plan() for p in probes), probes


def tiny_layer() -> nn.Module:
    torch.manual_seed(0)
    tiny = nn.Sequential()
    tiny.add_module("layer", TinyLayer())
    return tiny


CASES = {
    "mlp": (models.mlp, lambda: torch.randn(4, 8)),
    "batchnorm-cnn-train": (lambda: models.small_cnn().train(), lambda: torch.randn(2, 3, 8, 8)),
    "tiny-causal-layer": (tiny_layer, lambda: torch.randn(2, 6, 8)),
    "tiny-gpt2": (models.tiny_gpt2, lambda: {"input_ids": torch.arange(10)[None]}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_probes_add_no_op_and_leave_outputs_bitwise_equal(case: str) -> None:
    build, make_input = CASES[case]
    model = build()
    torch.manual_seed(1)
    inputs = make_input()
    plain = tl.trace(model, inputs)
    plan, probes = all_probes()
    probed = tl.trace(model, inputs, capture=tl.options.CaptureOptions(hooks=plan))
    assert [(op.label, op.parents) for op in probed] == [(op.label, op.parents) for op in plain]
    first = lambda out: out if isinstance(out, torch.Tensor) else out[0]  # noqa: E731
    assert torch.equal(first(probed.output), first(plain.output))
    with torch.no_grad():
        direct = model(**inputs) if isinstance(inputs, dict) else model(inputs)
    assert torch.equal(first(probed.output), first(direct))
    assert (
        sum(len(p.stats) if hasattr(p, "stats") else len(p.facts()["residual"]) for p in probes) > 0
    )  # the probes did observe something


class Raises(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        torch.relu(self.fc(x))
        raise RuntimeError("boom after relu")


def test_a_forward_that_raises_leaves_no_hook_and_keeps_what_was_observed() -> None:
    model = Raises()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    probe = tl.debug.LivenessProbe([tl.func("relu")])
    with pytest.raises(tl.errors.ForwardError, match="boom after relu"):
        tl.trace(
            model, torch.randn(2, 4), capture=tl.options.CaptureOptions(hooks=probe.hook_plan())
        )
    assert [s.label for s in probe.stats] == ["relu_1"]
    assert not nn.modules.module._global_forward_hooks
    assert not nn.modules.module._global_forward_pre_hooks
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
