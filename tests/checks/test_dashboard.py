"""The live dashboard: throttled increments, the final report, the text fallback."""

from __future__ import annotations

import torch

import torchlens_nb as tl
from tests import models
from torchlens_nb.checks.dashboard._feed import MIN_INTERVAL_S, DashboardFeed
from torchlens_nb.widgets import _dashboard


class _Recorder:
    def __init__(self) -> None:
        self.messages: list[dict] = []
        self.final = None

    def push(self, message: dict) -> None:
        self.messages.append(message)

    def finish(self, report) -> None:
        self.final = report


def test_feed_sends_at_most_ten_per_second_and_always_the_last_state() -> None:
    now = [0.0]
    state = iter(range(100))
    view = _Recorder()
    feed = DashboardFeed(view, lambda: {"n": next(state)}, clock=lambda: now[0])
    for _ in range(5):  # five offers inside one interval: one message
        feed.offer()
        now[0] += MIN_INTERVAL_S / 10
    assert [m["seq"] for m in view.messages] == [1]
    now[0] += MIN_INTERVAL_S
    feed.offer()  # after the interval: the second message carries the newest state
    assert [m["n"] for m in view.messages] == [0, 1]
    feed.offer()  # inside the interval again: held back ...
    feed.finish("final report")  # ... and delivered before the final report
    assert [m["seq"] for m in view.messages] == [1, 2, 3] and view.final == "final report"


def _train(session, model, optimizer, steps: int) -> None:
    with session:
        for _ in range(steps):
            optimizer.zero_grad()
            model(torch.randn(4, 8)).square().mean().backward()
            optimizer.step()


def test_widget_gets_increments_then_the_final_report(monkeypatch) -> None:
    monkeypatch.setattr(_dashboard, "is_kernel_running", lambda: True)
    monkeypatch.setattr(
        "torchlens_nb.checks.dashboard._feed.MIN_INTERVAL_S", 0.0
    )  # every offer sends
    model = models.mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    session = tl.debug.ChecksSession(model, optimizer, scaler=None)
    session.register_change_check()
    widget = session.dashboard()
    assert isinstance(widget, _dashboard.LiveChecksWidget) and widget.panel == "checks"
    assert widget.payload["data"]["is_final"] is False
    seen = []
    widget.observe(lambda change: seen.append(change["new"]), names="live")
    _train(session, model, optimizer, steps=3)
    increments = [m for m in seen if m["type"] == "increment"]
    # an offer after each backward (S-D) and each accepted step (S-C): 6, seq 1..6
    assert [m["seq"] for m in increments] == [1, 2, 3, 4, 5, 6]
    assert [m["counters"]["accepted"] for m in increments] == [0, 1, 1, 2, 2, 3]
    # chart rows travel once: each attempt's row is in exactly one message
    assert [p["attempt"] for m in increments for p in m["points"]] == [0, 1, 2]
    assert seen[-1] == {"type": "final", "seq": 7}
    assert widget.payload["data"]["is_final"] is True
    assert widget.payload["counters"]["accepted"] == 3
    assert widget.arrays["series"]["shape"] == [3, 4]


def test_outside_a_notebook_the_dashboard_prints_the_final_report(capsys) -> None:
    model = models.mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    session = tl.debug.ChecksSession(model, optimizer, scaler=None)
    session.register_nonfinite_grad_check()
    session.dashboard()
    assert capsys.readouterr().out == ""  # nothing while the loop runs
    _train(session, model, optimizer, steps=2)
    printed = capsys.readouterr().out
    assert printed.startswith("checks [clean] Sequential with SGD (4 parameters): 2 attempt(s)")
    assert printed.strip() == session.report().card()


def test_display_bundle_carries_the_card_as_text() -> None:
    model = models.mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    session = tl.debug.ChecksSession(model, optimizer, scaler=None)
    bundle = session._repr_mimebundle_()
    assert bundle == {"text/plain": session.report().card()}
