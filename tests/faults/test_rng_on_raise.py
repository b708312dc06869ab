"""A forward that draws random numbers and then raises leaves every global RNG stream as it was,
under ``investigate``, ``check_determinism`` and ``triage`` (issue 29 item 3).

The CPU streams are real: the forward draws from Python's ``random``, NumPy's global generator
and torch's CPU generator, then raises, and each stream must be bitwise what it was before the
call. The CUDA branch of the restore (``torch.cuda.get_rng_state_all`` saved on entry,
``torch.cuda.set_rng_state_all`` on exit; ``manual_seed(initial_seed())`` of each default
generator when the block itself initialised CUDA) runs here against recording fakes
monkeypatched onto ``torch.cuda``: the forward "draws" by moving the fake's state, and the test
observes the restore call and the state it put back. That covers which CUDA calls the tools make
and with what; it cannot show that torch's real CUDA generators accept those states, nor a
forward's draws on a real device (``test_corruption``'s CUDA test runs those on a GPU machine).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

import torchlens_nb as tl
from tests.faults._guards import rng_state
from torchlens_nb.errors import TorchlensNbError

pytestmark = pytest.mark.fault("no_corruption")


class FakeCuda:
    """Stands in for torch.cuda's generators: a state per device that a 'draw' moves."""

    def __init__(self, initialised: bool) -> None:
        self.initialised = initialised
        self.states = [torch.tensor([1, 2, 3], dtype=torch.uint8)]
        self.restored: list[list[torch.Tensor]] = []
        self.reseeded = 0

    def draw(self) -> None:
        """What a CUDA random op does to the generator (and, the first time, to CUDA)."""
        self.initialised = True
        self.states = [state + 1 for state in self.states]

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        fake = self

        class Generator:
            def initial_seed(self) -> int:
                return 7

            def manual_seed(self, seed: int) -> None:
                fake.reseeded += 1
                fake.states = [torch.tensor([1, 2, 3], dtype=torch.uint8)]

        def set_rng_state_all(states: list[torch.Tensor]) -> None:
            self.restored.append(list(states))
            self.states = [state.clone() for state in states]

        monkeypatch.setattr(torch.cuda, "is_initialized", lambda: self.initialised)
        monkeypatch.setattr(torch.cuda, "get_rng_state_all", lambda: list(self.states))
        monkeypatch.setattr(torch.cuda, "set_rng_state_all", set_rng_state_all)
        monkeypatch.setattr(torch.cuda, "default_generators", (Generator(),))


class DrawsThenRaises(nn.Module):
    """A Linear, one draw from every global stream (and the fake CUDA one), then a raise."""

    def __init__(self, cuda: FakeCuda | None = None) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 3)
        # a function, not the fake itself: a deep copy of the model (check_determinism, triage)
        # shares functions, so the copy's forward still moves the installed fake
        self.draw_on_cuda = (lambda: cuda.draw()) if cuda is not None else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = self.fc(x)
        random.random()
        np.random.rand()
        torch.rand(2)
        if self.draw_on_cuda is not None:
            self.draw_on_cuda()
        raise ValueError(f"shape mismatch after {tuple(hidden.shape)}")


CE = nn.CrossEntropyLoss()
CALLS: dict[str, Callable[[nn.Module, torch.Tensor, torch.Tensor], Any]] = {
    "investigate": lambda m, x, y: tl.debug.investigate(m, x, loss_fn=lambda out: out.sum()),
    "check_determinism": lambda m, x, y: tl.debug.check_determinism(m, x),
    "triage": lambda m, x, y: tl.recipes.triage(m, (x, y), CE, steps=2, live=False),
}


X, Y = torch.linspace(-1, 1, 32).reshape(4, 8), torch.tensor([0, 1, 2, 0])


def _call(name: str, model: nn.Module) -> None:
    x, y = X.clone(), Y.clone()
    try:
        CALLS[name](model, x, y)
    except TorchlensNbError:
        pass  # triage stops with ForwardError; the others report the raise


@pytest.mark.parametrize("name", CALLS)
def test_the_cpu_streams_are_restored_when_the_forward_draws_then_raises(name: str) -> None:
    model = DrawsThenRaises()
    before = rng_state()
    _call(name, model)
    assert rng_state() == before


@pytest.mark.parametrize("name", CALLS)
def test_an_initialised_cuda_gets_its_saved_states_back(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    cuda = FakeCuda(initialised=True)
    cuda.install(monkeypatch)
    saved = list(cuda.states)
    _call(name, DrawsThenRaises(cuda))
    assert cuda.restored, "set_rng_state_all was never called"
    assert all(torch.equal(a, b) for a, b in zip(cuda.restored[-1], saved))
    assert [s.tolist() for s in cuda.states] == [s.tolist() for s in saved]


@pytest.mark.parametrize("name", CALLS)
def test_a_cuda_the_forward_initialised_is_reseeded_to_its_first_state(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    cuda = FakeCuda(initialised=False)
    cuda.install(monkeypatch)
    _call(name, DrawsThenRaises(cuda))
    assert cuda.reseeded > 0, "no default generator was reset"
    assert [s.tolist() for s in cuda.states] == [[1, 2, 3]]
