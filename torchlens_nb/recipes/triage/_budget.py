"""How many steps triage's training runs take: today's lengths, or a share of a time budget.

The training runs are overfit_one_batch's attempts (``steps`` each, up to four), update_ratio
(:data:`STEP_SIZE_STEPS`) and the step-size probe (``PROBE_STEPS`` a run, one to three runs).
On the zoos' models a step takes milliseconds and every run keeps that length, so their
verdicts do not depend on the machine. The first training run times its second step, then
the mean of its steps after the first before each later one (``training._planned``); a step
of :data:`SLOW_STEP_S` or more whose full plan would pass
:data:`TRAINING_BUDGET_S` shortens every run to its share of the budget (measured: GPT-2
small, 124M parameters, 2 x 64 tokens, AdamW, 2 CPU threads: 9.0 s a step at load 9, so the
full plan of 250 steps would take 38 minutes). A shortened run says so (:meth:`Budget.note`,
and in the check's own row); overfit_one_batch then makes one attempt, the probe reuses
that attempt as its run at your lr, and on a model above :data:`RATIO_WATCH_PARAMS`
update_ratio reads that attempt's update ratios (``_checks``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ..training._planned import StepPlan
from ._step_size import PROBE_STEPS

STEP_SIZE_STEPS = 10
"""update_ratio trains 10 steps. Measured on the 20-64-64-10 MLP with Adam: at lr 0.3 (1000x
too high) the median log10 ratio is -0.6 to -0.8 over 10 steps but -1.6 to -1.9 over 50
(weights inflated by the first steps shrink the ratio back), while lr 3e-4 stays at -2.4 to
-2.7 either way."""
TRAINING_BUDGET_S = 30.0
"""Wall seconds for all training runs of a slow model: half of the minute the whole triage of
GPT-2 small should take, the other half being the forwards and backwards of the other checks
(about ten of them)."""
SLOW_STEP_S = 1.0
"""Below 1 s a step, every run keeps its full length, so the zoos' verdicts never depend on the
load: their slowest timed step was 0.16 s (tests/triage_public/test_development.py at load
average 17 on the 2-core machine; 0.04-0.06 s for most), a margin of 6x."""
Run = Literal["overfit", "ratio", "probe"]
SHARES: dict[Run, float] = {"overfit": 0.5, "ratio": 0.25, "probe": 0.25}
"""Each run's share of the budget's steps. overfit_one_batch's attempt is also the probe's run
at your lr, so the probe's share pays for a run at another lr only when yours diverges or
stalls."""
RATIO_WATCH_PARAMS = 20_000_000
"""Above 20M trainable parameters, overfit_one_batch's attempt at your lr also records its update
ratios, and a shortened update_ratio reads them instead of training a copy of its own (its
share of the budget goes to that attempt). Recording keeps a copy of the weights and takes three
batched norms a step (a sampled GPT-2 small step cost 1.08x a bare one,
``checks/gradients/_update_ratio.py``). Below 20M, nothing is recorded: the zoos' models (under
1M) step in milliseconds and keep their runs; GPT-2 small (124M) stepped in 1.6 s at load 0.3
and 8 s at load 3 on the 2-core machine."""
MIN_STEPS = 2
"""No run is shortened below 2 steps: update_ratio's median is over the steps after the first,
and a loss needs two values to move."""


@dataclass
class Budget:
    """The run lengths of one triage; ``step_s`` is filled by the first run that times a step."""

    overfit_steps_full: int
    """overfit_one_batch's ``steps`` (the caller's)."""
    seconds: float = field(default_factory=lambda: TRAINING_BUDGET_S)
    slow_step_s: float = field(default_factory=lambda: SLOW_STEP_S)
    step_s: float | None = None
    """The wall seconds of one training step, once measured: the mean of the timing run's
    steps after its first, as last reported (``planned_steps``)."""
    measured_by: str | None = None
    """Which run timed the step."""
    ratio_from_overfit: bool = False
    """update_ratio reads overfit_one_batch's run (:data:`RATIO_WATCH_PARAMS`): that run takes
    update_ratio's share too."""

    @property
    def full_plan_steps(self) -> int:
        """The steps of the usual full plan: one overfit attempt, update_ratio, two probe runs."""
        return self.overfit_steps_full + STEP_SIZE_STEPS + 2 * PROBE_STEPS

    @property
    def is_shortened(self) -> bool:
        """A step was timed at ``slow_step_s`` or more and the full plan would pass the budget."""
        return (
            self.step_s is not None
            and self.step_s >= self.slow_step_s
            and self.step_s * self.full_plan_steps > self.seconds
        )

    def steps(self, run: Run) -> int:
        """The length of ``run``: full, or its share of the budget (at least ``MIN_STEPS``)."""
        full = {"overfit": self.overfit_steps_full, "ratio": STEP_SIZE_STEPS, "probe": PROBE_STEPS}
        if not self.is_shortened or self.step_s is None:
            return full[run]
        fraction = SHARES[run]
        if self.ratio_from_overfit and run == "overfit":
            fraction += SHARES["ratio"]
        share = int(fraction * self.seconds / self.step_s)
        return max(MIN_STEPS, min(full[run], share))

    def plan(self, run: Run, label: str) -> StepPlan | None:
        """The hook that lets run ``run`` (named ``label`` in the note) time the step, while
        none has been timed; None after. It is called again at every later step of that run
        with the mean so far, so a load that rises during the run shortens it."""
        if self.step_s is not None:
            return None

        def measured(step_s: float) -> int:
            self.step_s, self.measured_by = step_s, label
            return self.steps(run)

        return measured

    def note(self) -> str | None:
        """The disclosure of a shortened triage (None at full length)."""
        if not self.is_shortened or self.step_s is None:
            return None
        return (
            f"shortened to a training budget of {self.seconds:g} s: a step of "
            f"{self.step_s:.2g} s (the mean of {self.measured_by}'s steps after its first) "
            "would make the "
            f"full plan take {self.step_s * self.full_plan_steps:.0f} s, so overfit_one_batch "
            f"made one attempt of {self.steps('overfit')} of {self.overfit_steps_full} steps "
            "(a loss that has not memorised by then is not judged), "
            + self._ratio_note()
            + " and the step-size probe "
            + f"{self.steps('probe')} of {PROBE_STEPS} a run (its run at your lr is "
            "overfit_one_batch's when that attempt used your optimizer)"
        )

    def _ratio_note(self) -> str:
        if self.ratio_from_overfit:
            return (
                "update_ratio read the update ratios of that attempt (your optimizer at your lr "
                "on the same batch) instead of a run of its own"
            )
        return f"update_ratio ran {self.steps('ratio')} of {STEP_SIZE_STEPS} steps"
