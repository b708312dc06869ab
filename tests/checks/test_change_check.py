"""The change check: the gradient fact on an M-of-N window, movement only as corroboration."""

from __future__ import annotations

import pathlib
import re
import warnings

import pytest
import torch

import torchlens_nb as tl
from tests import models


def _train(model, optimizer, session, steps: int, kill_at: int | None = None) -> list[int]:
    """Run ``steps`` steps on one fixed batch; from ``kill_at`` on, layer 0's ReLU outputs 0.

    Returns the attempts after which the report had a ``param_received_no_gradient`` finding.
    """
    x = torch.randn(32, 8)
    flagged_at = []
    for step in range(steps):
        if step == kill_at:
            with torch.no_grad():
                model[0].bias.fill_(-1e3)  # every pre-activation < 0: the ReLU passes nothing
        optimizer.zero_grad()
        model(x).square().mean().backward()
        optimizer.step()
        if any(f.code == "param_received_no_gradient" for f in session.report().findings):
            flagged_at.append(step)
    return flagged_at


def test_dead_layer_under_default_adamw_is_named_by_the_gradient_fact_not_by_movement() -> None:
    model = models.mlp()
    optimizer = torch.optim.AdamW(model.parameters())  # defaults: lr=1e-3, weight_decay=0.01
    session = tl.debug.ChecksSession(model, optimizer, scaler=None)
    session.register_change_check(window=8, min_hits=6, action="collect")
    session.register_update_ratio_check(every=1)
    with session:
        flagged_at = _train(model, optimizer, session, steps=18, kill_at=10)
    # the gradient stops at attempt 10; the 6th of 8 attempts without it is attempt 15
    assert flagged_at[0] == 15
    finding = session.report().findings[0]
    rows = {row["param"]: row for row in finding.fields["params"]}
    # the cone: layer 0 (no gradient through the ReLU) and 2.weight (its input is all zero)
    assert sorted(rows) == ["0.bias", "0.weight", "2.weight"]
    assert {row["grad_fact"] for row in rows.values()} == {"zero"}
    assert all(row["no_gradient_since_attempt"] == 10 for row in rows.values())
    # a movement-only statistic ("did the parameter change?") would not have named them:
    # AdamW's moments and weight decay kept every one moving after its gradient stopped
    ratios = session.report().table("params").dicts()
    moved = {row["param"]: row["update_ratio"] for row in ratios}
    assert all(moved[name] > 0 for name in rows)
    assert all(row["movement_seen_after_no_gradient"] == 8 for row in rows.values())
    assert all(row["movement_lag_attempts"] == 7 for row in rows.values())  # 17 - 10
    assert finding.fields["follow_up"] == "tl.debug.grad_health"


def test_findings_never_say_learning_or_dead() -> None:
    model = models.mlp()
    optimizer = torch.optim.AdamW(model.parameters())
    session = tl.debug.ChecksSession(model, optimizer, scaler=None)
    session.register_change_check(action="collect")
    session.register_update_ratio_check(every=1)
    with session:
        _train(model, optimizer, session, steps=12, kill_at=0)
    report = session.report()
    assert [f.code for f in report.findings] == ["param_received_no_gradient"]
    text = " ".join(f"{f.message} {f.remedy} {dict(f.fields)}" for f in report.findings)
    assert not re.search(r"learn|dead", text, re.IGNORECASE)


def test_a_single_zero_gradient_step_is_not_a_finding() -> None:
    model = models.mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    session = tl.debug.ChecksSession(model, optimizer, scaler=None)
    session.register_change_check(window=4, min_hits=2, action="collect")
    x = torch.randn(8, 8)
    with session:
        for step in range(6):
            optimizer.zero_grad()
            # step 2 routes around layer 2 (an untaken branch): its gradient is None once
            out = model(x) if step != 2 else model[:2](x)[:, :4]
            out.square().mean().backward()
            optimizer.step()
    report = session.report()
    assert report.findings == ()
    assert report.table("params").dicts()[2]["grad_fact"] == "ok"
    assert report.check("change").state == "clean" and report.check("change").evaluations == 6


def test_warns_once_per_episode_and_rearms_after_a_clean_window() -> None:
    model = models.mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    session = tl.debug.ChecksSession(model, optimizer, scaler=None)
    session.register_change_check(window=2, min_hits=2)
    x = torch.randn(8, 8)
    plan = [True] * 4 + [False] * 3 + [True] * 3  # True: layer 2 gets no gradient
    with warnings.catch_warnings(record=True) as caught, session:
        warnings.simplefilter("always")
        states = []
        for skip_head in plan:
            optimizer.zero_grad()
            out = model[:2](x)[:, :4] if skip_head else model(x)
            out.square().mean().backward()
            optimizer.step()  # the warned line
            states.append(session.report().check("change").state)
    emitted = [w for w in caught if issubclass(w.category, tl.errors.TorchlensNbWarning)]
    # episode 1 sustained at attempt 1; clean window of 2 at attempts 4-5 re-arms; episode 2
    # sustained at attempt 8
    assert len(emitted) == 2
    assert "param_received_no_gradient" in str(emitted[0].message)
    # each warning names this file's line that stepped the optimizer, not the kit's code
    source = pathlib.Path(__file__).read_text().splitlines()
    step_line = next(i for i, t in enumerate(source, 1) if t.endswith("# the warned line"))
    assert [(w.filename, w.lineno) for w in emitted] == [(__file__, step_line)] * 2
    assert states[1] == "warned" and states[6] == "collecting" and states[8] == "warned"


def test_invalid_window_is_refused_before_registration(mlp_adamw) -> None:
    model, optimizer = mlp_adamw
    session = tl.debug.ChecksSession(model, optimizer, scaler=None)
    with pytest.raises(tl.errors.DiagnosticArgumentError, match="min_hits <= window"):
        session.register_change_check(window=4, min_hits=5)
    # nothing was registered: only the default invariants, stability check and watchdog run
    assert [run.name for run in session.report().checks_run] == [
        "optimizer_roster",
        "fresh_grads",
        "step_moves",
        "outside_writes",
        "stability",
        "no_accepted_steps",
    ]
