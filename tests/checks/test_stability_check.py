"""The stability check's switches and its report: on by default, off with stability=False,
its arguments refused before anything is registered, its findings strict JSON."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

import torchlens_nb as tl
from torchlens_nb.errors import DiagnosticArgumentError


def _wide(lr: float) -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 64))
    for layer in (model[0], model[2]):
        nn.init.normal_(layer.weight, std=0.02)  # GPT-2's initialisation
    return model, torch.optim.AdamW(model.parameters(), lr=lr)


def _train(session: tl.debug.ChecksSession, model: nn.Module, optimizer, steps: int = 3) -> None:
    with session:
        for _ in range(steps):
            optimizer.zero_grad()
            model(torch.randn(16, 64)).square().mean().backward()
            optimizer.step()


def test_a_first_step_without_warmup_is_warned_at_attempt_0_and_the_report_is_strict_json():
    model, optimizer = _wide(lr=0.1)
    session = tl.debug.ChecksSession(model, optimizer, scaler=None)
    with pytest.warns(tl.errors.TorchlensNbWarning, match="first_step_update_large"):
        _train(session, model, optimizer)
    report = session.report()
    (finding,) = [f for f in report.findings if f.code == "first_step_update_large"]
    # Adam's first step moves each element by lr = 0.1; the weights' rms is 0.02: ratio ~5
    assert finding.fields["first_attempt"] == 0
    assert 4.0 < finding.fields["update_ratio"] < 6.0
    assert "warmup" in finding.remedy
    json.dumps(report.to_dict(), allow_nan=False)


def test_at_adamws_default_lr_nothing_is_said_and_stability_false_removes_the_check():
    model, optimizer = _wide(lr=1e-3)  # first-step ratio about 0.05
    session = tl.debug.ChecksSession(model, optimizer, scaler=None)
    _train(session, model, optimizer)
    assert session.report().findings == ()
    assert "stability" in [r.name for r in session.report().checks_run]
    model, optimizer = _wide(lr=0.1)
    quiet = tl.debug.ChecksSession(model, optimizer, scaler=None, stability=False)
    _train(quiet, model, optimizer)
    assert "stability" not in [r.name for r in quiet.report().checks_run]
    assert quiet.report().findings == ()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"probe_every": 0}, "probe_every"),
        ({"adam_every": 1.5}, "adam_every"),
        ({"action": "x"}, "action"),
    ],
    ids=["probe-zero", "adam-float", "action"],
)
def test_bad_arguments_are_refused(kwargs, match) -> None:
    model, optimizer = _wide(lr=1e-3)
    session = tl.debug.ChecksSession(model, optimizer, scaler=None)
    with pytest.raises(DiagnosticArgumentError, match=match):
        session.register_stability_check(**kwargs)
