"""Fixtures of the trainer-integration tests: token data for a tiny GPT-2, and the facts every
trainer test reads (hooks left, weights before the poisoned step)."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from tests.checks.conftest import poison_next_backward, snapshot

POISONED_STEP = 4
"""0-based global step whose backward gets the NaN: the 5th optimizer step."""

CULPRIT = "transformer.h.0.attn.c_attn.weight"
"""The GPT-2 parameter whose incoming gradient is poisoned."""


def token_rows(count: int, length: int = 16) -> list[dict[str, torch.Tensor]]:
    """``count`` seeded rows of 16 tokens (vocabulary 64), labels = inputs (the LM loss)."""
    generator = torch.Generator().manual_seed(0)
    rows = []
    for _ in range(count):
        ids = torch.randint(0, 64, (length,), generator=generator)
        rows.append({"input_ids": ids, "labels": ids.clone()})
    return rows


def all_hooks(model: nn.Module, optimizer: torch.optim.Optimizer) -> tuple[int, int, int]:
    """(post-accumulate-grad hooks on the parameters, optimizer step pre hooks, post hooks)."""
    return (
        sum(len(p._post_accumulate_grad_hooks or {}) for p in model.parameters()),
        len(optimizer._optimizer_step_pre_hooks),
        len(optimizer._optimizer_step_post_hooks),
    )


class Poisoner:
    """At global step :data:`POISONED_STEP`: copy every weight and optimizer-state tensor (the
    values after the step before), then write a NaN into element 0 of ``param``'s next incoming
    gradient (a tensor hook that removes itself)."""

    def __init__(self, param_name: str = CULPRIT, at_step: int = POISONED_STEP) -> None:
        self.param_name = param_name
        self.at_step = at_step
        self.before: dict[str, torch.Tensor] | None = None

    def maybe_poison(
        self, global_step: int, model: nn.Module, optimizer: torch.optim.Optimizer
    ) -> None:
        if global_step != self.at_step or self.before is not None:
            return
        self.before = snapshot(model, optimizer)
        poison_next_backward(dict(model.named_parameters())[self.param_name], math.nan)


def counters(report: Any, *names: str) -> tuple[Any, ...]:
    return tuple(report.counters[name] for name in names)


def assert_clean_run(report: Any, steps: int) -> None:
    """A run of ``steps`` optimizer steps, one backward each, ended clean with exact step ids:
    every attempt accepted and carrying the trainer's global step."""
    assert report.status == "clean" and report.exit_reason == "completed"
    assert counters(report, "attempts", "accepted", "backwards", "step_provenance") == (
        steps,
        steps,
        steps,
        "explicit",
    )
    assert [r["global_step"] for r in report.ledgers["steps"]] == list(range(steps))
