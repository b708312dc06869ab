"""What every corpus entry is: a public training loop ported small, run with or without its
planted bug, each (model, optimizer) pair it trains handed to the caller's ``attach``."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import nn

Attach = Callable[[nn.Module, Any], AbstractContextManager[Any]]
"""``attach(model, optimizer)``: a context manager entered around the loop (a ChecksSession)."""

Kind = Literal["supervised", "gan", "rl", "trainer", "optimizer", "schedule"]


@dataclass
class LoopRun:
    """What one run showed: the loss of every iteration and what each ``attach`` returned (in
    the order of the loop's (model, optimizer) pairs)."""

    losses: list[float] = field(default_factory=list)
    attached: list[Any] = field(default_factory=list)

    @property
    def finite(self) -> bool:
        """Every loss finite (what a GAN's or an RL loop's few steps can show)."""
        return bool(torch.isfinite(torch.tensor(self.losses, dtype=torch.float64)).all())

    @property
    def trains(self) -> bool:
        """Every loss finite and the mean of the second half below the first half's."""
        losses = torch.tensor(self.losses, dtype=torch.float64)
        half = len(self.losses) // 2
        if half == 0 or not bool(torch.isfinite(losses).all()):
            return False
        return bool(losses[-half:].mean() < losses[:half].mean())


@dataclass(frozen=True)
class TriageSetup:
    """The user's own objects as the original recipe builds them, for ``tl.recipes.triage``."""

    model: nn.Module
    batch: Any
    loss_fn: Callable[..., torch.Tensor]
    optimizer: torch.optim.Optimizer
    scheduler: Any = None


Train = Callable[[int, Attach | None, bool], LoopRun]


@dataclass(frozen=True)
class HealthyLoop:
    """One ported loop.

    ``run(steps, attach=..., planted=True)`` runs its twin: the same loop with ``bug`` planted,
    which a ChecksSession with its defaults reports as ``catches`` (a finding code).
    """

    name: str
    source: str
    """The repository and path it ports."""
    kind: Kind
    bug: str
    """The bug its twin plants, in words."""
    catches: str
    """The finding code that reports the twin's bug."""
    train: Train = field(repr=False)
    triage: Callable[[], TriageSetup] | None = field(default=None, repr=False)
    steps: int = 8
    """Iterations enough to show it trains and to catch its twin (a few seconds on CPU)."""

    def run(self, steps: int, *, attach: Attach | None = None, planted: bool = False) -> LoopRun:
        """Build the set-up from a fixed seed and train ``steps`` iterations as the original does."""
        return self.train(steps, attach, planted)

    def triage_setup(self) -> TriageSetup | None:
        """The single-model supervised set-up for triage; None where triage does not apply."""
        return None if self.triage is None else self.triage()


@contextlib.contextmanager
def attached(
    attach: Attach | None, pairs: Sequence[tuple[nn.Module, Any]], run: LoopRun
) -> Iterator[None]:
    """Enter ``attach(model, optimizer)`` for each pair around the loop; keep what it returned."""
    with contextlib.ExitStack() as stack:
        if attach is not None:
            for model, optimizer in pairs:
                run.attached.append(stack.enter_context(attach(model, optimizer)))
        yield


def generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def labelled(
    count: int, shape: tuple[int, ...], classes: int, seed: int
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``count`` batches of inputs with labels a fixed projection decides (learnable)."""
    gen = generator(seed)
    features = 1
    for size in shape[1:]:
        features *= size
    projection = torch.randn(features, classes, generator=gen)
    out = []
    for _ in range(count):
        x = torch.randn(*shape, generator=gen)
        out.append((x, (x.flatten(1) @ projection).argmax(1)))
    return out
