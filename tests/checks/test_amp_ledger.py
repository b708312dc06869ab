"""AMP accounting: the skip ledger counts GradScaler scale decrements, exactly, under accumulation."""

from __future__ import annotations

import contextlib
import warnings

import pytest
import torch

import torchlens_nb as tl
from tests import models

K = 4


def _run(
    session, model, optimizer, scaler, bad_attempts: set[int], attempts: int, boundary: bool
) -> None:
    """``attempts`` optimizer attempts of K micro-batches; an inf loss in micro-batch 2 of each
    bad attempt makes the scaler skip it."""
    for attempt in range(attempts):
        block = (
            session.step(global_step=100 + attempt, micro_batches=K)
            if boundary
            else contextlib.nullcontext()
        )
        with block:
            for micro in range(K):
                loss = model(torch.randn(4, 8)).square().mean() / K
                if attempt in bad_attempts and micro == 2:
                    loss = loss * float("inf")
                scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()


def _setup():
    model = models.mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
    session = tl.debug.ChecksSession(model, optimizer, scaler=scaler)
    session.register_nonfinite_grad_check()
    return model, optimizer, scaler, session


def test_hook_only_counts_skips_exactly_and_recovers_k_where_naive_subtraction_fails() -> None:
    model, optimizer, scaler, session = _setup()
    with session:
        _run(session, model, optimizer, scaler, {3}, attempts=6, boundary=False)
    report = session.report()
    counters, scale = report.counters, report.ledgers["scale"]
    assert (counters["attempts"], counters["accepted"], counters["skipped"]) == (6, 5, 1)
    assert scale["method"] == "scale_decrements" and scale["skipped"] == 1
    assert [(d["from_scale"], d["to_scale"]) for d in scale["decrements"]] == [(1024.0, 512.0)]
    assert counters["accumulation_factor"] == K
    assert counters["step_provenance"] == "inferred"
    # naive fire-count subtraction: 24 backwards - 5 optimizer steps = 19, not 1
    naive = counters["backwards"] - counters["step_pre_fires"]
    assert naive == 19 and naive != scale["skipped"]
    # the skipped attempt's non-finite gradients were collected, never raised
    assert [f.code for f in report.findings] == ["nonfinite_grad_skipped_by_scaler"]


def test_boundary_mode_attributes_consecutive_skips_to_global_steps() -> None:
    model, optimizer, scaler, session = _setup()
    with session:
        _run(session, model, optimizer, scaler, {1, 2}, attempts=5, boundary=True)
    report = session.report()
    assert report.counters["step_provenance"] == "explicit"
    assert [(r["global_step"], r["status"]) for r in report.ledgers["steps"]] == [
        (100, "accepted"),
        (101, "skipped"),
        (102, "skipped"),
        (103, "accepted"),
        (104, "accepted"),
    ]
    assert report.ledgers["scale"]["skipped"] == report.counters["skipped"] == 2
    assert report.ledgers["scale"]["current_scale"] == 256.0  # 1024 * 0.5 * 0.5
    assert all(r["backwards"] == r["micro_batches"] == K for r in report.ledgers["steps"])


def test_watchdog_warns_when_no_attempt_is_ever_accepted() -> None:
    model, optimizer, scaler, session = _setup()
    session.register_no_accepted_steps_check(threshold_attempts=3)
    with warnings.catch_warnings(record=True) as caught, session:
        warnings.simplefilter("always")
        _run(session, model, optimizer, scaler, set(range(5)), attempts=5, boundary=False)
    report = session.report()
    assert report.counters["accepted"] == 0 and report.ledgers["scale"]["skipped"] == 5
    finding = next(f for f in report.findings if f.code == "check_no_accepted_steps")
    # K = 4 is recovered from the first skipped attempt (closed when attempt 1's first backward
    # starts from reset gradients), so the limit is 4 x 3 = 12 backwards, passed at the 13th
    assert (finding.fields["backwards_since_accepted"], finding.fields["limit"]) == (13, 12)
    assert sum("no_accepted_steps" in str(w.message) for w in caught) == 1


def test_undeclared_scaler_makes_the_skip_ledger_unavailable(mlp_adamw) -> None:
    model, optimizer = mlp_adamw
    session = tl.debug.ChecksSession(model, optimizer)
    report = session.report()
    assert report.ledgers["scale"]["method"] == "unknown"
    assert report.ledgers["scale"]["skipped"] is None
    assert "scale_unknown" in {u.code for u in report.unavailable}


def test_a_non_scaler_object_is_refused(mlp_adamw) -> None:
    model, optimizer = mlp_adamw
    with pytest.raises(tl.errors.DiagnosticArgumentError, match="GradScaler or None"):
        tl.debug.ChecksSession(model, optimizer, scaler=object())


def test_boundary_mode_flags_a_block_that_ran_other_than_its_declared_micro_batches() -> None:
    model = models.mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    session = tl.debug.ChecksSession(model, optimizer, scaler=None)
    with session:
        with session.step(global_step=7, micro_batches=2):
            for _ in range(3):
                model(torch.randn(4, 8)).square().mean().backward()
            optimizer.step()
    report = session.report()
    finding = report.findings[0]
    assert finding.code == "micro_batches_mismatch"
    assert (finding.fields["declared"], finding.fields["observed"]) == (2, 3)
    assert report.counters["accumulation_factor"] == 2  # the declaration is what K means
    assert report.ledgers["steps"][0]["global_step"] == 7


@pytest.mark.parametrize("boundary", [False, True], ids=["hook-only", "boundary"])
def test_a_fused_optimizer_step_the_scaler_skips_is_counted_not_raised(boundary) -> None:
    # GradScaler.step calls step() of a fused optimizer even when it found an inf (the kernel
    # skips the write): the session reads the scaler's found_inf at S-B instead of raising on
    # the gradients the scaler is about to throw away
    model = models.mlp()
    optimizer = torch.optim.AdamW(model.parameters(), fused=True)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
    session = tl.debug.ChecksSession(model, optimizer, scaler=scaler)
    session.register_nonfinite_grad_check()
    with session:
        for attempt in range(4):
            block = session.step(global_step=attempt) if boundary else contextlib.nullcontext()
            with block:
                optimizer.zero_grad()
                loss = model(torch.randn(4, 8)).square().mean()
                scaler.scale(loss * (float("inf") if attempt == 2 else 1.0)).backward()
                before = [p.detach().clone() for p in model.parameters()]
                scaler.step(optimizer)
                scaler.update()
                if attempt == 2:  # the fused kernel wrote nothing
                    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    report = session.report()
    counters = report.counters
    assert (counters["attempts"], counters["accepted"], counters["skipped_by_scaler"]) == (4, 3, 1)
    assert (counters["raised"], report.ledgers["scale"]["skipped"]) == (0, 1)
    assert [r["status"] for r in report.ledgers["steps"]] == [
        "accepted",
        "accepted",
        "skipped",
        "accepted",
    ]
    assert [f.code for f in report.findings] == ["nonfinite_grad_skipped_by_scaler"]


def _plain_loop(model, optimizer, skip_step_at: int | None = None) -> tl.report.CheckReport:
    """The README's loop under ``ChecksSession(model, optimizer)`` (no scaler= declared);
    ``skip_step_at`` leaves out one ``optimizer.step()``, as a GradScaler's skip would."""
    session = tl.debug.ChecksSession(model, optimizer)
    with session:
        for step in range(5):
            optimizer.zero_grad()
            model(torch.randn(4, 8)).square().mean().backward()
            if step != skip_step_at:
                optimizer.step()
    return session.report()


def test_a_plain_loop_that_stepped_every_attempt_gets_no_scaler_instruction(mlp_adamw) -> None:
    report = _plain_loop(*mlp_adamw)
    assert report.ledgers["scale"] == {
        "method": "observed",
        "skipped": 0,
        "reason": "every attempt stepped the optimizer: none was skipped",
    }
    assert "skip_ledger" not in {u.check for u in report.unavailable}
    card = report.card()
    assert "scaler=" not in card and "S-A" not in card  # nothing to do, no site codes
    assert "each optimizer.step() closes one" in card
    # no norm was measured (no check reads gradient values): no stage or scale claimed for one
    row = report.table("params").dicts()[0]
    assert (row["grad_norm_raw"], row["grad_stage"], row["grad_scale_provenance"]) == (
        None,
        None,
        None,
    )


def test_an_attempt_without_a_step_asks_for_the_scaler_that_may_have_skipped_it(
    mlp_adamw,
) -> None:
    report = _plain_loop(*mlp_adamw, skip_step_at=2)
    assert report.counters["skipped"] == 1
    assert report.ledgers["scale"]["method"] == "unknown"
    entry = next(u for u in report.unavailable if u.check == "skip_ledger")
    assert entry.reason.startswith("1 attempt(s) ended without an optimizer step")
    assert "pass scaler=your_scaler" in entry.reason
