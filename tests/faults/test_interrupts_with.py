"""Ctrl-C at any instant of a ``with`` statement of ours: ``with session:`` and ``with probe:``.

Here the interpreter calls ``__exit__``, so a Ctrl-C can land at that method's first instruction,
before any ``try`` of ours: before ``torchlens_nb/_interrupts.py`` that left the session's hooks
(or the probe's torch-function mode) installed about once in 300 interrupts. The timer of
``test_interrupts.py`` delivers each interrupt as Python delivers Ctrl-C (the main thread's
``SIGINT`` handler, with the interrupted frame), at a random instant of the whole statement:
its enter, the user's loop inside it, and its exit. After each one the process must be as it
was: the module hooks and mode stacks of ``test_interrupts.process_state``, plus every
parameter's gradient hooks, the optimizer's step hooks, the process's registry of attached
sessions and the ``SIGINT`` handler itself; and the next session on the same optimizer attaches.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn
from torch.nn import functional as F

import torchlens_nb as tl
from tests.faults.test_interrupts import interrupt_at_random, process_state
from torchlens_nb.checks.session._optimizer import ATTACHED
from torchlens_nb.options import CaptureOptions

pytestmark = [
    pytest.mark.fault("no_leak"),
    pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs signal.setitimer"),
]

INTERRUPTS = 300


def _training_state(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """``process_state`` less the gradients (the user's loop inside the statement replaces
    them: training is what it is for), plus what a session installs."""
    grads = {f"grad {name}" for name, _ in model.named_parameters()}
    process = {k: v for k, v in process_state(model).items() if k not in grads}
    return {
        **process,
        "grad hooks": [len(p._post_accumulate_grad_hooks or {}) for p in model.parameters()],
        "step pre hooks": tuple(optimizer._optimizer_step_pre_hooks),
        "step post hooks": tuple(optimizer._optimizer_step_post_hooks),
        "attached sessions": dict(ATTACHED._owners),
        "sigint handler": signal.getsignal(signal.SIGINT),
    }


def _session_loop(boundary: bool) -> tuple[nn.Module, Callable[[], object], Callable[[], dict]]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(16, 4)

    def one_step(index: int) -> None:
        optimizer.zero_grad()
        model(x).square().mean().backward()
        optimizer.step()

    def run() -> object:
        session = tl.debug.ChecksSession(model, optimizer, scaler=None)
        session.register_nonfinite_grad_check()
        session.register_change_check()
        with session:
            for index in range(3):
                if boundary:
                    with session.step(global_step=index):
                        one_step(index)
                else:
                    one_step(index)
        return session.report()

    return model, run, lambda: _training_state(model, optimizer)


class _Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(16, 48)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).view(2, 6, 3, 2, 8).permute(2, 0, 3, 1, 4)
        return F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(2, 6, 16)


def _sink_probe() -> tuple[nn.Module, Callable[[], object], Callable[[], dict]]:
    torch.manual_seed(0)
    model = _Attention()
    x = torch.randn(2, 6, 16)

    def run() -> object:
        probe = tl.debug.SinkProbe(attention=[tl.func("softmax")], fused_attention="recompute")
        with probe:
            tl.trace(model, x, capture=CaptureOptions(hooks=probe.hook_plan()))
        return probe.sink_heads

    return (
        model,
        run,
        lambda: {
            **process_state(model),
            "sigint handler": signal.getsignal(signal.SIGINT),
        },
    )


STATEMENTS = {
    "with session: (hook-only)": lambda: _session_loop(boundary=False),
    "with session: + session.step()": lambda: _session_loop(boundary=True),
    "with SinkProbe(fused_attention='recompute')": _sink_probe,
}


@pytest.mark.parametrize("statement", STATEMENTS)
def test_an_interrupt_anywhere_in_the_statement_leaves_nothing_behind(statement: str) -> None:
    model, run, state = STATEMENTS[statement]()
    tally = interrupt_at_random(run, model, INTERRUPTS, state=state)
    assert tally.problems == []
    assert tally.interrupted == INTERRUPTS
    assert tally.torch_windows <= INTERRUPTS // 30  # measured: 0-2 per 300 (Tally.torch_windows)
    run()  # and the same statement runs to its end afterwards (no claim, hook or mode left)


def test_a_ctrl_c_inside_exit_is_held_until_the_hooks_are_gone_then_raised_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Deterministic twin of the random test: Ctrl-C arrives while ``__exit__`` runs."""
    model, _, state = _session_loop(boundary=False)
    x = torch.randn(2, 4)
    before = state()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    session = tl.debug.ChecksSession(model, optimizer, scaler=None)
    seen: list[object] = []
    real_end_step = session._engine.end_step

    def ctrl_c_then_end_step() -> None:
        signal.raise_signal(signal.SIGINT)  # its handler runs here, inside detach
        seen.append("detach went on")
        real_end_step()

    monkeypatch.setattr(session._engine, "end_step", ctrl_c_then_end_step)
    with pytest.raises(KeyboardInterrupt):
        with session:
            assert signal.getsignal(signal.SIGINT) is not signal.default_int_handler
            model(x).sum().backward()
            optimizer.step()
    assert seen == ["detach went on"]
    assert session.report().counters["accepted"] == 1  # the final report was built
    assert state() == before  # hooks, claim and the SIGINT handler as they were
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
