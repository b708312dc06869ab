"""Silent training bugs ported small to CPU, each with its fixed twin (issue 35).

Sources: the silent errors TrainCheck reproduces (Jiang et al., OSDI'25;
github:OrderLab/TrainCheck-Evaluation-Workloads) and the issue's list. Every case runs the
loop as a user would, with the session set up as ``docs/training_checks.md`` shows
(:func:`documented_session`), or runs the recipe the docs name for what the session cannot
see. ``run(case, buggy)`` returns an :class:`Outcome`: whether the case's finding was raised,
at which attempt relative to the step where the bug first takes effect (the trigger), and the
warning / critical findings and warnings a fixed twin must not have. The DDP cases live in
``tests/distributed/silent_ranks.py`` (2 gloo ranks).
"""

from __future__ import annotations

import contextlib
import contextvars
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

import torchlens_nb as tl

STEPS = 6


@dataclass
class Outcome:
    """What one run of a case showed."""

    detected: bool
    steps_to_detection: int | None
    """Attempts between the trigger and the finding (0: at the trigger step); None if missed."""
    serious: list[str] = field(default_factory=list)
    """Codes of warning / critical findings, and warnings emitted (a twin must have none)."""


@dataclass(frozen=True)
class Case:
    name: str
    source: str
    code: str
    """The finding code that detects the bug."""
    run: Callable[[bool], Outcome]
    is_recipe: bool = False
    """Caught by a recipe run before training, not by the session."""


def mlp() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(step)
    return torch.randn(16, 8, generator=generator), torch.randn(16, 4, generator=generator)


_INVARIANTS = contextvars.ContextVar("invariants", default=True)


@contextlib.contextmanager
def without_invariants() -> Iterator[None]:
    """Sessions made inside run with ``invariants=False``: the checks kit before issue 35."""
    token = _INVARIANTS.set(False)
    try:
        yield
    finally:
        _INVARIANTS.reset(token)


def documented_session(model: nn.Module, optimizer: Any, **kwargs: Any) -> Any:
    """The set-up of docs/training_checks.md: non-finite, change and update-ratio checks."""
    session = tl.debug.ChecksSession(
        model, optimizer, scaler=None, invariants=_INVARIANTS.get(), **kwargs
    )
    session.register_nonfinite_grad_check()
    session.register_change_check()
    session.register_update_ratio_check(every=1)
    return session


def session_outcome(
    build: Callable[[], Any], loop: Callable[[Any], None], code: str, trigger: int | None
) -> Outcome:
    """Build the session (warnings recorded from construction on), run ``loop``, read the
    report: ``code``'s first attempt minus ``trigger`` (a construction-time finding has no
    attempt: 0 steps)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        session = build()
        with session:
            loop(session)
    report = session.report()
    serious = [f.code for f in report.findings if f.severity != "info"]
    serious += [f"warning: {str(w.message).split(':')[0]}" for w in caught]
    found = next((f for f in report.findings if f.code == code), None)
    if found is None:
        return Outcome(False, None, serious)
    first = found.fields.get("first_attempt")
    steps = 0 if first is None or trigger is None else first - trigger
    return Outcome(True, steps, serious)


def recipe_outcome(report: Any, code: str) -> Outcome:
    serious = [f.code for f in report.findings if f.severity != "info"]
    found = any(f.code == code for f in report.findings)
    return Outcome(found, 0 if found else None, serious)


# ----- the loop ------------------------------------------------------------------------------
def train(
    model: nn.Module,
    optimizer: Any,
    *,
    zero_grad: bool = True,
    steps: int = STEPS,
    before_step: Callable[[int], None] | None = None,
) -> None:
    for step in range(steps):
        if zero_grad:
            optimizer.zero_grad()
        if before_step is not None:
            before_step(step)
        x, y = batch(step)
        F.mse_loss(model(x), y).backward()
        optimizer.step()


# ----- 1. no zero_grad -----------------------------------------------------------------------
def no_zero_grad(buggy: bool) -> Outcome:
    model = mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    return session_outcome(
        lambda: documented_session(model, optimizer),
        lambda _: train(model, optimizer, zero_grad=not buggy),
        "grads_not_reset",
        trigger=1,  # the second backward adds onto the gradient step 0 used
    )


# ----- 2. a step that stops updating ---------------------------------------------------------
class SpecializedSGD(torch.optim.Optimizer):
    """SGD whose update list is fixed at its first call, as a compiled step specialises on the
    gradients it first saw: after a first iteration with no gradients it updates nothing.
    ``respecialize=True`` (the fix) rebuilds the list at every call."""

    def __init__(self, params: Any, lr: float, respecialize: bool) -> None:
        super().__init__(params, {"lr": lr})
        self._plan: list[torch.Tensor] | None = None
        self._respecialize = respecialize

    @torch.no_grad()
    def step(self, closure: Any = None) -> None:
        if self._plan is None or self._respecialize:
            self._plan = [p for g in self.param_groups for p in g["params"] if p.grad is not None]
        for param in self._plan:
            param.add_(param.grad, alpha=-self.param_groups[0]["lr"])


def step_stops_updating(buggy: bool) -> Outcome:
    model = mlp()
    optimizer = SpecializedSGD(model.parameters(), lr=0.01, respecialize=not buggy)

    def loop(_: Any) -> None:
        optimizer.step()  # a warm-up iteration with no gradients (all None)
        train(model, optimizer)

    return session_outcome(
        lambda: documented_session(model, optimizer), loop, "step_did_not_move", trigger=1
    )


# ----- 3. a freeze that never ran ------------------------------------------------------------
class Finetuned(nn.Module):
    """A backbone meant to be frozen and a head; ``freeze_in_init=False`` freezes only in
    ``train()``, which the runner never calls (it calls ``model.train(True)`` of nn.Module
    through ``.requires_grad_`` ... never)."""

    def __init__(self, freeze_in_init: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.backbone = nn.Sequential(nn.Linear(8, 16), nn.ReLU())
        self.head = nn.Linear(16, 4)
        if freeze_in_init:
            self.backbone.requires_grad_(False)

    def start_training(self) -> None:
        """The freeze the buggy runner relies on and never calls."""
        self.backbone.requires_grad_(False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.backbone(x))


def freeze_never_ran(buggy: bool) -> Outcome:
    model = Finetuned(freeze_in_init=not buggy)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    return session_outcome(
        lambda: documented_session(model, optimizer, expect_frozen=model.backbone),
        lambda _: train(model, optimizer),
        "frozen_param_changed",
        trigger=0,
    )


# ----- 4. an optimizer holding only frozen parameters ----------------------------------------
def optimizer_only_frozen(buggy: bool) -> Outcome:
    model = Finetuned(freeze_in_init=True)
    params = model.backbone.parameters() if buggy else model.head.parameters()
    optimizer = torch.optim.AdamW(params, lr=1e-3)
    return session_outcome(
        lambda: documented_session(model, optimizer, expect_frozen=model.backbone),
        lambda _: train(model, optimizer),
        "optimizer_has_nothing_to_train",
        trigger=None,  # wrong from construction
    )


# ----- 5. a layer replaced after the optimizer was built -------------------------------------
def layer_missing_from_optimizer(buggy: bool) -> Outcome:
    model = mlp()
    if not buggy:
        model[2] = nn.Linear(16, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    if buggy:
        model[2] = nn.Linear(16, 4)  # a new head after the optimizer: nothing trains it
    return session_outcome(
        lambda: documented_session(model, optimizer),
        lambda _: train(model, optimizer),
        "params_trained_by_no_optimizer",
        trigger=0,
    )


# ----- 6. weights initialised again and again ------------------------------------------------
class ResettingLinear(nn.Linear):
    """A layer whose forward re-runs its initialisation in training (a port of init code
    placed in forward); ``reset_in_forward=False`` is the fix."""

    def __init__(self, reset_in_forward: bool) -> None:
        super().__init__(8, 16)
        self.reset_in_forward = reset_in_forward

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.reset_in_forward and self.training:
            self.reset_parameters()
        return super().forward(x)


def reinit_every_step(buggy: bool) -> Outcome:
    torch.manual_seed(0)
    model = nn.Sequential(ResettingLinear(buggy), nn.ReLU(), nn.Linear(16, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    return session_outcome(
        lambda: documented_session(model, optimizer),
        lambda _: train(model, optimizer),
        "param_written_outside_step",
        trigger=1,  # the first re-initialisation after a step
    )


# ----- 7. attention dropout active in eval ---------------------------------------------------
class Attention(nn.Module):
    def __init__(self, training_flag_passed: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.qkv = nn.Linear(8, 24)
        self.out = nn.Linear(8, 8)
        self.passes_flag = training_flag_passed

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        attn = (q @ k.transpose(-2, -1) / 8**0.5).softmax(-1)
        if self.passes_flag:
            attn = F.dropout(attn, 0.1, training=self.training)
        else:
            attn = F.dropout(attn, 0.1)  # training defaults to True: dropout in eval too
        return self.out(attn @ v)


def eval_dropout(buggy: bool) -> Outcome:
    model = nn.Sequential(Attention(training_flag_passed=not buggy), nn.Linear(8, 4))
    x = torch.randn(2, 5, 8, generator=torch.Generator().manual_seed(0))
    return recipe_outcome(tl.recipes.eval_determinism(model, x), "eval_not_deterministic")


# ----- 8. spectral norm evaluated before a training forward ----------------------------------
def spectral_norm_before_training(buggy: bool) -> Outcome:
    """Known blind spot: eval before any training forward uses sigma from the initial random
    vectors, deterministically; no recipe or check here reads it."""
    torch.manual_seed(0)
    layer = nn.utils.spectral_norm(nn.Linear(8, 8))
    model = nn.Sequential(layer, nn.ReLU(), nn.Linear(8, 4))
    if not buggy:
        with torch.no_grad():
            model.train()
            model(torch.randn(4, 8))  # the training forward runs the power iteration
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(0))
    return recipe_outcome(tl.recipes.eval_determinism(model, x), "eval_not_deterministic")


# ----- 9. identical "random" samples across DataLoader workers -------------------------------
class Procedural(torch.utils.data.Dataset[torch.Tensor]):
    """Samples drawn from a numpy RandomState made in ``__init__``: every worker gets a copy."""

    def __init__(self) -> None:
        self.rng = np.random.RandomState(0)

    def __len__(self) -> int:
        return 64

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.from_numpy(self.rng.normal(size=8).astype(np.float32))


def _seed_worker(worker: int) -> None:
    info = torch.utils.data.get_worker_info()
    assert info is not None
    info.dataset.rng.seed(torch.initial_seed() % 2**32)  # type: ignore[attr-defined]


def duplicate_workers(buggy: bool) -> Outcome:
    loader = torch.utils.data.DataLoader(
        Procedural(),
        batch_size=8,
        num_workers=2,
        worker_init_fn=None if buggy else _seed_worker,
        multiprocessing_context="fork",
    )
    report = tl.recipes.duplicate_samples(loader, batches=4)
    return recipe_outcome(report, "duplicate_batches")


# ----- 10. a layer that escapes autocast -----------------------------------------------------
class Float32Head(nn.Module):
    """A head run under ``autocast(enabled=False)`` with ``.float()`` inputs (the escape)."""

    def __init__(self, escapes: bool) -> None:
        super().__init__()
        self.proj = nn.Linear(16, 4)
        self.escapes = escapes

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.escapes:
            with torch.autocast("cpu", enabled=False):
                return self.proj(x.float())
        return self.proj(x)


def autocast_escape(buggy: bool) -> Outcome:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), Float32Head(escapes=buggy))
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(0))
    return recipe_outcome(tl.recipes.autocast_coverage(model, x), "ops_escaped_autocast")


CASES = (
    Case(
        "no_zero_grad",
        "issue 35; TrainCheck (accumulating gradients)",
        "grads_not_reset",
        no_zero_grad,
    ),
    Case(
        "step_stops_updating",
        "issue 35; TrainCheck (compiled step after None grads)",
        "step_did_not_move",
        step_stops_updating,
    ),
    Case(
        "freeze_never_ran",
        "issue 35 (freeze only inside train())",
        "frozen_param_changed",
        freeze_never_ran,
    ),
    Case(
        "optimizer_only_frozen",
        "issue 35 (optimizer over frozen parameters)",
        "optimizer_has_nothing_to_train",
        optimizer_only_frozen,
    ),
    Case(
        "layer_missing_from_optimizer",
        "TrainCheck-style (layer replaced after the optimizer)",
        "params_trained_by_no_optimizer",
        layer_missing_from_optimizer,
    ),
    Case(
        "reinit_every_step",
        "issue 35 (weights initialised repeatedly)",
        "param_written_outside_step",
        reinit_every_step,
    ),
    Case(
        "eval_dropout",
        "issue 35; TrainCheck (attention dropout in eval)",
        "eval_not_deterministic",
        eval_dropout,
        is_recipe=True,
    ),
    Case(
        "spectral_norm_before_training",
        "issue 35 (spectral norm before a training forward)",
        "eval_not_deterministic",
        spectral_norm_before_training,
        is_recipe=True,
    ),
    Case(
        "duplicate_workers",
        "issue 35 (identical augmentations across workers)",
        "duplicate_batches",
        duplicate_workers,
        is_recipe=True,
    ),
    Case(
        "autocast_escape",
        "issue 35 (layer escapes autocast in a bf16 region)",
        "ops_escaped_autocast",
        autocast_escape,
        is_recipe=True,
    ),
)
"""The single-process cases, in the order of the benchmark table."""
