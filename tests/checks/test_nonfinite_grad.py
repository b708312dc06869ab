"""The non-finite gradient check: collected at S-A, raised at S-B before the weights are written."""

from __future__ import annotations

import math

import pytest
import torch

import torchlens_nb as tl
from tests import models
from tests.checks.conftest import clip_recipe_step, is_bitwise_equal, snapshot


@pytest.mark.parametrize("value, kind", [(math.inf, "inf"), (math.nan, "nan")], ids=["inf", "nan"])
def test_raises_before_the_write_and_names_culprit_and_clip_collateral(
    mlp_adamw, poison, value, kind
) -> None:
    model, optimizer = mlp_adamw
    x = torch.randn(4, 8)
    session = tl.debug.ChecksSession(model, optimizer, scaler=None)
    session.register_nonfinite_grad_check()
    with pytest.raises(tl.debug.CheckViolationError, match="0.weight") as caught:
        with session:
            clip_recipe_step(model, optimizer, x)
            clip_recipe_step(model, optimizer, x)  # AdamW state exists from here on
            before = snapshot(model, optimizer)
            poison(model[0].weight, value)
            clip_recipe_step(model, optimizer, x)
    assert is_bitwise_equal(snapshot(model, optimizer), before)  # nothing was written
    error = caught.value
    assert isinstance(error, RuntimeError) and isinstance(error, tl.errors.TorchlensNbError)
    assert error.code == "nonfinite_grad"
    assert error.fields["culprit"] == "0.weight"
    assert error.fields["attribution"] == "isolated"
    assert error.fields["params"][0]["kind"] == kind
    assert (error.fields["attempt"], error.fields["backwards"]) == (2, (2,))
    # 4 parameters, 1 culprit: clipping an inf total norm zeroes the other 3 (NaN poisons them)
    assert error.fields["clipping_collateral"] == 3
    assert error.fields["clipping_collateral_effect"] == (
        "zeroed" if kind == "inf" else "nan_poisoned"
    )
    observed = error.fields["observed_at_step_site"]
    assert (observed["zeroed"], observed["nonfinite"]) == ((3, 0) if kind == "inf" else (0, 3))
    assert "error_if_nonfinite=True" in error.remedy
    assert error.report.status == "raised" and error.report.counters["raised"] == 1
    assert session.report().check("nonfinite_grad").state == "raised"


def test_without_the_session_the_same_loop_corrupts_the_weights(mlp_adamw, poison) -> None:
    model, optimizer = mlp_adamw
    x = torch.randn(4, 8)
    clip_recipe_step(model, optimizer, x)
    clip_recipe_step(model, optimizer, x)
    poison(model[0].weight, math.inf)
    clip_recipe_step(model, optimizer, x)
    # clip zeroed the healthy gradients and made the inf a NaN; AdamW wrote NaN into 0.weight
    assert torch.isnan(model[0].weight).any()
    assert torch.isnan(optimizer.state[model[0].weight]["exp_avg"]).any()


def test_smeared_nan_names_no_single_culprit(mlp_adamw) -> None:
    model, optimizer = mlp_adamw
    session = tl.debug.ChecksSession(model, optimizer, scaler=None)
    session.register_nonfinite_grad_check()
    x = torch.randn(4, 8)
    x[0, 0] = math.nan  # NaN input: every gradient of the model is NaN
    with pytest.raises(tl.debug.CheckViolationError) as caught, session:
        clip_recipe_step(model, optimizer, x)
    assert caught.value.fields["attribution"] == "smeared"
    assert caught.value.fields["culprit"] is None
    assert len(caught.value.fields["params"]) == 4
    assert not any(torch.isnan(p).any() for p in model.parameters())


def test_collect_action_records_without_stopping_the_step(mlp_adamw, poison) -> None:
    model, optimizer = mlp_adamw
    session = tl.debug.ChecksSession(model, optimizer, scaler=None)
    session.register_nonfinite_grad_check(action="collect")
    with session:
        poison(model[2].bias, math.inf)
        clip_recipe_step(model, optimizer, torch.randn(4, 8))
    finding = session.report().findings[0]
    assert (finding.code, finding.severity) == ("nonfinite_grad", "critical")
    assert finding.fields["culprit"] == "2.bias" and finding.fields["is_step_stopped"] is False
    assert "was not stopped" in finding.message
    assert torch.isnan(model[2].bias).any()  # collect means the write happened


def test_error_carries_the_partial_report_and_the_batch_is_rerunnable(mlp_adamw, poison) -> None:
    model, optimizer = mlp_adamw
    session = tl.debug.ChecksSession(model, optimizer, scaler=None)
    session.register_nonfinite_grad_check()
    x = torch.randn(4, 8)
    with session:
        poison(model[0].bias, math.inf)
        with pytest.raises(tl.debug.CheckViolationError):
            clip_recipe_step(model, optimizer, x)
        clip_recipe_step(model, optimizer, x)  # the same batch, now clean, runs on
    report = session.report()
    assert (report.counters["raised"], report.counters["accepted"]) == (1, 1)
    assert [r["status"] for r in report.ledgers["steps"]] == ["raised", "accepted"]
    assert torch.isfinite(model[0].bias).all()


def test_bf16_model_without_scaler_is_stopped(poison) -> None:
    model = models.mlp().to(torch.bfloat16)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    session = tl.debug.ChecksSession(model, optimizer, scaler=None)
    session.register_nonfinite_grad_check()
    with pytest.raises(tl.debug.CheckViolationError, match="2.weight"), session:
        poison(model[2].weight, math.inf)
        clip_recipe_step(model, optimizer, torch.randn(4, 8, dtype=torch.bfloat16))
    assert all(torch.isfinite(p).all() for p in model.parameters())
