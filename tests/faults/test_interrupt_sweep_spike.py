"""Ctrl-C at every line the kit runs inside ``session.spike_forensics()``.

Forensics re-runs the caller's own model (``torch.func.functional_call`` on the kept weights)
under forward hooks on every submodule, with grad mode on and the RNG restored afterwards, and
tells the stability check's probe and keeper to skip the re-runs. Each run is interrupted at one
line event of the kit's files (``tests/faults/_sweep.py``); after it the interrupt reached the
caller as ``KeyboardInterrupt`` (or the call had finished) and nothing is left: no hook on the
model, grad mode, the RNG streams, the keeper still keeping and the probe's schedule as they
were. The first version's ``ExitStack`` of hooks and ``torch.random.fork_rng`` /
``torch.enable_grad()`` blocks are now one ``Undo`` (``torchlens_nb/_undo.py``).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

import torchlens_nb as tl
from tests.faults._sweep import sweep
from tests.faults.test_interrupt_sweep_capture import swept_state
from torchlens_nb.checks.stability._stability import StabilityCheck

pytestmark = pytest.mark.fault("no_leak")


def _session_with_a_kept_step() -> tuple[nn.Module, tl.debug.ChecksSession, torch.Tensor]:
    """Three SGD steps of a dropout MLP under ``keep="every_step"``: the last one is kept."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Dropout(0.1), nn.Linear(16, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    session = tl.debug.ChecksSession(model, optimizer, scaler=None)
    session.register_stability_check(action="collect", keep="every_step")
    y = torch.randint(0, 3, (8,))
    with session:
        for _ in range(3):
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(torch.randn(8, 4)), y).backward()
            optimizer.step()
    return model, session, y


def _forensics_state(model: nn.Module, check: StabilityCheck) -> dict[str, Any]:
    keeper = check.spikes
    assert keeper is not None
    probe = keeper.probe
    return {
        **swept_state(model),
        "keeper explaining": keeper.is_explaining,
        "probe due": probe.is_due if probe is not None else None,
    }


def test_a_ctrl_c_at_every_line_of_spike_forensics_leaves_nothing() -> None:
    model, session, y = _session_with_a_kept_step()
    check = session._engine.checks[StabilityCheck.name]
    assert isinstance(check, StabilityCheck)

    def explain() -> object:
        return session.spike_forensics(
            loss_fn=lambda out, x: nn.functional.cross_entropy(out, y, reduction="none")
        )

    assert explain().num_samples == 8  # the call the sweep interrupts explains the kept step
    result = sweep(
        explain, lambda: _forensics_state(model, check), budget=1700
    )  # 1,688 line events: every one
    assert result.problems == []
    assert result.interrupted + result.finished == result.runs
    assert result.interrupted >= result.runs // 2
