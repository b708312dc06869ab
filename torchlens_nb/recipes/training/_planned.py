"""A training loop's step count that a time budget may cut once the loop has timed a step.

Triage's training runs (overfit_one_batch, update_ratio, the step-size probe) take their
length from ``tl.recipes.triage``'s budget, which needs measured steps: the first run to
reach its third step reports the wall time of its second (the first pays the allocator's and
the optimizer state's warm-up: 16.0 s vs 9.0 s on GPT-2 small, 2 x 64 tokens, 2 threads at
load 9) and learns how many steps it may take in all; from then on it reports, before each
step, the mean wall time of its steps after the first, and the total can only shrink. On a
shared machine the load moves during a run: GPT-2 small's triage timed a step at 1.6 s (load
0.3) and its 9 planned steps then took 46 s as the load rose to 3.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

StepPlan = Callable[[float], int]
"""Called with the mean wall seconds of a step so far; returns the run's total number of steps."""


def planned_steps(steps: int, plan: StepPlan | None = None) -> Iterator[int]:
    """Step indices ``0, 1, ...`` up to ``steps``; with ``plan``, before each step from step 2
    on, the mean wall time of the steps since step 1 (the loop bodies after the yield of 1)
    goes to ``plan``, whose answer (kept in ``[2, total so far]``) becomes the total. A run of
    2 steps or fewer never calls ``plan``."""
    total, began = steps, 0.0
    step = 0
    while step < total:
        if step == 1:
            began = time.perf_counter()
        elif step >= 2 and plan is not None:
            total = max(2, min(total, plan((time.perf_counter() - began) / (step - 1))))
            if step >= total:
                return
        yield step
        step += 1
