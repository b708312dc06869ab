"""Modules that run during the forward but are not among ``model.named_modules()``."""

from __future__ import annotations

import torch
from torch import nn

import torchlens_nb as tl


class _Rotate(nn.Module):
    """Stateless, like transformers 5.x's kernelized ``apply_rotary_pos_emb`` (a ``Func``)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([-x[..., 1:], x[..., :1]], dim=-1)


ROTATE = _Rotate()  # one instance for the whole process, owned by no model
UNREGISTERED = nn.Linear(4, 4)  # a layer the model uses but does not hold: never trained


class Attention(nn.Module):
    def __init__(self, *, use_unregistered: bool = False) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.use_unregistered = use_unregistered

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = ROTATE(self.proj(x))
        return UNREGISTERED(x) if self.use_unregistered else x * 2


def test_a_stateless_module_outside_the_model_is_transparent() -> None:
    model = nn.Sequential(Attention())
    trace = tl.trace(model, torch.randn(2, 4))
    by_func = {op.func: op for op in trace if not op.is_input}
    # the rotation's ops belong to the layer that called it, with their own source line
    assert by_func["cat"].module == "0"
    assert by_func["cat"].module_stack == ("0",)
    assert by_func["cat"].file is not None and by_func["cat"].file.endswith(__file__[-30:])
    assert [call.address for call in trace.module_calls] == ["0.proj", "0", ""]


def test_a_layer_outside_the_model_is_named_as_such() -> None:
    model = nn.Sequential(Attention(use_unregistered=True))
    trace = tl.trace(model, torch.randn(2, 4))
    linears = [op for op in trace if op.func == "linear"]
    assert [op.module for op in linears] == ["0.proj", "?Linear"]
    assert "?Linear" in [call.address for call in trace.module_calls]
