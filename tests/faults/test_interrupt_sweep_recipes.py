"""Ctrl-C at every line the kit runs inside the training recipes that train or trace a copy.

``overfit_one_batch`` trains a deep copy with Adam, ``update_ratio`` trains one under its own
checks session, ``gradient_flow`` traces one backward and runs ``with torch.no_grad():``
forwards; ``eval_determinism``, ``autocast_coverage``, ``init_loss`` and the dependency recipes
(``batch_independence``, ``causal_dependency``: embedding taps) run the caller's own model under
hooks, modes or ``no_grad``. Each call is interrupted at the line events of the kit's files
(``tests/faults/_sweep.py``; a stride past the budget, ``TORCHLENS_NB_FULL_SWEEP=1`` sweeps every
line). After each run the interrupt reached the caller as ``KeyboardInterrupt`` (or the recipe's
interrupted report, or the call had finished) and nothing is left behind: grad mode, the
caller's model, its ``.grad`` and RNG, no global hook, no attached session, the ``SIGINT``
handler as it was.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

import torchlens_nb as tl
from tests.faults._sweep import sweep
from tests.faults.test_interrupt_sweep_capture import swept_state
from torchlens_nb.checks.session._optimizer import ATTACHED

pytestmark = pytest.mark.fault("no_leak")

Recipe = Callable[[nn.Module, tuple[torch.Tensor, torch.Tensor]], object]


def _classifier() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 3))
    return model, (torch.randn(16, 8), torch.randint(0, 3, (16,)))


def _token_model() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    """Token ids through an embedding (the dependency recipes tap its output with hooks)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(10, 8), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 3))
    return model, (torch.randint(0, 10, (2, 5)), torch.randint(0, 3, (2, 5)))


RECIPES: dict[str, tuple[Recipe, int]] = {
    "overfit_one_batch": (
        lambda m, b: tl.recipes.overfit_one_batch(m, b, nn.CrossEntropyLoss(), steps=5, live=False),
        150,
    ),
    "update_ratio": (
        lambda m, b: tl.recipes.update_ratio(m, b, nn.CrossEntropyLoss(), steps=4),
        150,
    ),
    "gradient_flow": (
        lambda m, b: tl.recipes.gradient_flow(m, b, nn.CrossEntropyLoss()),
        150,
    ),
    "eval_determinism": (lambda m, b: tl.recipes.eval_determinism(m, b[0]), 150),
    "autocast_coverage": (lambda m, b: tl.recipes.autocast_coverage(m, b[0]), 150),
    "init_loss": (lambda m, b: tl.recipes.init_loss(m, b, nn.CrossEntropyLoss()), 150),
    # every line (about 520 events each): at the stride of a 150 budget the embedding tap's leak, a hook
    # registered and not yet handed to its ExitStack, was missed
    "batch_independence": (lambda m, b: tl.recipes.batch_independence(m, b[0]), 1000),
    "causal_dependency": (lambda m, b: tl.recipes.causal_dependency(m, b[0]), 1000),
}
"""Recipe -> (its call on a small classifier with a BatchNorm, budget of runs); the dependency
recipes run on token ids (:func:`_token_model`), whose embedding they tap."""


def _recipe_state(model: nn.Module) -> dict[str, Any]:
    """What the recipe must leave as it found it: the caller's model, its ``.grad`` and the RNG
    streams included (a recipe trains a copy), the global hooks, handler and attached sessions."""
    return {**swept_state(model), "attached sessions": len(ATTACHED._owners)}


def _is_interrupted_report(result: Any) -> bool:
    return getattr(result, "status", None) == "interrupted"


@pytest.mark.parametrize("recipe", RECIPES)
def test_a_ctrl_c_at_every_line_of_a_training_recipe_leaves_nothing(recipe: str) -> None:
    call, budget = RECIPES[recipe]
    model, batch = _token_model() if recipe.endswith("dependency") else _classifier()
    result = sweep(
        lambda: call(model, batch),
        lambda: _recipe_state(model),
        budget=budget,
        reports_interrupt=_is_interrupted_report,
    )
    assert result.problems == []
    assert result.interrupted + result.finished == result.runs
    assert result.interrupted >= result.runs // 2
