"""tl.debug.investigate under attack: refused arguments leave everything as it was, a replay
never corrupts what the user owns (whatever path it takes), and a replay that could not see
everything is never called a clean reproduction."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from torch import nn

import torchlens_nb as tl
from tests.faults import _tally
from tests.faults._guards import assert_refused, untouched
from tests.faults.fault_models import LogOfLinear, NoParams, Owned, RaisingForward, owned
from tests.faults.payload_reports import hostile_tensors
from tests.faults.test_payloads import check_payload
from tests.nonfinite.masked_models import CausalDecoder, DecoderThenNaN
from tests.nonfinite.masked_models import X as MASKED_X
from torchlens_nb.errors import DiagnosticArgumentError, InputFormError, ModelTypeError

CE = nn.CrossEntropyLoss()


def _loss(user: Owned) -> Callable[[torch.Tensor], torch.Tensor]:
    return lambda out: CE(out, user.y)


REFUSED: list[Any] = [
    pytest.param(
        lambda u: tl.debug.investigate([u.model], u.x), ModelTypeError, "nn.Module", id="list-model"
    ),
    pytest.param(
        lambda u: tl.debug.investigate(u.model, "text"), InputFormError, "tokenize", id="text-input"
    ),
    pytest.param(
        lambda u: tl.debug.investigate(u.model, None),
        InputFormError,
        "inputs is None",
        id="no-input",
    ),
    pytest.param(
        lambda u: tl.debug.investigate(u.model, u.x, loss_fn="ce"),
        DiagnosticArgumentError,
        "loss_fn must be callable",
        id="loss-not-callable",
    ),
    pytest.param(
        lambda u: tl.debug.investigate(u.model, u.x, loss_fn=lambda: 0),
        DiagnosticArgumentError,
        r"takes neither \(output\) nor \(output, inputs\)",
        id="loss-no-argument",
    ),
    pytest.param(
        lambda u: tl.debug.investigate(u.model, u.x),
        DiagnosticArgumentError,
        r"shape \(4, 4\) on cpu with no tensor \.loss",
        id="no-loss-for-logits",
    ),
    pytest.param(
        lambda u: tl.debug.investigate(u.model, u.x, loss_fn=lambda out: 1 / 0),
        DiagnosticArgumentError,
        "loss_fn raised ZeroDivisionError",
        id="loss-raises",
    ),
    pytest.param(
        lambda u: tl.debug.investigate(u.model, u.x, loss_fn=lambda out: out.argmax()),
        DiagnosticArgumentError,
        "loss_fn returned a torch.int64 tensor",
        id="loss-integer",
    ),
    pytest.param(
        lambda u: tl.debug.investigate(u.model, u.x, loss_fn=_loss(u), rng_state=[1]),
        DiagnosticArgumentError,
        "rng_state must be a mapping, got list",
        id="rng-list",
    ),
    pytest.param(
        lambda u: tl.debug.investigate(
            u.model, u.x, loss_fn=_loss(u), rng_state={"cpu": torch.get_rng_state().float()}
        ),
        DiagnosticArgumentError,
        r"rng_state\['cpu'\] must be a 1-D uint8 CPU tensor",
        id="rng-float",
    ),
    pytest.param(
        lambda u: tl.debug.investigate(
            u.model, u.x, loss_fn=_loss(u), rng_state={"cuda": [torch.get_rng_state()]}
        ),
        DiagnosticArgumentError,
        r"holds 1 device states but 0 CUDA devices are visible",
        id="rng-cuda-count",
        marks=pytest.mark.skipif(torch.cuda.is_available(), reason="counts CUDA devices"),
    ),
]


@pytest.mark.fault("bad_input")
@pytest.mark.parametrize(("call", "error", "match"), REFUSED)
def test_investigate_refuses_bad_input_and_leaves_everything(call, error, match) -> None:
    user = owned()
    assert_refused(
        lambda: call(user),
        error,
        match,
        models=[user.model],
        optimizers=[user.optimizer],
        inputs=user.batch,
    )


def _nan_batch(user: Owned) -> torch.Tensor:
    x = user.x.clone()
    x[1, 3] = float("nan")
    return x


PATHS: list[Any] = [
    # (model, batch, loss, rng kept?, expected status): every route through the replay
    pytest.param(lambda u: u.model, lambda u: u.x, _loss, True, "not_reproduced", id="full-replay"),
    pytest.param(lambda u: u.model, _nan_batch, _loss, False, "nonfinite_input", id="nan-batch"),
    pytest.param(
        lambda u: LogOfLinear().train(), lambda u: u.x, _loss, False, "found", id="forward-nan"
    ),
    pytest.param(
        lambda u: RaisingForward().train(), lambda u: u.x, _loss, False, "incomplete", id="raises"
    ),
]


@pytest.mark.fault("no_corruption")
@pytest.mark.parametrize(("make", "batch", "loss", "kept", "status"), PATHS)
def test_no_replay_path_corrupts_what_the_user_owns(make, batch, loss, kept, status) -> None:
    user = owned()
    model, x = make(user), batch(user)
    rng_state = {"cpu": torch.get_rng_state()} if kept else None
    with untouched([model, user.model], [user.optimizer], (x, user.y)):
        report = tl.debug.investigate(model, x, loss_fn=loss(user), rng_state=rng_state)
    assert report.status == status


@pytest.mark.fault("no_false_clean")
def test_a_replay_whose_backward_cannot_run_is_incomplete_not_a_clean_reproduction() -> None:
    report = tl.debug.investigate(NoParams(), torch.ones(2, 8), loss_fn=lambda out: out.sum())
    assert (report.status, report.tone) == ("incomplete", "warning")
    assert [u.check for u in report.unavailable] == ["backward"]
    assert "no grad_fn" in report.unavailable[0].reason


@pytest.mark.fault("no_false_clean")
def test_a_replay_whose_forward_raised_is_incomplete() -> None:
    report = tl.debug.investigate(RaisingForward(), torch.ones(4, 8), loss_fn=lambda out: out.sum())
    assert (report.status, report.first_bad_thing) == ("incomplete", None)
    assert report.lead.startswith("the replayed forward raised ValueError after")


@pytest.mark.fault("no_false_clean")
def test_a_mask_never_hides_a_real_nan_and_unsaved_masks_are_never_cleared() -> None:
    # the masks are dismissed only where every path was checked to a finite value
    found = tl.debug.investigate(DecoderThenNaN().eval(), MASKED_X, loss_fn=lambda o: o.mean())
    assert (found.status, found.first_bad_thing.op) == ("found", "log_1")
    partial = tl.trace(CausalDecoder().eval(), MASKED_X, save=tl.func("linear")).find_nan()
    assert (partial.status, partial.is_certain) == ("partial", False)


class Scale(nn.Module):
    """``x * w`` for a tensor of any shape and dtype (ints promote to float)."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.tensor(1.5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.w


@pytest.mark.fault("payload")
@settings(
    max_examples=30, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
@given(tensor=hostile_tensors())
def test_a_replay_of_a_hostile_batch_gives_a_strict_json_report(tensor: torch.Tensor) -> None:
    _tally.examples["payload"] += 1
    report = tl.debug.investigate(Scale(), tensor, loss_fn=lambda out: out.float().sum())
    assert report.status in ("found", "nonfinite_input", "not_reproduced", "incomplete")
    check_payload("investigation", report)
