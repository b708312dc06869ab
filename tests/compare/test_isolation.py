"""isolated_capture / preserved_rng_state / clone_input_tree: the caller's model, inputs and RNG
streams stay bitwise as they were."""

from __future__ import annotations

import random
from collections import namedtuple

import numpy as np
import pytest
import torch
from torch import nn

import torchlens_nb as tl
from tests import models


def _rng_draws() -> tuple[float, float, torch.Tensor]:
    return random.random(), float(np.random.rand()), torch.rand(3)


def test_preserved_rng_state_restores_python_numpy_and_torch_streams() -> None:
    random.seed(1)
    np.random.seed(1)
    torch.manual_seed(1)
    expected = _rng_draws()
    random.seed(1)
    np.random.seed(1)
    torch.manual_seed(1)
    with tl.debug.preserved_rng_state():
        random.seed(99)
        np.random.seed(99)
        torch.manual_seed(99)
        _rng_draws()
    after = _rng_draws()
    assert after[:2] == expected[:2]
    assert torch.equal(after[2], expected[2])


def test_preserved_rng_state_restores_when_the_block_raises() -> None:
    state = torch.get_rng_state()
    with pytest.raises(ValueError, match="boom"):
        with tl.debug.preserved_rng_state():
            torch.rand(5)
            raise ValueError("boom")
    assert torch.equal(state, torch.get_rng_state())


Pair = namedtuple("Pair", "x y")


def test_clone_input_tree_copies_tensors_and_keeps_containers() -> None:
    leaf = torch.ones(2, requires_grad=True)
    tree = {"ids": torch.arange(3), "pair": Pair(leaf, [torch.zeros(1), "text"]), "n": 4}
    cloned = tl.debug.clone_input_tree(tree)
    assert type(cloned["pair"]) is Pair
    assert cloned["pair"].y[1] == "text" and cloned["n"] == 4
    assert torch.equal(cloned["ids"], tree["ids"]) and cloned["ids"] is not tree["ids"]
    assert cloned["pair"].x.requires_grad and cloned["pair"].x is not leaf
    cloned["ids"].add_(10)
    assert tree["ids"].tolist() == [0, 1, 2]


class WritesItsInput(nn.Module):
    """Train-mode BatchNorm (updates running stats), dropout (draws RNG), in-place input write."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.bn = nn.BatchNorm1d(4)
        self.drop = nn.Dropout(0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x.mul_(2)
        return self.drop(self.bn(self.fc(x)))


def test_isolated_capture_leaves_model_inputs_and_rng_bitwise_untouched() -> None:
    torch.manual_seed(0)
    model = WritesItsInput().train()
    x = torch.randn(8, 4)
    x_before = x.clone()
    state_before = {k: v.clone() for k, v in model.state_dict().items()}
    rng_before = torch.get_rng_state()
    python_before = random.getstate()
    trace = tl.debug.isolated_capture(model, x, seed=3)
    assert torch.equal(x, x_before)
    assert all(torch.equal(state_before[k], v) for k, v in model.state_dict().items())
    assert torch.equal(rng_before, torch.get_rng_state())
    assert random.getstate() == python_before
    assert model.training
    # the capture itself ran: on a copy, with the input doubled in place on the clone
    assert [op.func for op in trace][:2] == ["input", "mul_"]


def test_isolated_capture_is_repeatable_for_a_seed_and_differs_across_seeds() -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5))
    x = torch.ones(2, 4)
    first = tl.debug.isolated_capture(model, x, seed=0)
    again = tl.debug.isolated_capture(model, x, seed=0)
    other = tl.debug.isolated_capture(model, x, seed=1)
    assert torch.equal(first.output, again.output)
    assert not torch.equal(first.output, other.output)  # another dropout mask


def test_prepare_may_replace_the_copy_and_never_touches_the_original() -> None:
    model = nn.Linear(2, 2)
    trace = tl.debug.isolated_capture(
        model, torch.ones(1, 2, dtype=torch.float64), seed=0, prepare=lambda m: m.double()
    )
    assert trace["linear_1"].dtype == "float64"
    assert model.weight.dtype == torch.float32


def test_deepcopy_right_after_a_trace_needs_no_release() -> None:
    model = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
    tl.trace(model, torch.ones(1, 2))
    trace = tl.debug.isolated_capture(model, torch.ones(1, 2), seed=0)
    assert [op.label for op in trace] == ["input_1", "linear_1", "relu_1"]


def test_a_model_deepcopy_refuses_needs_a_factory() -> None:
    with pytest.raises(tl.errors.ModelCopyError, match="pass model_factory="):
        tl.debug.isolated_capture(models.Locked(), torch.ones(1, 2), seed=0)
    trace = tl.debug.isolated_capture(None, torch.ones(1, 2), seed=0, model_factory=models.Locked)
    assert trace.output_layers == ("linear_1",)


def test_bad_arguments_are_refused_before_anything_runs() -> None:
    with pytest.raises(tl.errors.DiagnosticArgumentError, match="only save= and capture="):
        tl.debug.isolated_capture(nn.ReLU(), torch.ones(1), seed=0, saves=True)
    with pytest.raises(tl.errors.InputFormError, match="tokenize it first"):
        tl.debug.isolated_capture(nn.ReLU(), "hello", seed=0)
    with pytest.raises(tl.errors.ModelTypeError):
        tl.debug.isolated_capture([nn.ReLU()], torch.ones(1), seed=0)
