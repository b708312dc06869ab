"""Wrapped optimizers (accelerate's ``AcceleratedOptimizer`` and anything exposing the real one as
``.optimizer``): the session hooks the real ``torch.optim.Optimizer`` and reads its param groups.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

import torchlens_nb as tl
from tests.checks.conftest import hook_counts, is_bitwise_equal, snapshot


class AcceleratedStandIn(torch.optim.Optimizer):
    """What ``accelerate.optimizer.AcceleratedOptimizer`` is to the kit: an ``Optimizer``
    subclass that never runs ``Optimizer.__init__`` (so it has no hook registries), holds the
    real optimizer as ``.optimizer`` and the GradScaler (or None) as ``.scaler``."""

    def __init__(self, optimizer: torch.optim.Optimizer, scaler: Any = None) -> None:
        self.optimizer = optimizer
        self.scaler = scaler

    @property
    def param_groups(self) -> list[dict[str, Any]]:  # type: ignore[override]
        return self.optimizer.param_groups

    @property
    def state(self) -> Any:  # type: ignore[override]
        return self.optimizer.state

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def step(self, closure: Any = None) -> Any:
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
            return None
        return self.optimizer.step(closure)


def test_a_wrapped_optimizer_is_hooked_through_the_real_one(mlp_adamw, poison) -> None:
    model, inner = mlp_adamw
    wrapped = AcceleratedStandIn(inner)
    session = tl.debug.ChecksSession(model, wrapped, scaler=None)
    session.register_nonfinite_grad_check()
    x = torch.randn(4, 8)
    with session:
        assert hook_counts(model, inner) == (4, 1, 1)
        for _ in range(2):
            wrapped.zero_grad()
            model(x).square().mean().backward()
            wrapped.step()
        before = snapshot(model, inner)
        wrapped.zero_grad()
        poison(model[0].weight, math.nan)
        model(x).square().mean().backward()
        with pytest.raises(tl.debug.CheckViolationError, match="0.weight"):
            wrapped.step()
    assert is_bitwise_equal(snapshot(model, inner), before)
    assert hook_counts(model, inner) == (0, 0, 0)
    assert session.report().counters["accepted"] == 2
    assert "with AdamW" in session.report().subject


def test_the_wrappers_scaler_is_the_declaration_when_none_is_given(mlp_adamw) -> None:
    model, inner = mlp_adamw
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**8)
    wrapped = AcceleratedStandIn(inner, scaler)
    session = tl.debug.ChecksSession(model, wrapped)  # scaler= left out: the wrapper's is used
    session.register_nonfinite_grad_check()
    with session:
        for loss_factor in (1.0, math.inf, 1.0):  # the scaler skips the middle attempt
            wrapped.zero_grad()
            scaler.scale(model(torch.randn(4, 8)).square().mean() * loss_factor).backward()
            wrapped.step()
    report = session.report()
    assert report.ledgers["scale"]["method"] == "scale_decrements"
    assert (report.counters["accepted"], report.counters["skipped_by_scaler"]) == (2, 1)


def test_an_object_without_a_real_optimizer_inside_is_refused(mlp_adamw) -> None:
    model, _ = mlp_adamw

    class Wrapper:
        optimizer = "not an optimizer"

    with pytest.raises(tl.errors.DiagnosticArgumentError, match=r"got Wrapper \(its \.optimizer"):
        tl.debug.ChecksSession(model, Wrapper())
