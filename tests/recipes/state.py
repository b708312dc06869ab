"""A bitwise snapshot of everything a recipe promises not to change about the caller's model."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


def snapshot(model: nn.Module) -> dict[str, Any]:
    """Parameters, buffers, ``.grad`` (values and object identity), train/eval flags, RNG."""
    return {
        "state": {k: v.detach().clone() for k, v in model.state_dict().items()},
        "grads": {
            n: (id(p.grad), p.grad.detach().clone()) if p.grad is not None else None
            for n, p in model.named_parameters()
        },
        "training": [m.training for m in model.modules()],
        "rng": torch.get_rng_state(),
    }


def assert_untouched(before: dict[str, Any], model: nn.Module) -> None:
    after = snapshot(model)
    assert before["training"] == after["training"]
    assert torch.equal(before["rng"], after["rng"])
    assert before["state"].keys() == after["state"].keys()
    for key, value in before["state"].items():
        assert torch.equal(value, after["state"][key]), key
    for name, grad in before["grads"].items():
        now = after["grads"][name]
        if grad is None:
            assert now is None, name
        else:
            assert now is not None and grad[0] == now[0] and torch.equal(grad[1], now[1]), name
