"""The checks kit's write guarantee covers what the optimizer will really write, and no report
says ``clean`` about evidence the session did not see.

Each case is a training setup people use that slipped past the pre-write check: a layer unfrozen
mid-run, a param group added later, a parameter outside the optimizer whose NaN the clip spreads,
a closure optimizer, a loop that skips the step itself, two sessions on one optimizer; plus the
death-spiral watchdog's default and the bounds on what a session keeps. Where a NaN reaches
``optimizer.step()`` the test asserts the raise came before the write (weights and optimizer
state bitwise as they were, :func:`~tests.faults._guards.untouched`) and names the culprit.
"""

from __future__ import annotations

import contextlib
import json
import math
import warnings
from collections.abc import Callable

import pytest
import torch
from torch import nn

import torchlens_nb as tl
from tests import models
from tests.checks.conftest import change_session, nonfinite_session, poison_next_backward
from tests.faults._guards import untouched
from torchlens_nb.errors import CheckViolationError, DiagnosticArgumentError

pytestmark = pytest.mark.fault("no_corruption")

NAN = math.nan


def loss_of(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return model(x).square().mean()


def train_step(
    model: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor, clip: bool = False
) -> None:
    optimizer.zero_grad()
    loss_of(model, x).backward()
    if clip:
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
    optimizer.step()


def stopped_before_the_write(
    session: tl.debug.ChecksSession,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    step: Callable[[], object],
    culprit: torch.Tensor,
) -> CheckViolationError:
    """Poison ``culprit``'s next gradient and run ``step`` inside the attached session: the
    kit must raise, and leave weights and optimizer state bitwise as they were."""
    with pytest.raises(CheckViolationError) as caught:
        with untouched([model], [optimizer], grads=False):
            poison_next_backward(culprit, NAN)
            step()
    assert caught.value.code == "nonfinite_grad"
    return caught.value


def test_a_layer_unfrozen_mid_run_is_judged_at_the_step() -> None:
    model = models.mlp()
    model[0].requires_grad_(False)  # frozen when the session is built
    optimizer = torch.optim.AdamW(model.parameters())
    session = nonfinite_session(model, optimizer)
    x = torch.randn(4, 8)
    with session:
        train_step(model, optimizer, x)
        model[0].requires_grad_(True)  # unfrozen: AdamW updates it from now on
        train_step(model, optimizer, x)
        error = stopped_before_the_write(
            session, model, optimizer, lambda: train_step(model, optimizer, x), model[0].weight
        )
    assert error.fields["culprit"] == "0.weight"
    assert (error.fields["attempt"], error.fields["attribution"]) == (2, "isolated")
    seen = next(f for f in session.report().findings if f.code == "param_first_seen")
    # 0.weight and 0.bias joined at the second attempt (index 1), when they required grad
    assert [(p["param"], p["attempt"]) for p in seen.fields["params"]] == [
        ("0.weight", 1),
        ("0.bias", 1),
    ]


def test_a_param_group_added_later_is_judged_at_the_step() -> None:
    model = models.mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    session = nonfinite_session(model, optimizer)
    x = torch.randn(4, 8)
    with session:
        train_step(model, optimizer, x)
        head = nn.Linear(4, 3)  # a new head, unknown to the session until it appears
        model.add_module("3", head)
        optimizer.add_param_group({"params": head.parameters(), "lr": 0.01})
        train_step(model, optimizer, x)
        error = stopped_before_the_write(
            session, model, optimizer, lambda: train_step(model, optimizer, x), head.weight
        )
    assert (error.fields["culprit"], error.fields["culprit_in_optimizer"]) == ("3.weight", True)
    report = session.report()
    seen = next(f for f in report.findings if f.code == "param_first_seen")
    assert [(p["param"], p["group"]) for p in seen.fields["params"]] == [
        ("3.weight", 1),
        ("3.bias", 1),
    ]
    assert [row["param"] for row in report.table("params").dicts()][-2:] == ["3.weight", "3.bias"]


def test_a_nan_outside_the_optimizer_spread_by_the_clip_is_stopped_and_named() -> None:
    model = models.mlp()
    optimizer = torch.optim.AdamW(model[2].parameters())  # layer 0 trains nowhere ...
    session = nonfinite_session(model, optimizer)
    x = torch.randn(4, 8)
    with session:
        train_step(model, optimizer, x, clip=True)
        # ... but requires grad, and the clip over model.parameters() spreads its NaN into the
        # optimizer's gradients: without the step-site read every weight of layer 2 turns NaN
        error = stopped_before_the_write(
            session,
            model,
            optimizer,
            lambda: train_step(model, optimizer, x, clip=True),
            model[0].weight,
        )
    assert (error.fields["culprit"], error.fields["culprit_in_optimizer"]) == ("0.weight", False)
    # what the optimizer was about to use: both of its gradients NaN after the clip
    assert error.fields["observed_at_step_site"]["nonfinite"] == 2


def lbfgs_closure(
    model: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor
) -> Callable[[], torch.Tensor]:
    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        loss = loss_of(model, x)
        loss.backward()
        return loss

    return closure


@pytest.mark.parametrize("clean_steps", [0, 2], ids=["first-step", "after-two-steps"])
def test_lbfgs_is_stopped_inside_its_closure_before_it_uses_the_gradient(clean_steps) -> None:
    model = models.mlp()
    optimizer = torch.optim.LBFGS(model.parameters(), lr=0.1, max_iter=3)
    session = nonfinite_session(model, optimizer)
    closure = lbfgs_closure(model, optimizer, torch.randn(4, 8))
    with session:
        for _ in range(clean_steps):
            optimizer.step(closure)
        # untouched() also compares LBFGS's own state (func_evals, n_iter, its history)
        error = stopped_before_the_write(
            session, model, optimizer, lambda: optimizer.step(closure), model[2].weight
        )
    assert error.fields["culprit"] == "2.weight"
    assert error.fields["attempt"] == clean_steps  # the attempt that ran the NaN, not the next
    assert error.fields["is_mid_step"] is False
    report = session.report()
    assert (report.counters["accepted"], report.counters["raised"]) == (clean_steps, 1)


def test_a_nan_at_an_lbfgs_re_evaluation_is_stopped_before_lbfgs_uses_it() -> None:
    model = models.mlp()
    optimizer = torch.optim.LBFGS(model.parameters(), lr=0.1, max_iter=4)
    session = nonfinite_session(model, optimizer)
    x = torch.randn(4, 8)
    evaluations = []

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        loss = loss_of(model, x)
        evaluations.append(len(evaluations))
        if len(evaluations) == 2:  # the first re-evaluation, after LBFGS wrote iterate 1
            poison_next_backward(model[2].bias, NAN)
        loss.backward()
        return loss

    with session, pytest.raises(CheckViolationError, match="re-evaluated its closure") as caught:
        optimizer.step(closure)
    assert evaluations == [0, 1]  # stopped inside the re-evaluation: no third one
    assert (caught.value.fields["culprit"], caught.value.fields["is_mid_step"]) == ("2.bias", True)
    assert all(torch.isfinite(p).all() for p in model.parameters())  # nothing non-finite written
    assert session.report().counters["backwards"] == 2


def test_a_closure_step_of_sgd_is_judged_on_the_closures_gradients() -> None:
    model = models.mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    session = nonfinite_session(model, optimizer)
    closure = lbfgs_closure(model, optimizer, torch.randn(4, 8))
    with session:
        optimizer.step(closure)
        error = stopped_before_the_write(
            session, model, optimizer, lambda: optimizer.step(closure), model[0].bias
        )
    assert (error.fields["culprit"], error.fields["attempt"]) == ("0.bias", 1)
    assert session.report().counters["backwards"] == 2  # one closure backward per attempt


def skipping_loop(boundary: bool) -> tl.debug.ChecksSession:
    """Four attempts of the guard people write: skip the step when the clipped norm is not
    finite. The third attempt's gradient of 0.weight is NaN; returns the detached session."""
    model = models.mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    session = nonfinite_session(model, optimizer)
    x = torch.randn(4, 8)
    with session:
        for step in range(4):
            with session.step(global_step=step) if boundary else contextlib.nullcontext():
                optimizer.zero_grad()
                if step == 2:
                    poison_next_backward(model[0].weight, NAN)
                loss_of(model, x).backward()
                total = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
                if not torch.isfinite(total):
                    optimizer.zero_grad()
                    continue
                optimizer.step()
    assert all(torch.isfinite(p).all() for p in model.parameters())
    return session


@pytest.mark.fault("no_false_clean")
@pytest.mark.parametrize("boundary", [False, True], ids=["hook-only", "boundary"])
def test_a_step_the_loop_skips_is_reported_as_skipped_by_the_loop(boundary) -> None:
    report = skipping_loop(boundary).report()
    assert report.status == "found"
    assert [r["status"] for r in report.ledgers["steps"]] == [
        "accepted",
        "accepted",
        "skipped",
        "accepted",
    ]
    assert report.ledgers["steps"][2]["skip_cause"] == "loop"
    counters = report.counters
    assert (counters["skipped_by_loop"], counters["skipped_by_scaler"]) == (1, 0)
    codes = [f.code for f in report.findings]
    assert "nonfinite_grad_skipped_by_scaler" not in codes
    finding = next(f for f in report.findings if f.code == "nonfinite_grad_skipped_by_loop")
    assert (finding.severity, finding.fields["count"]) == ("warning", 1)
    assert (finding.fields["first_attempt"], finding.fields["culprit"]) == (2, "0.weight")
    assert "the loop skipped" in finding.message and "GradScaler skipped" not in finding.message


def test_a_second_session_on_the_same_optimizer_is_refused() -> None:
    model = models.mlp()
    optimizer = torch.optim.AdamW(model.parameters())
    first = nonfinite_session(model, optimizer)
    second = nonfinite_session(model, optimizer)
    x = torch.randn(4, 8)
    with first:
        with pytest.raises(DiagnosticArgumentError, match="already watched by another"):
            with untouched([model], [optimizer]):
                second.attach()
        stopped_before_the_write(
            first, model, optimizer, lambda: train_step(model, optimizer, x), model[0].weight
        )
    with second:  # once the first detached, the second may attach
        train_step(model, optimizer, x)
    assert second.report().counters["accepted"] == 1


def always_skipped(model, optimizer, scaler, attempts: int, k: int) -> None:
    """``attempts`` attempts of ``k`` micro-batches whose loss is inf: the scaler skips each."""
    for _ in range(attempts):
        for _ in range(k):
            scaler.scale(loss_of(model, torch.randn(4, 8)) * math.inf).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()


@pytest.mark.fault("no_false_clean")
def test_the_watchdog_is_on_by_default_and_uses_the_recovered_accumulation_factor() -> None:
    model = models.mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
    session = tl.debug.ChecksSession(model, optimizer, scaler=scaler)  # nothing registered
    with warnings.catch_warnings(record=True) as caught, session:
        warnings.simplefilter("always")
        always_skipped(model, optimizer, scaler, attempts=20, k=4)
        # K = 4 recovered from the skipped attempts: the limit is 4 x 20 = 80 backwards
        assert not [f for f in session.report().findings if f.code == "check_no_accepted_steps"]
        always_skipped(model, optimizer, scaler, attempts=1, k=4)
    finding = next(f for f in session.report().findings if f.code == "check_no_accepted_steps")
    assert (finding.fields["backwards_since_accepted"], finding.fields["limit"]) == (81, 80)
    assert finding.fields["accumulation_factor"] == 4
    assert sum("check_no_accepted_steps" in str(w.message) for w in caught) == 1
    assert session.report().check("no_accepted_steps").action == "warn"


@pytest.mark.fault("size")
def test_a_repeated_finding_collapses_into_one_with_a_count() -> None:
    model = models.mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    session = tl.debug.ChecksSession(model, optimizer, scaler=None)
    x = torch.randn(4, 8)
    sizes = []
    with session:
        for step in range(300):
            with session.step(global_step=1000 + step, micro_batches=2):  # really runs 1
                train_step(model, optimizer, x)
            if step in (99, 299):
                findings = session.report().to_dict()["findings"]
                sizes.append(len(json.dumps(findings, allow_nan=False)))
    mismatches = [f for f in session.report().findings if f.code == "micro_batches_mismatch"]
    assert len(mismatches) == 1
    fields = mismatches[0].fields
    assert (fields["count"], fields["first_attempt"], fields["last_attempt"]) == (300, 0, 299)
    assert (fields["first_global_step"], fields["last_global_step"]) == (1000, 1299)
    assert dict(fields["observed_counts"]) == {"1": 300}
    assert sizes[1] <= sizes[0] + 2  # 200 more steps: only the digits of the counters grow


@pytest.mark.fault("no_false_clean")
def test_a_rearmed_change_check_episode_is_a_second_finding() -> None:
    model = models.mlp()
    optimizer, session = change_session(model, window=2, min_hits=2)
    x = torch.randn(8, 8)
    plan = [True] * 4 + [False] * 3 + [True] * 3  # True: layer 2 gets no gradient
    with session:
        for skip_head in plan:
            optimizer.zero_grad()
            out = model[:2](x)[:, :4] if skip_head else model(x)
            out.square().mean().backward()
            optimizer.step()
    episodes = [f for f in session.report().findings if f.code == "param_received_no_gradient"]
    # episode 1: sustained on attempts 1-3, re-armed by the clean window of attempts 4-5;
    # episode 2: sustained on attempts 8-9, still open
    assert [
        (f.fields["episode"], f.fields["first_attempt"], f.fields["last_attempt"]) for f in episodes
    ] == [(1, 1, 3), (2, 8, 9)]
    assert [f.fields["rearmed_attempt"] for f in episodes] == [5, None]
    assert all(
        [row["param"] for row in f.fields["params"]] == ["2.weight", "2.bias"] for f in episodes
    )
