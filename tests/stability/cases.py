"""The reproduced instabilities and their stable twins, each changing one thing.

Every case trains the 2-block GPT of :mod:`tests.stability.gpt` on the CPU in a few seconds.
``run_case`` attaches a ``ChecksSession`` with its defaults (the stability check on) plus the
quick-start non-finite check, and returns the loss event (defined on the run itself:
:func:`tests.stability.gpt.event_step`) and the session's first warning.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

import torchlens_nb as tl

from .gpt import Setup, event_step, train


@dataclass(frozen=True)
class Case:
    """One instability: the run that shows it, the twin that does not, the mechanism to name."""

    name: str
    unstable: Setup
    twin: Setup
    mechanism: str
    source: str
    """Where the mechanism is described."""


@dataclass(frozen=True)
class Outcome:
    event: int | None
    first_warning: int | None
    warnings: tuple[tuple[str, int], ...]
    """(code, first attempt) of every warning-severity finding."""
    losses: tuple[float, ...]

    @property
    def lead(self) -> int | None:
        if self.event is None or self.first_warning is None:
            return None
        return self.event - self.first_warning


ATTENTION = Setup("attention logit growth", steps=140, lr=3e-1, warmup_steps=150)
OUTPUT_LOGITS = Setup(
    "output logit divergence", steps=140, lr=1e-1, warmup_steps=100, final_norm=False
)

CASES = (
    Case(
        "attention_logit_growth",
        ATTENTION,
        ATTENTION.twin("with qk-layernorm", qk_norm=True),
        "attention_logit_growth",
        "Wortsman et al. 2023, Small-scale proxies for large-scale Transformer training "
        "instabilities, section 3.1.1",
    ),
    Case(
        "output_logit_divergence",
        OUTPUT_LOGITS,
        OUTPUT_LOGITS.twin("at a lower lr", lr=3e-2),
        "output_logit_divergence",
        "Wortsman et al. 2023, section 3.1.2",
    ),
)


def run_case(setup: Setup) -> Outcome:
    def attach(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> tl.debug.ChecksSession:
        session = tl.debug.ChecksSession(model, optimizer, scaler=None)
        session.register_nonfinite_grad_check(action="collect")
        session.register_stability_check(action="collect")
        return session

    run = train(setup, attach)
    report = run.attached.report()
    warnings = tuple(
        (f.code, f.fields.get("first_attempt", -1)) for f in report.findings if f.severity != "info"
    )
    first = min((a for _, a in warnings), default=None)
    return Outcome(event_step(run.losses), first, warnings, tuple(run.losses))
