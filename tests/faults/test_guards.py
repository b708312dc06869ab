"""The guards can fail: each kind of corruption or leak the suite claims to catch is planted
here by hand, and ``untouched`` must name it."""

from __future__ import annotations

import random
from collections.abc import Callable

import numpy as np
import pytest
import torch
from torch import nn

from tests.faults._guards import untouched
from tests.faults.fault_models import Owned, owned

pytestmark = pytest.mark.fault("no_leak")


def flip_one_bit(user: Owned) -> None:
    with torch.no_grad():
        weight = user.model[0].weight.view(-1)
        weight[0] = -weight[0]


class Passthrough(torch.overrides.TorchFunctionMode):
    """A function mode that changes nothing but sits on the mode stack."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


entered_modes: list[Passthrough] = []


def push_mode(user: Owned) -> None:
    mode = Passthrough()
    mode.__enter__()
    entered_modes.append(mode)


PLANTS: list[tuple[str, Callable[[Owned], object], str]] = [
    ("weight-sign", flip_one_bit, "model0 param 0.weight"),
    ("running-mean", lambda u: u.model[1].running_mean.add_(1e-7), "model0 buffer 1.running_mean"),
    ("grad", lambda u: u.model[0].weight.grad.mul_(2), "model0 grad 0.weight"),
    ("eval-mode", lambda u: u.model[3].eval(), "model0 training 3"),
    (
        "adam-moment",
        lambda u: next(iter(u.optimizer.state.values()))["exp_avg"].zero_(),
        "optimizer0 state",
    ),
    ("learning-rate", lambda u: u.optimizer.param_groups[0].update(lr=1.0), "optimizer0 state"),
    ("input", lambda u: u.x.mul_(-0.0), "input tensor 0"),
    ("torch-rng", lambda u: torch.rand(1), "rng torch"),
    ("python-rng", lambda u: random.random(), "rng python"),
    ("numpy-rng", lambda u: np.random.rand(), "rng numpy"),
    (
        "module-hook",
        lambda u: u.model[2].register_forward_hook(lambda *a: None),
        "model0 2 _forward_hooks: 0 -> 1",
    ),
    (
        "global-module-hook",
        lambda u: nn.modules.module.register_module_forward_pre_hook(lambda *a: None),
        "global _global_forward_pre_hooks",
    ),
    (
        "tensor-hook",
        lambda u: u.model[0].weight.register_hook(lambda g: g),
        "_backward_hooks: 0 -> 1",
    ),
    (
        "accumulate-hook",
        lambda u: u.model[0].bias.register_post_accumulate_grad_hook(lambda p: None),
        "_post_accumulate_grad_hooks: 0 -> 1",
    ),
    (
        "optimizer-hook",
        lambda u: u.optimizer.register_step_post_hook(lambda *a: None),
        "optimizer0 _optimizer_step_post_hooks: 0 -> 1",
    ),
    ("grad-mode", lambda u: torch.set_grad_enabled(False), "flag grad_enabled: True -> False"),
    (
        "anomaly-mode",
        lambda u: torch.autograd.set_detect_anomaly(True),
        "flag anomaly: False -> True",
    ),
    (
        "deterministic",
        lambda u: torch.use_deterministic_algorithms(True),
        "flag deterministic: False -> True",
    ),
    ("function-mode", push_mode, "flag function_modes: 0 -> 1"),
]


@pytest.mark.parametrize("plant, named", [c[1:] for c in PLANTS], ids=[c[0] for c in PLANTS])
def test_the_guard_names_a_planted_change(plant: Callable[[Owned], object], named: str) -> None:
    user = owned()
    state = (
        torch.is_grad_enabled(),
        torch.is_anomaly_enabled(),
        torch.are_deterministic_algorithms_enabled(),
        torch.get_rng_state(),
    )
    hooks_before = (dict(nn.modules.module._global_forward_pre_hooks),)
    try:
        with pytest.raises(AssertionError) as info:
            with untouched([user.model], [user.optimizer], user.batch):
                plant(user)
        assert named in str(info.value)
    finally:  # undo the global plants so no other test sees them
        torch.set_grad_enabled(state[0])
        torch.autograd.set_detect_anomaly(state[1])
        torch.use_deterministic_algorithms(state[2])
        torch.set_rng_state(state[3])
        nn.modules.module._global_forward_pre_hooks.clear()
        nn.modules.module._global_forward_pre_hooks.update(hooks_before[0])
        while entered_modes:
            entered_modes.pop().__exit__(None, None, None)


def test_the_guard_tells_nan_payloads_and_signed_zeros_apart() -> None:
    user = owned()
    with torch.no_grad():
        user.model[0].bias[0] = float("nan")
        user.model[0].bias[1] = 0.0
    with pytest.raises(AssertionError, match="model0 param 0.bias"):
        with untouched([user.model]):
            user.model[0].bias.detach().view(torch.int32)[0] ^= 1  # another NaN payload
    with pytest.raises(AssertionError, match="model0 param 0.bias"):
        with untouched([user.model]):
            user.model[0].bias.detach()[1] = -0.0  # equal under ==, different bits
    assert torch.isnan(user.model[0].bias[0])


def test_the_guard_names_a_hook_left_on_an_autograd_node() -> None:
    x = torch.ones(3, requires_grad=True)
    loss = (x * 2).sum()
    with pytest.raises(AssertionError, match=r"node0 SumBackward0 hooks: 0 -> 1"):
        with untouched(inputs=(loss,)):
            loss.grad_fn.register_hook(lambda *a: None)


def test_the_guard_passes_when_nothing_changed() -> None:
    user = owned()
    with untouched([user.model], [user.optimizer], user.batch) as before:
        user.model.eval()(user.x)  # an eval forward changes nothing
        user.model.train()
    assert before.flags["grad_enabled"] is True
