"""The reproduced instabilities and their stable twins, each changing one thing.

Every case trains the 2-block GPT of :mod:`tests.stability.gpt` on the CPU in a few seconds.
``run_case`` attaches a ``ChecksSession`` with its defaults (the stability check on) plus the
quick-start non-finite check, and returns the loss event (defined on the run itself:
:func:`tests.stability.gpt.event_step`) and the session's first warning.
"""

from __future__ import annotations

from collections.abc import Callable
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
    """The warning code expected at least 5 attempts before the event."""
    source: str
    """Where the mechanism is described."""
    event_after: int = 10
    """The event counts from this step on (``event_step``'s ``after``)."""


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
LR_GROWTH = Setup(
    "an lr that grows 3% a step from step 60",
    steps=200,
    lr=3e-3,
    lr_at=lambda step: 1.03 ** max(0, step - 60),
)

QUIET_START, QUIET_FULL, FOREIGN = 60, 80, 205
"""A quiet phase: the loss's weight falls 1000x over steps 60-80 (the gradients with it, and
Adam's second moment after them); one full-size batch arrives at step 205."""


def quiet_phase(foreign: bool) -> Callable[[int], float]:
    """The loss weight per step: 1, then 1e-3 from :data:`QUIET_FULL` on, and 1 again at
    :data:`FOREIGN` only when ``foreign``."""

    def weight(step: int) -> float:
        if step < QUIET_START:
            return 1.0
        if step == FOREIGN and foreign:
            return 1.0
        return 1e-3 ** (min(step - QUIET_START, QUIET_FULL - QUIET_START) / 20)

    return weight


QUIET = Setup(
    "one full batch after a quiet phase", steps=235, lr=3e-3, loss_weight_at=quiet_phase(True)
)

CASES = (
    Case(
        "attention_logit_growth",
        ATTENTION,
        ATTENTION.twin("with qk-layernorm", qk_norm=True),
        "attention_logit_growth",
        "Wortsman et al. 2023, Small-scale proxies for large-scale Transformer training "
        "instabilities, section 3.1.1 (Dehghani et al. 2023 for qk-layernorm). The least mean "
        "attention entropy falls with it (0.33 nats at step 20, 0.04 at 40; Zhai et al. 2023's "
        "entropy collapse): in this model the two are one mechanism (measured at lr 0.15, 0.2 "
        "and 0.3: the entropy reaches 0.00-0.04 only where the max logit passes 100)",
    ),
    Case(
        "output_logit_divergence",
        OUTPUT_LOGITS,
        OUTPUT_LOGITS.twin("with a final norm", final_norm=True),
        "output_logit_divergence",
        "Wortsman et al. 2023, section 3.1.2 (no final norm; a z-loss of 1e-4 or 1e-3 did not "
        "stop it here: the event came at step 116 / 120; a final LayerNorm before the head "
        "did). The last block's gradient norm surges 4x its median 14 steps ahead; the final "
        "logits' log Z rises to 7.8, falls to 7.1 and turns upward again (7.6 at step 100) "
        "before the event, and jumps (15, 64) with it; the final-norm twin's falls 8.1 -> 6.8",
    ),
    Case(
        "adam_after_a_quiet_phase",
        QUIET,
        QUIET.twin("the full batch skipped", loss_weight_at=quiet_phase(False)),
        "adam_second_moment_stale",
        "Molybog et al. 2023, A Theory on Adam Instability in Large-Scale Machine Learning: "
        "after a quiet phase Adam's second moment has decayed, and one batch of the earlier "
        "size moves the weights along its own direction for the next steps (the loss rises 6 "
        "steps later; a permanent return of the gradients, which steer, gives no event). The "
        "twin skips the batch, as PaLM (Chowdhery et al. 2022, section 5.1) skips the batches "
        "before a spike",
    ),
    Case(
        "loss_spike_lr_growth",
        LR_GROWTH,
        LR_GROWTH.twin("at a constant lr", lr_at=None),
        "grad_norm_surge",
        "a schedule whose lr keeps growing (ExponentialLR with gamma > 1): the loss spikes once "
        "the lr passes what the model tolerates",
    ),
)

NO_WARMUP = Case(
    "no_warmup",
    Setup("no warmup", steps=120, lr=5e-2),
    Setup("with a 100-step warmup", steps=120, lr=5e-2, warmup_steps=100),
    "first_step_update_large",
    "Adam's first steps move every element by the lr (Kingma & Ba 2015; the case for warmup: "
    "Liu et al. 2020, On the variance of the adaptive learning rate and beyond)",
    event_after=1,
)
"""Its loss event comes at step 2, 3 and 2 on seeds 0, 1 and 2 (``event_step(losses, after=1)``;
none from step 10 on): the warning, at attempt 0 before the first write, leads it by 2-3 steps,
short of the issue's 5. No warmup's harm in this model is immediate (the loss jumps at steps
2-6) and lasting (its lowest over 120 steps 3.44-3.82, the warmup twin's 1.51-1.58), never
delayed: ``benchmarks/bench_stability.py --no-warmup-search`` ran 48 settings (lr 0.025-0.05,
Post-LN blocks as in Xiong et al. 2020, beta2 0.999, 4 blocks, batch 64) on 3 seeds each, and
none had an event from step 10 on all seeds (see that module's docstring for the table)."""


def run_case(setup: Setup, event_after: int = 10) -> Outcome:
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
    return Outcome(event_step(run.losses, after=event_after), first, warnings, tuple(run.losses))
