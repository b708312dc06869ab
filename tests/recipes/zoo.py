"""The triage bug zoo: models that will not train, each beside its healthy twin (seeded, CPU).

Every bug is one change to the same 20-64-64-10 MLP on 64 standardised examples of 10 classes,
trained by the caller with Adam at 3e-4 (so the twin's step size is healthy: Adam moves each
weight by about lr, and 3e-4 / rms(w) sits at 10^-2.4 on these layers).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

FEATURES, CLASSES, EXAMPLES = 20, 10, 64
HEALTHY_LR = 3e-4


class MLP(nn.Module):
    """Linear(20, 64) -> ReLU -> Linear(64, 64) -> ReLU -> Linear(64, 10), with the bug
    switches the zoo flips (all off: the healthy twin)."""

    def __init__(
        self,
        *,
        softmax: bool = False,
        dead_bias: float | None = None,
        batch_norm_by_hand: bool = False,
        stored_input: bool = False,
        head_scale: float = 1.0,
    ) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc1, self.fc2, self.head = (
            nn.Linear(FEATURES, 64),
            nn.Linear(64, 64),
            nn.Linear(64, 10),
        )
        self.softmax = softmax
        self.batch_norm_by_hand = batch_norm_by_hand
        self.register_buffer("example", torch.randn(1, FEATURES) if stored_input else None)
        with torch.no_grad():
            if dead_bias is not None:
                self.fc1.bias.fill_(dead_bias)  # every ReLU input is negative: a dead layer
            self.head.weight.mul_(head_scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.example is not None:  # the bug: forward reads a stored tensor, not its input
            x = self.example.expand_as(x)
        hidden = torch.relu(self.fc1(x))
        if self.batch_norm_by_hand:  # statistics over the batch, also in eval: examples mix
            hidden = (hidden - hidden.mean(dim=0)) / (hidden.std(dim=0) + 1e-5)
        else:  # the twin normalises each example over its own features
            hidden = (hidden - hidden.mean(dim=1, keepdim=True)) / (
                hidden.std(dim=1, keepdim=True) + 1e-5
            )
        logits = self.head(torch.relu(self.fc2(hidden)))
        return logits.softmax(dim=-1) if self.softmax else logits


def batch(*, raw: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """64 examples: standardised features (``raw``: in raw units, mean 50 and std 100)."""
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(EXAMPLES, FEATURES, generator=generator)
    y = torch.randint(0, CLASSES, (EXAMPLES,), generator=generator)
    return (x * 100 + 50 if raw else x), y


@dataclass(frozen=True)
class Bug:
    """One bug of the zoo: how to build it, its healthy twin, and what must catch it."""

    name: str
    model: Callable[[], nn.Module]
    twin: Callable[[], nn.Module]
    catching_check: str
    """The check whose row must not pass, and whose finding must come first."""
    raw_inputs: bool = False
    lr: float = HEALTHY_LR

    def call(self, broken: bool) -> dict[str, Any]:
        """The arguments of ``tl.recipes.triage`` for the bug (or, ``broken=False``, its twin)."""
        model = (self.model if broken else self.twin)()
        data = batch(raw=self.raw_inputs and broken)
        lr = self.lr if broken else HEALTHY_LR
        return {
            "model": model,
            "batch": data,
            "loss_fn": nn.CrossEntropyLoss(),
            "optimizer": torch.optim.Adam(model.parameters(), lr=lr),
        }


ZOO: tuple[Bug, ...] = (
    Bug("double_softmax", lambda: MLP(softmax=True), MLP, "output_vs_loss"),
    Bug("dead_layer", lambda: MLP(dead_bias=-100.0), MLP, "gradient_flow"),
    Bug("batch_mixing", lambda: MLP(batch_norm_by_hand=True), MLP, "batch_independence"),
    Bug("input_never_reaches", lambda: MLP(stored_input=True), MLP, "random_input_test"),
    Bug("raw_features", MLP, MLP, "data_sanity", raw_inputs=True),
    Bug("head_init_x100", lambda: MLP(head_scale=100.0), MLP, "init_loss"),
    Bug("lr_1000x", MLP, MLP, "update_ratio", lr=HEALTHY_LR * 1000),
)
