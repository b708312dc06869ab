"""Session scope: silent construction, hooks removed on every exit, pause, compile, misuse."""

from __future__ import annotations

import pytest
import torch

import torchlens_nb as tl
from tests.checks.conftest import hook_counts, is_bitwise_equal, snapshot


def _step(model, optimizer, x) -> None:
    optimizer.zero_grad()
    model(x).square().mean().backward()
    optimizer.step()


def _full_session(model, optimizer):
    session = tl.debug.ChecksSession(model, optimizer, scaler=None)
    session.register_change_check()
    session.register_nonfinite_grad_check()
    session.register_update_ratio_check(every=1)
    session.register_magnitude_check()
    session.register_no_accepted_steps_check()
    session.register_param_scan(every=1)
    return session


def test_construction_is_silent_and_device_free(mlp_adamw, capsys) -> None:
    model, optimizer = mlp_adamw
    session = _full_session(model, optimizer)
    assert capsys.readouterr() == ("", "")
    assert hook_counts(model, optimizer) == (0, 0, 0)
    # 8*16 + 16 + 16*4 + 4 = 212 float32 values = 848 bytes, from metadata alone
    assert session.estimated_snapshot_bytes == 848
    assert all(p.grad is None for p in model.parameters())


def test_exception_inside_the_block_finalizes_removes_hooks_and_touches_nothing(mlp_adamw) -> None:
    model, optimizer = mlp_adamw
    x = torch.randn(4, 8)
    _step(model, optimizer, x)
    session = _full_session(model, optimizer)
    before = snapshot(model, optimizer)
    with pytest.raises(ValueError, match="user bug"), session:
        assert hook_counts(model, optimizer) == (4, 1, 1)
        model(x).square().mean().backward()
        raise ValueError("user bug")
    assert hook_counts(model, optimizer) == (0, 0, 0)
    assert is_bitwise_equal(snapshot(model, optimizer), before)
    report = session.report()
    assert report.is_final and report.exit_reason == "exception ValueError"
    assert report.counters["backwards"] == 1 and report.counters["pending_backwards"] == 1
    assert session.report() is report  # finalized: the same immutable object
    with pytest.raises(tl.errors.DiagnosticArgumentError, match="finalized"):
        session.attach()


def test_paused_block_is_not_observed(mlp_adamw) -> None:
    model, optimizer = mlp_adamw
    session = tl.debug.ChecksSession(model, optimizer, scaler=None)
    session.register_change_check()
    x = torch.randn(4, 8)
    with session:
        _step(model, optimizer, x)
        with session.paused():
            _step(model, optimizer, x)
            _step(model, optimizer, x)
        session.disable()
        _step(model, optimizer, x)
        session.enable()
        _step(model, optimizer, x)
    report = session.report()
    assert (report.counters["attempts"], report.counters["backwards"]) == (2, 2)
    assert any("disabled 2 time(s)" in note for note in report.disclosures)


def test_runs_on_a_torch_compiled_model_without_capture(mlp_adamw, poison) -> None:
    model, optimizer = mlp_adamw
    compiled = torch.compile(model, backend="aot_eager")
    session = tl.debug.ChecksSession(compiled, optimizer, scaler=None)
    session.register_change_check()
    session.register_nonfinite_grad_check()
    session.register_update_ratio_check(every=1)
    x = torch.randn(4, 8)
    with session:
        for _ in range(2):
            _step(compiled, optimizer, x)
        poison(model[2].weight, float("nan"))
        with pytest.raises(tl.debug.CheckViolationError, match="2.weight"):
            _step(compiled, optimizer, x)
    report = session.report()
    assert [row["param"] for row in report.table("params").dicts()] == [
        "0.weight",
        "0.bias",
        "2.weight",
        "2.bias",
    ]  # the _orig_mod. prefix is gone
    assert (report.counters["accepted"], report.counters["raised"]) == (2, 1)
    assert report.counters["grad_arrivals"] == 12
    assert hook_counts(model, optimizer) == (0, 0, 0)


def test_kit_never_imports_the_capture_core() -> None:
    import pathlib

    package = pathlib.Path(tl.__file__).parent / "checks"
    sources = {p.name: p.read_text() for p in package.glob("*.py")}
    assert all(
        "capture" not in line
        for text in sources.values()
        for line in text.splitlines()
        if line.startswith(("import", "from"))
    )


def test_misuse_is_refused_with_the_fix(mlp_adamw) -> None:
    model, optimizer = mlp_adamw
    session = tl.debug.ChecksSession(model, optimizer, scaler=None)
    with pytest.raises(tl.errors.DiagnosticArgumentError, match="inside `with session:`"):
        with session.step(global_step=0):
            pass
    with session:
        with pytest.raises(tl.errors.DiagnosticArgumentError, match="already attached"):
            session.attach()
    with pytest.raises(tl.errors.ModelTypeError, match="nn.Module"):
        tl.debug.ChecksSession("model", optimizer)
    with pytest.raises(tl.errors.DiagnosticArgumentError, match="torch.optim.Optimizer"):
        tl.debug.ChecksSession(model, "sgd")
    with pytest.raises(tl.errors.DiagnosticArgumentError, match="action must be one of"):
        session.register_nonfinite_grad_check(action="explode")


def test_overhead_measures_the_scan_on_demand(mlp_adamw) -> None:
    model, optimizer = mlp_adamw
    session = tl.debug.ChecksSession(model, optimizer, scaler=None)
    session.register_nonfinite_grad_check()
    with session:
        _step(model, optimizer, torch.randn(4, 8))
    measured = session.overhead(repeats=2)
    # 4 parameters + 4 gradients of 212 float32 values each group: 2 * 848 bytes
    assert (measured.scanned_tensors, measured.scanned_bytes) == (8, 1696)
    assert measured.snapshot_bytes == 848 and measured.attempts == 1
    assert measured.scan_ms > 0 and measured.site_ms_per_attempt is not None


def test_detach_on_raise_leaves_no_hook_when_the_error_escapes(mlp_adamw, poison) -> None:
    # for loops the caller does not own (a trainer's train()): the raise detaches first
    model, optimizer = mlp_adamw
    session = tl.debug.ChecksSession(model, optimizer, scaler=None, detach_on_raise=True)
    session.register_nonfinite_grad_check()
    session.attach()
    with session.step(global_step=7):
        optimizer.zero_grad()
        poison(model[0].weight, float("nan"))
        model(torch.randn(4, 8)).square().mean().backward()
        with pytest.raises(tl.debug.CheckViolationError) as caught:
            optimizer.step()
        assert hook_counts(model, optimizer) == (0, 0, 0)  # before the block even exits
    report = session.report()
    assert report.is_final and report.exit_reason == "raised CheckViolationError"
    assert caught.value.report.counters["raised"] == 1 and report.counters["raised"] == 1


def test_detach_on_raise_must_be_a_bool(mlp_adamw) -> None:
    model, optimizer = mlp_adamw
    with pytest.raises(tl.errors.DiagnosticArgumentError, match="detach_on_raise must be True"):
        tl.debug.ChecksSession(model, optimizer, detach_on_raise="yes")
