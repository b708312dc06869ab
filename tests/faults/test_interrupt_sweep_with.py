"""Ctrl-C at every line of a ``with`` statement of ours: ``with session:`` in hook-only mode
and with ``session.step()`` blocks, ``with session.paused():``, and ``with SinkProbe(...)``.

The statements of ``test_interrupts_with.py`` (a 3-step SGD loop with the nonfinite and change
checks; a fused-attention probe around ``tl.trace``), interrupted at every line event the kit
runs (``tests/faults/_sweep.py``; a stride past the budget). After each run: the interrupt
reached the caller as ``KeyboardInterrupt`` (or the statement had finished), nothing hung, and
the parameters' gradient hooks, the optimizer's step hooks, the attached-session registry, the
``SIGINT`` handler, grad mode and the rest of ``test_interrupts.process_state`` are as before.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

import torchlens_nb as tl
from tests.faults._sweep import sweep
from tests.faults.test_interrupt_sweep_capture import global_hooks_and_handler
from tests.faults.test_interrupts_with import _session_loop, _sink_probe

pytestmark = pytest.mark.fault("no_leak")

Statement = Callable[[], tuple[nn.Module, Callable[[], object], Callable[[], dict[str, Any]]]]
STATEMENTS: dict[str, tuple[Statement, int]] = {
    "with session: (hook-only)": (lambda: _session_loop(boundary=False), 500),
    "with session: + session.step()": (lambda: _session_loop(boundary=True), 500),
    "with SinkProbe(fused_attention='recompute')": (_sink_probe, 300),
}
"""Statement -> (its model, run and state; budget of runs). Measured line events: about 6,100
(hook-only) and 6,300 (boundary mode) for the 3-step loop, 2,980 for the probe."""


@pytest.mark.parametrize("statement", STATEMENTS)
def test_a_ctrl_c_at_every_line_of_the_statement_leaves_nothing(statement: str) -> None:
    build, budget = STATEMENTS[statement]
    _, run, state = build()
    result = sweep(run, lambda: {**state(), **global_hooks_and_handler()}, budget=budget)
    assert result.problems == []
    assert result.interrupted + result.finished == result.runs
    assert result.interrupted >= result.runs - 1  # only an index past the last line finishes
    run()  # and the statement runs to its end afterwards (no claim, hook or mode left)


def test_a_ctrl_c_at_every_line_of_a_paused_block_leaves_the_session_observing() -> None:
    """``with session.paused():`` around an evaluation forward, swept at every line: after each
    run the attached session observes again (a generator context manager left it disabled while
    the interrupt's traceback was held)."""
    model, _, state = _session_loop(boundary=False)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    session = tl.debug.ChecksSession(model, optimizer, scaler=None)
    x = torch.randn(4, 4)

    def evaluate() -> object:
        with session.paused():
            return model(x)

    with session:
        result = sweep(
            evaluate,
            lambda: {**state(), "observing": session._engine.is_enabled},
            budget=500,
        )
    assert result.problems == []
    assert result.interrupted >= result.runs - 1
