"""What every recipe promises: typed errors, and the caller's model, grads, mode, RNG and data
left bitwise as they were (after a normal call and after a refused one)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

import torchlens_nb as tl
from tests.recipes.state import assert_untouched, snapshot
from torchlens_nb.errors import ModelTypeError, TorchlensNbError

CE = nn.CrossEntropyLoss()
CALLS: dict[str, Callable[[nn.Module, Any], Any]] = {
    "init_loss": lambda m, b: tl.recipes.init_loss(m, b, CE),
    "random_input_test": lambda m, b: tl.recipes.random_input_test(m, b, CE),
    "overfit_one_batch": lambda m, b: tl.recipes.overfit_one_batch(m, b, CE, steps=2),
    "gradient_flow": lambda m, b: tl.recipes.gradient_flow(m, b, CE),
    "batch_independence": lambda m, b: tl.recipes.batch_independence(m, b[0]),
    "prime_dims": lambda m, b: tl.recipes.prime_dims(m, lambda batch: torch.randn(batch, 8)),
    "confident_errors": lambda m, b: tl.recipes.confident_errors(m, b),
    "update_ratio": lambda m, b: tl.recipes.update_ratio(m, b, CE, steps=2),
    "weight_distribution": lambda m, b: tl.recipes.weight_distribution(m),
}
REFUSED: dict[str, Callable[[nn.Module, Any], Any]] = {
    "init_loss": lambda m, b: tl.recipes.init_loss(m, b, CE, num_classes=0),
    "random_input_test": lambda m, b: tl.recipes.random_input_test(m, b, CE, trials=0),
    "overfit_one_batch": lambda m, b: tl.recipes.overfit_one_batch(m, b, CE, lr=0.0),
    "gradient_flow": lambda m, b: tl.recipes.gradient_flow(m, b, "ce"),
    "batch_independence": lambda m, b: tl.recipes.batch_independence(m, b[0], rtol=-1),
    "prime_dims": lambda m, b: tl.recipes.prime_dims(m, lambda: torch.randn(2, 8)),
    "confident_errors": lambda m, b: tl.recipes.confident_errors(m, b, k=0),
    "update_ratio": lambda m, b: tl.recipes.update_ratio(m, b, CE, steps=0),
    "weight_distribution": lambda m, b: tl.recipes.weight_distribution(m, bins=0),
}


def caller_model() -> nn.Module:
    """An MLP with dropout and BatchNorm, half in train mode, holding gradients."""
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Dropout(0.2), nn.Linear(16, 3)
    )
    model.train()
    model[1].eval()
    x = torch.randn(6, 8)
    nn.functional.cross_entropy(model(x), torch.tensor([0, 1, 2, 0, 1, 2])).backward()
    return model


@pytest.mark.parametrize("name", sorted(CALLS))
def test_a_recipe_leaves_the_caller_model_and_data_bitwise_alone(name: str) -> None:
    model = caller_model()
    x, y = torch.randn(6, 8), torch.tensor([0, 1, 2, 0, 1, 2])
    data = (x.clone(), y.clone())
    before = snapshot(model)
    CALLS[name](model, (x, y))
    assert_untouched(before, model)  # weights, BatchNorm buffers, .grad, modes, RNG
    assert torch.equal(x, data[0]) and torch.equal(y, data[1])


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_a_refused_call_raises_a_typed_error_and_touches_nothing(name: str) -> None:
    model = caller_model()
    batch = (torch.randn(6, 8), torch.tensor([0, 1, 2, 0, 1, 2]))
    before = snapshot(model)
    with pytest.raises(TorchlensNbError) as info:
        REFUSED[name](model, batch)
    assert isinstance(info.value, (ValueError, TypeError))  # catchable as the built-in, too
    assert_untouched(before, model)


@pytest.mark.parametrize("name", sorted(CALLS))
def test_a_recipe_refuses_something_that_is_not_a_model(name: str) -> None:
    with pytest.raises(ModelTypeError, match="nn.Module"):
        CALLS[name]([nn.Linear(8, 3)], (torch.randn(6, 8), torch.tensor([0, 1, 2, 0, 1, 2])))


def shuffled_loader() -> torch.utils.data.DataLoader:
    """A shuffling DataLoader without its own generator: iterating it draws its base seed
    from the global torch RNG."""
    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(32, 8), torch.randint(0, 3, (32,)))
    return torch.utils.data.DataLoader(data, batch_size=8, shuffle=True)


LOADER_CALLS: dict[str, Callable[[nn.Module, torch.utils.data.DataLoader], Any]] = {
    "data_sanity": lambda m, loader: tl.recipes.data_sanity(loader, num_batches=2),
    "class_balance": lambda m, loader: tl.recipes.class_balance(loader),
    "init_loss": lambda m, loader: tl.recipes.init_loss(m, loader, CE),
    "gradient_flow": lambda m, loader: tl.recipes.gradient_flow(m, loader, CE),
    "confident_errors": lambda m, loader: tl.recipes.confident_errors(m, loader),
}


@pytest.mark.parametrize("name", sorted(LOADER_CALLS))
def test_reading_a_shuffling_loader_leaves_the_global_rng_alone(name: str) -> None:
    model, loader = caller_model(), shuffled_loader()
    before = torch.get_rng_state()
    LOADER_CALLS[name](model, loader)
    assert torch.equal(before, torch.get_rng_state())
