"""One read of the gradients per step where the loop leaves them alone (``_arrival.py``).

A loop that runs one backward per step and touches no gradient between ``backward()`` and
``optimizer.step()`` gets its arrival norms from the step site's read after three attempts that
read both ways agree; any loop that clips, rescales, accumulates or writes through ``.data``
keeps the S-D read at every backward. Either way the verdict before the write, the culprit and
its site are the ones an eager read gives.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn

import torchlens_nb as tl
from tests import models
from tests.checks.conftest import nonfinite_session, poison_next_backward
from torchlens_nb.checks.session._arrival import LEARNING_ATTEMPTS, VERIFY_EVERY

Loop = Callable[[nn.Module], None]


def _plain(model: nn.Module) -> None:
    pass


def _clip(model: nn.Module) -> None:
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)


def _data_write(model: nn.Module) -> None:
    for param in model.parameters():
        param.grad.data.mul_(0.5)  # no _version bump: only the values tell


def _train(
    loop: Loop, steps: int, *, backwards: int = 1, poison_at: int | None = None
) -> tuple[nn.Module, torch.optim.Optimizer, tl.debug.ChecksSession]:
    torch.manual_seed(0)
    model = models.mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    session = nonfinite_session(model, optimizer)
    with session:
        for step in range(steps):
            optimizer.zero_grad()
            if step == poison_at:
                poison_next_backward(model[2].bias, float("nan"))
            for _ in range(backwards):
                model(torch.randn(4, 8)).pow(2).mean().backward()
            loop(model)
            optimizer.step()
    return model, optimizer, session


def test_a_loop_that_leaves_gradients_alone_reads_them_once_per_step() -> None:
    _, _, session = _train(_plain, 40)
    reads = session._engine.arrival_reads
    assert reads.mode == "deferring"
    assert reads.verified_attempts == LEARNING_ATTEMPTS + 1  # and one in VERIFY_EVERY after
    assert reads.deferred_attempts == 40 - reads.verified_attempts
    report = session.report()
    assert report.status == "clean"
    assert any(note.startswith("Arrival norms (S-D) of") for note in report.disclosures)


@pytest.mark.parametrize(
    ("loop", "backwards", "broken_by"),
    [
        (_clip, 1, "changes_in_place"),
        (_data_write, 1, "writes_through_data"),
        (_plain, 2, "accumulates"),
    ],
    ids=["clip_grad_norm_", ".data write", "two backwards per step"],
)
def test_a_loop_that_touches_gradients_keeps_the_arrival_read(
    loop: Loop, backwards: int, broken_by: str
) -> None:
    _, _, session = _train(loop, 10, backwards=backwards)
    reads = session._engine.arrival_reads
    assert (reads.mode, reads.broken_by, reads.broken_at) == ("eager", broken_by, 0)
    assert reads.deferred_attempts == 0
    assert not [note for note in session.report().disclosures if note.startswith("Arrival")]


@pytest.mark.parametrize("poison_at", [LEARNING_ATTEMPTS + 2, VERIFY_EVERY + 1])
def test_a_nan_on_a_deferred_attempt_raises_before_the_write_with_the_culprit(
    poison_at: int,
) -> None:
    with pytest.raises(tl.errors.CheckViolationError) as raised:
        _train(_plain, poison_at + 3, poison_at=poison_at)
    finding = raised.value.report.findings[0]
    fields = finding.fields
    assert (fields["attempt"], fields["culprit"], fields["culprit_site"]) == (
        poison_at,
        "2.bias",
        "S-A",
    )
    assert fields["params"][0]["kind"] == "nan"


def test_the_raise_leaves_weights_and_optimizer_state_as_they_were() -> None:
    torch.manual_seed(0)
    model = models.mlp()
    optimizer = torch.optim.AdamW(model.parameters())
    session = nonfinite_session(model, optimizer)
    with session:
        for _ in range(LEARNING_ATTEMPTS + 2):
            optimizer.zero_grad()
            model(torch.randn(4, 8)).pow(2).mean().backward()
            optimizer.step()
        assert session._engine.arrival_reads.mode == "deferring"
        weights = {k: v.clone() for k, v in model.state_dict().items()}
        state = {
            i: {k: v.clone() for k, v in s.items()} for i, s in enumerate(optimizer.state.values())
        }
        optimizer.zero_grad()
        poison_next_backward(model[0].weight, float("inf"))
        model(torch.randn(4, 8)).pow(2).mean().backward()
        with pytest.raises(tl.errors.CheckViolationError):
            optimizer.step()
    for key, value in model.state_dict().items():
        assert torch.equal(value, weights[key]), key
    for i, saved in enumerate(optimizer.state.values()):
        for key, value in saved.items():
            assert torch.equal(value, state[i][key]), key


def test_a_clip_that_starts_late_is_disclosed_and_keeps_the_report_from_clean() -> None:
    torch.manual_seed(0)
    model = models.mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    session = nonfinite_session(model, optimizer)
    with session:
        for step in range(LEARNING_ATTEMPTS + 4):
            optimizer.zero_grad()
            model(torch.randn(4, 8)).pow(2).mean().backward()
            if step >= LEARNING_ATTEMPTS + 1:
                _clip(model)
            optimizer.step()
    reads = session._engine.arrival_reads
    assert (reads.mode, reads.broken_by, reads.broken_at) == (
        "eager",
        "changes_in_place",
        LEARNING_ATTEMPTS + 1,
    )
    assert reads.unread_attempts == 1
    report = session.report()
    assert report.status == "incomplete"
    assert [u.code for u in report.unavailable if u.check == "arrival_norms"] == ["not_read"]


def test_a_skipped_deferred_attempt_still_reads_what_its_backward_left() -> None:
    """The loop's own guard skips a step (zero_grad(set_to_none=True) before the next
    backward): the deferred arrival is read from the gradients the backward left."""
    torch.manual_seed(0)
    model = models.mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    session = tl.debug.ChecksSession(model, optimizer, scaler=None)
    session.register_nonfinite_grad_check(action="collect")
    with session:
        for step in range(LEARNING_ATTEMPTS + 4):
            optimizer.zero_grad()
            if step == LEARNING_ATTEMPTS + 1:
                poison_next_backward(model[2].bias, float("nan"))
            loss = model(torch.randn(4, 8)).pow(2).mean()
            loss.backward()
            if all(torch.isfinite(p.grad).all() for p in model.parameters()):
                optimizer.step()
    codes = [f.code for f in session.report().findings]
    assert "nonfinite_grad_skipped_by_loop" in codes
    assert session._engine.arrival_reads.unread_attempts == 0


def test_a_loop_that_starts_accumulating_never_blames_the_later_micro_batch() -> None:
    """A deferred attempt that turns out to run two backwards: the first one's arrival was
    accumulated into before anything read it, so a NaN it brought is not pinned on the
    second (the micro-batch is unknown), and reads are eager from then on."""
    torch.manual_seed(0)
    model = models.mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    session = nonfinite_session(model, optimizer)
    with session, pytest.raises(tl.errors.CheckViolationError) as raised:
        for step in range(LEARNING_ATTEMPTS + 3):
            optimizer.zero_grad()
            backwards = 2 if step == LEARNING_ATTEMPTS + 1 else 1
            for micro in range(backwards):
                if backwards == 2 and micro == 0:
                    poison_next_backward(model[2].bias, float("nan"))
                model(torch.randn(4, 8)).pow(2).mean().backward()
            optimizer.step()
    fields = raised.value.report.findings[0].fields
    assert fields["attempt"] == LEARNING_ATTEMPTS + 1
    assert fields["first_nonfinite_micro_batch"] is None
    reads = session._engine.arrival_reads
    assert (reads.mode, reads.broken_by) == ("eager", "accumulates")
