"""The recipes for what the session cannot see (``tl.recipes.eval_determinism``,
``duplicate_samples``, ``autocast_coverage``): what each finds, and the recipe contract (typed
errors; the caller's model, gradients, modes, RNG and data left bitwise alone)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

import torchlens_nb as tl
from tests.recipes.state import assert_untouched, snapshot
from tests.recipes.test_contract import caller_model, shuffled_loader
from tests.silent.zoo import Attention, Float32Head
from torchlens_nb.errors import ModelTypeError, TorchlensNbError

CALLS: dict[str, Callable[[nn.Module, torch.Tensor], Any]] = {
    "eval_determinism": lambda m, x: tl.recipes.eval_determinism(m, x),
    "autocast_coverage": lambda m, x: tl.recipes.autocast_coverage(m, x),
}
REFUSED: dict[str, Callable[[nn.Module, torch.Tensor], Any]] = {
    "eval_determinism": lambda m, x: tl.recipes.eval_determinism(m, x, passes=1),
    "duplicate_samples": lambda m, x: tl.recipes.duplicate_samples([x], batches=1),
}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_a_recipe_leaves_the_caller_model_and_data_bitwise_alone(name: str) -> None:
    model, x = caller_model(), torch.randn(6, 8)
    data, before = x.clone(), snapshot(model)
    CALLS[name](model, x)
    assert_untouched(before, model)
    assert torch.equal(x, data)


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_a_refused_call_raises_a_typed_error(name: str) -> None:
    with pytest.raises(TorchlensNbError) as info:
        REFUSED[name](caller_model(), torch.randn(6, 8))
    assert isinstance(info.value, (ValueError, TypeError))


@pytest.mark.parametrize("name", sorted(CALLS))
def test_a_recipe_refuses_something_that_is_not_a_model(name: str) -> None:
    with pytest.raises(ModelTypeError, match="nn.Module"):
        CALLS[name]([nn.Linear(8, 3)], torch.randn(6, 8))  # type: ignore[arg-type]


def test_eval_determinism_names_the_module_whose_dropout_ignores_eval() -> None:
    model = nn.Sequential(Attention(training_flag_passed=False), nn.Linear(8, 4))
    report = tl.recipes.eval_determinism(model, torch.randn(2, 5, 8))
    assert report.status == "fail" and report.max_abs_diff > 0
    assert report.first_module == "0"  # the attention block's own forward: 0.out's input differed
    assert report.findings[0].where.module == "0"
    fixed = nn.Sequential(Attention(training_flag_passed=True), nn.Linear(8, 4))
    clean = tl.recipes.eval_determinism(fixed, torch.randn(2, 5, 8))
    assert (clean.status, clean.max_abs_diff, clean.first_module) == ("pass", 0.0, None)


def test_duplicate_samples_tells_repeated_batches_from_repeated_rows() -> None:
    rows = torch.randn(8, 4)
    repeated_rows = iter([rows, torch.cat([rows[:2], torch.randn(6, 4)])])
    report = tl.recipes.duplicate_samples(repeated_rows, batches=2)
    assert (report.status, report.duplicate_rows, report.duplicate_batches) == ("warn", 2, 0)
    assert report.tables[0].rows[0] == (1, 0, 0, 0)
    repeated_batch = tl.recipes.duplicate_samples(iter([(rows, 0), (rows.clone(), 1)]), batches=2)
    assert (
        repeated_batch.status == "fail" and repeated_batch.findings[0].code == "duplicate_batches"
    )


def test_duplicate_samples_leaves_a_shuffling_loaders_rng_alone() -> None:
    loader = shuffled_loader()
    before = torch.get_rng_state()
    report = tl.recipes.duplicate_samples(loader, batches=4)
    assert report.status == "pass" and report.rows == 32
    assert torch.equal(before, torch.get_rng_state())


def test_autocast_coverage_names_the_layer_that_runs_in_float32() -> None:
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), Float32Head(escapes=True))
    report = tl.recipes.autocast_coverage(model, torch.randn(4, 8))
    assert report.status == "warn"
    assert report.tables[0].rows == (("2.proj", "addmm", 1),)
    assert (report.eligible_ops, report.float32_ops) == (2, 1)
    covered = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), Float32Head(escapes=False))
    clean = tl.recipes.autocast_coverage(covered, torch.randn(4, 8))
    assert (clean.status, clean.float32_ops, clean.dtype) == ("pass", 0, "bfloat16")


def test_duplicate_samples_never_passes_what_it_could_not_read() -> None:
    with pytest.raises(tl.errors.DiagnosticArgumentError, match="loader yielded no batch"):
        tl.recipes.duplicate_samples([])
    one = tl.recipes.duplicate_samples([torch.arange(6.0).reshape(3, 2)])
    # three distinct rows, but a batch repeated across workers needs a second batch to show
    assert one.status == "inconclusive"
    assert [u.code for u in one.unavailable] == ["one_batch"]
    assert one.lead.endswith("with one batch, repeated batches cannot be seen.")


def test_autocast_coverage_with_no_eligible_op_is_not_a_pass() -> None:
    report = tl.recipes.autocast_coverage(nn.ReLU(), torch.randn(2, 3))
    assert (report.status, report.eligible_ops) == ("inconclusive", 0)
    assert report.lead.endswith("there was nothing to judge.")
