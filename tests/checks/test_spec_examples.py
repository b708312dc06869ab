"""The checks-kit examples of the spec (``checks_kit.txt``), run as written with
``import torchlens_nb as tl``. Each test carries the spec text, then asserts what it printed."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import torchlens_nb as tl


@pytest.fixture
def quick_start_model() -> tuple[nn.Sequential, torch.optim.AdamW]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    optimizer = torch.optim.AdamW(model.parameters())
    return model, optimizer


def test_quick_start_hook_only_mode(quick_start_model, capsys) -> None:
    model, optimizer = quick_start_model

    session = tl.debug.ChecksSession(model, optimizer, scaler=None)
    session.register_change_check()  # gradient-fact detector, M-of-N warn
    session.register_nonfinite_grad_check()  # collect at S-A, raise at S-B pre-write
    session.register_update_ratio_check()  # raw + lr-normalized columns, collect

    with session:  # attach() installs the hooks; detach() on exit
        for _ in range(3):
            optimizer.zero_grad()
            loss = model(torch.randn(4, 8)).square().mean()
            loss.backward()
            optimizer.step()

    report = session.report()
    print(report)  # house-style summary (matches HealthReport)

    printed = capsys.readouterr().out
    assert printed.startswith(
        "checks [clean] Sequential with AdamW (4 parameters): 3 attempt(s): "
        "3 accepted, 0 skipped (inferred); no findings."
    )
    # the invariants and the death-spiral watchdog run by default, after the registered checks
    assert [r.name for r in report.checks_run] == [
        "change",
        "nonfinite_grad",
        "update_ratio",
        "optimizer_roster",
        "fresh_grads",
        "step_moves",
        "outside_writes",
        "stability",
        "no_accepted_steps",
    ]
    assert {r.state for r in report.checks_run} == {"clean"}
    assert report.to_dict()["schema_version"] == 1


def test_boundary_mode(quick_start_model, capsys) -> None:
    model, optimizer = quick_start_model

    session2 = tl.debug.ChecksSession(model, optimizer, scaler=None)
    session2.register_change_check()
    with session2:
        for step_idx in range(2):
            with session2.step(global_step=step_idx):
                optimizer.zero_grad()
                model(torch.randn(4, 8)).square().mean().backward()
                optimizer.step()
    report2 = session2.report()
    print(report2.to_dict()["counters"])  # explicit attempts / accepted / skipped
    print(report2.to_dict()["ledgers"]["scale"])  # the skip ledger (decrement counting)

    counters_line, scale_line = capsys.readouterr().out.splitlines()
    assert "'attempts': 2, 'accepted': 2, 'skipped': 0" in counters_line
    assert "'step_provenance': 'explicit'" in counters_line
    assert scale_line.startswith("{'method': 'not_applicable', 'skipped': 0")
    assert [r["global_step"] for r in report2.to_dict()["ledgers"]["steps"]] == [0, 1]


def test_param_health_audit_of_a_fresh_model(quick_start_model, capsys) -> None:
    model, _ = quick_start_model

    audit = tl.debug.param_health(model)  # also: tl.debug.param_health(model)
    print(audit)  # notebook-style summary
    assert not audit.findings  # healthy fresh model

    assert capsys.readouterr().out.startswith(
        "param_health [clean] Sequential (4 tensors): 4 tensor(s) scanned (100% of 212 "
        "elements): no findings."
    )


def test_recipe_optimizer_state_scan(quick_start_model, capsys) -> None:
    model, optimizer = quick_start_model
    model(torch.randn(4, 8)).square().mean().backward()
    optimizer.step()  # AdamW state exists after one step

    # Recipe: optimizer-state scan (Adam moments, step counters -- six lines).
    optimizer_state = {
        f"{index}.{key}": value
        for index, slot in enumerate(optimizer.state.values())
        for key, value in slot.items()
        if isinstance(value, torch.Tensor)
    }
    if optimizer_state:
        print(tl.debug.param_health(optimizer_state))

    # 4 parameters x (step, exp_avg, exp_avg_sq)
    assert capsys.readouterr().out.startswith("param_health [clean] mapping (12 tensors)")


def test_recipe_one_shot_gradient_triage(quick_start_model, capsys) -> None:
    model, optimizer = quick_start_model

    # Recipe: one-shot gradient triage (label the phase yourself: post-backward).
    optimizer.zero_grad()
    model(torch.randn(4, 8)).square().mean().backward()
    grads = {f"grad.{n}": p.grad for n, p in model.named_parameters() if p.grad is not None}
    grad_audit = tl.debug.param_health(grads)
    print(f"{len(grad_audit.rows)} gradient tensors scanned, {len(grad_audit.findings)} findings")
    optimizer.zero_grad()

    assert capsys.readouterr().out == "4 gradient tensors scanned, 0 findings\n"


def test_recipe_loss_finiteness_guard(quick_start_model) -> None:
    model, optimizer = quick_start_model

    # Recipe: guard the loss scalar before backward -- torch already has the check.
    loss = model(torch.randn(4, 8)).square().mean()
    if not torch.isfinite(loss):
        raise RuntimeError(f"nonfinite loss {loss.item()!r}: skip or debug this batch")
    loss.backward()
    optimizer.zero_grad()

    assert all(p.grad is None for p in model.parameters())
