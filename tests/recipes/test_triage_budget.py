"""tl.recipes.triage's time budget: the zoos' models keep every run's full length; a model whose
timed step is slow gets shortened runs, each said in its row, a note and ``unavailable``, and a
shortened run never makes a false fail (a budget of 1 ns forces 2-step runs on the zoo MLP)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest
import torch
from torch import nn

import torchlens_nb as tl
from tests.recipes import zoo
from torchlens_nb.recipes.training._planned import planned_steps
from torchlens_nb.recipes.training._update_ratio import recorded_update_ratio
from torchlens_nb.recipes.triage import _budget, _checks
from torchlens_nb.recipes.triage._budget import Budget
from torchlens_nb.recipes.triage._checks import _within_budget
from torchlens_nb.report import Finding, TriageReport
from torchlens_nb.report._recipes_training import OverfitReport


def test_a_planned_run_takes_the_length_its_plan_gives_once_step_1_is_timed() -> None:
    timed: list[float] = []

    def plan(step_s: float) -> int:
        timed.append(step_s)
        return 4

    assert list(planned_steps(10, plan)) == [0, 1, 2, 3]
    assert len(timed) == 2 and min(timed) >= 0.0  # before steps 2 and 3: the mean so far
    answers = iter([8, 3, 9, 9])  # a load that rises mid-run shortens it; a fall never lengthens
    assert list(planned_steps(10, lambda _: next(answers))) == [0, 1, 2]
    assert list(planned_steps(10)) == list(range(10))
    assert list(planned_steps(10, lambda _: 1)) == [0, 1]  # never below 2 steps
    assert list(planned_steps(10, lambda _: 50)) == list(range(10))  # never above steps
    assert list(planned_steps(2, lambda _: pytest.fail("a 2-step run times nothing"))) == [0, 1]


def test_a_quick_step_keeps_every_full_length_and_a_slow_one_gets_its_share() -> None:
    budget = Budget(200, seconds=30.0, slow_step_s=1.0)
    assert [budget.steps(run) for run in ("overfit", "ratio", "probe")] == [200, 10, 20]
    plan = budget.plan("overfit", "overfit_one_batch (Adam)")
    assert plan is not None and plan(0.01) == 200  # a zoo-sized step: not shortened
    assert not budget.is_shortened and budget.note() is None
    assert budget.plan("ratio", "update_ratio") is None  # timed once only

    slow = Budget(200, seconds=30.0, slow_step_s=1.0, step_s=1.5, measured_by="overfit")
    assert slow.is_shortened
    # 30 s / 1.5 s = 20 steps: overfit half (10), update_ratio and the probe a quarter (5)
    assert [slow.steps(run) for run in ("overfit", "ratio", "probe")] == [10, 5, 5]
    note = slow.note()
    assert note is not None and "10 of 200 steps" in note and "a step of 1.5 s" in note
    # a slow step whose full plan (20 + 10 + 2 x 20 steps, 84 s) fits the budget: full length
    assert not Budget(20, seconds=100.0, slow_step_s=1.0, step_s=1.2).is_shortened

    gpt2_small = Budget(200, seconds=30.0, slow_step_s=1.0, step_s=9.0, measured_by="overfit")
    assert [gpt2_small.steps(run) for run in ("overfit", "ratio", "probe")] == [2, 2, 2]


@pytest.fixture
def no_time_at_all(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every timed step is slow and the budget 1 ns: every run is cut to 2 steps."""
    monkeypatch.setattr(_budget, "SLOW_STEP_S", 0.0)
    monkeypatch.setattr(_budget, "TRAINING_BUDGET_S", 1e-9)


def _triage(arguments: dict[str, Any]) -> TriageReport:
    return tl.recipes.triage(**arguments, live=False)


def _row(report: TriageReport, check: str) -> Any:
    return next(r for r in report.rows if r.check == check)


@pytest.mark.usefixtures("no_time_at_all")
def test_a_shortened_healthy_run_says_so_in_its_rows_notes_and_unavailable() -> None:
    report = _triage(zoo.TWINS["mlp adam 3e-4"].arguments())
    assert not [r.check for r in report.rows if r.status in ("warn", "fail")]
    # Adam 3e-4 moves the MLP's loss 0.5% in 2 steps (it memorises in 200): not judged
    assert _row(report, "overfit_one_batch").lead.endswith(
        "in 2 steps, shortened from 200 by the time budget: inconclusive within the budget "
        "(too few steps to judge)."
    )
    assert report.reports["overfit_one_batch"].steps_run == 2
    assert ("overfit_one_batch: memorisation verdict", "shortened") in [
        (u.check, u.code) for u in report.unavailable
    ]
    ratio = _row(report, "update_ratio")
    assert ratio.status == "inconclusive" and ratio.lead.startswith("not judged: at lr=0.0003")
    assert "(runs shortened by the time budget: update_ratio 2 of 10 steps" in ratio.lead
    probe = next(t for t in report.reports["update_ratio"].tables if t.name == "step_size_probe")
    assert probe.dicts()[0]["steps"] == 2 and len(probe.rows) == 1  # no lr x 10 after a stall
    assert any(
        d.startswith("the probe's run at your lr is overfit_one_batch's")
        for d in report.reports["update_ratio"].disclosures
    )
    assert any(
        n.startswith("shortened to a training budget of 1e-09 s") for n in report.disclosures
    )
    assert (
        "overfit_one_batch tried Adam lr=0.0003 (yours x1) only, for 2 steps (the budget); not "
        "tried: Adam lr=0.003 (yours x10); Adam lr=0.03 (yours x100); Adam lr=0.003"
        in report.disclosures
    )
    assert (
        "random_input_test ran on the untrained copy (overfit_one_batch's shortened run did "
        "not train) with one noise draw (the budget)" in report.disclosures
    )
    assert len(report.reports["random_input_test"].noise_losses) == 1
    assert report.status == "incomplete"  # never pass on runs that judged nothing


def test_a_shortened_overfit_run_whose_loss_trains_passes_without_a_memorisation_verdict() -> None:
    falling = OverfitReport(
        subject="GPT2LMHeadModel on one batch",
        status="warn",
        lead="stuck",
        findings=(Finding("cannot_overfit", "critical", "the loss stayed"),),
        verdict="stuck",
        steps=200,
        lr=3e-4,
        losses=(10.97, 10.2, 9.6),
        grad_norms=(3.0, 2.0, 2.0),
        target_loss=0.55,
        elapsed_s=30.0,
    )
    judged = _within_budget(falling, 200)
    assert (judged.status, judged.lead) == (
        "pass",
        "the loss went 10.97 -> 9.6 (peak 10.97) in 3 steps, shortened from 200 by the time "
        "budget: it trains; whether it memorises the batch was not judged.",
    )
    assert [f.code for f in judged.findings] == ["shortened_run"]
    assert [u.code for u in judged.unavailable] == ["shortened"]
    nan = dataclasses.replace(falling, losses=(10.97, math.nan))
    assert _within_budget(nan, 200) is nan  # a non-finite loss is seen, shortened or not


@pytest.mark.usefixtures("no_time_at_all")
def test_a_shortened_run_keeps_what_it_saw_and_never_fails_for_lack_of_steps() -> None:
    dead = next(b for b in zoo.ZOO if b.name == "dead_layer")
    report = _triage(dead.call(broken=True))
    assert report.root_cause is not None and report.root_cause.check == "gradient_flow"
    overfit = report.reports["overfit_one_batch"]
    assert "cannot_overfit" not in [f.code for f in overfit.findings]  # 2 steps show nothing
    assert _row(report, "overfit_one_batch").status in ("inconclusive", "pass")

    too_high = next(b for b in zoo.ZOO if b.name == "adam_lr_1000x")
    report = _triage(too_high.call(broken=True))
    assert report.root_cause is not None and report.root_cause.code == "lr_too_high"


def test_the_zoo_mlp_keeps_every_full_length() -> None:
    report = _triage(zoo.TWINS["mlp adam 3e-4"].arguments())
    assert report.reports["overfit_one_batch"].steps_run == 200
    assert not any(n.startswith("shortened") for n in report.disclosures)
    assert "shortened" not in _row(report, "update_ratio").lead


@pytest.mark.usefixtures("no_time_at_all")
def test_a_large_models_shortened_update_ratio_reads_the_overfit_runs_own_ratios(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_checks, "RATIO_WATCH_PARAMS", 0)  # the zoo MLP counts as large here
    case = zoo.TWINS["mlp adam 3e-4"]
    report = _triage(case.arguments())
    row = _row(report, "update_ratio")
    assert "(runs shortened by the time budget: update_ratio read from overfit_one_batch's 2 " in (
        row.lead
    )
    read = report.reports["update_ratio"]
    assert any(
        d.startswith("the update ratios are overfit_one_batch's run's") for d in read.disclosures
    )
    assert any(
        "update_ratio read the update ratios of that attempt" in n for n in report.disclosures
    )
    # the same optimizer, lr and batch on a copy without dropout: update_ratio's own run of
    # those 2 steps measures the same ratios
    arguments = case.arguments()
    own = tl.recipes.update_ratio(
        arguments["model"], arguments["batch"], arguments["loss_fn"], steps=2, lr=3e-4
    )
    assert [layer.name for layer in read.layers] == [layer.name for layer in own.layers]
    for mine, theirs in zip(read.layers, own.layers, strict=True):
        assert mine.log10_ratios == pytest.approx(theirs.log10_ratios, rel=1e-6)


def test_a_recorded_run_that_is_interrupted_keeps_no_ratios_and_leaves_no_hook() -> None:
    model, (x, y) = zoo.MLP(), zoo.batch()
    optimizer = torch.optim.Adam([{"params": [p]} for p in model.parameters()], lr=1e-3)
    record = _checks.RatioRecord()
    with pytest.raises(KeyboardInterrupt), record.watch(model, optimizer):
        for _ in range(2):
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
        raise KeyboardInterrupt
    assert record.checks is None  # an unfinished run is never read as update_ratio's
    assert not optimizer._optimizer_step_pre_hooks and not optimizer._optimizer_step_post_hooks
    assert "step" not in vars(optimizer)  # no patched step left on the instance
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())
    with record.watch(model, optimizer):
        for _ in range(3):
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
    assert record.checks is not None
    ratios = recorded_update_ratio(record.checks, record.names, "MLP", None)
    assert [len(layer.log10_ratios) for layer in ratios.layers] == [3, 3, 3]


def test_a_session_that_refuses_to_attach_leaves_the_run_as_it_was(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse(model: nn.Module, optimizer: torch.optim.Optimizer) -> Any:
        raise tl.errors.DiagnosticArgumentError("this optimizer cannot be watched")

    monkeypatch.setattr(_checks, "ratio_session", refuse)
    model, (x, y) = zoo.MLP(), zoo.batch()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    record = _checks.RatioRecord()
    with record.watch(model, optimizer):
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
    assert record.checks is None and record.names == {}
