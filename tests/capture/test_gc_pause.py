"""The cyclic garbage collector is paused while a capture or a trace analysis runs, and always
comes back as it was: after a raise, under overlapping captures in several threads, and off
when the user turned it off (capture/_gc_pause.py)."""

from __future__ import annotations

import gc
import threading

import pytest
import torch
from torch import nn

import torchlens_nb as tl
from torchlens_nb.capture._gc_pause import paused_gc


class SeesTheCollector(nn.Module):
    """Records whether the collector was enabled while its forward ran."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[bool] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen.append(gc.isenabled())
        return torch.tanh(x)


def test_a_capture_pauses_the_collector_and_gives_it_back() -> None:
    model = SeesTheCollector()
    trace = tl.trace(model, torch.ones(2))
    assert model.seen == [False] and gc.isenabled()
    tl.debug.dtype_range(trace)
    trace.audit()
    assert gc.isenabled()


def test_a_forward_that_raises_gives_the_collector_back() -> None:
    class Boom(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise RuntimeError("boom")

    with pytest.raises(tl.errors.ForwardError):
        tl.trace(Boom(), torch.ones(2))
    assert gc.isenabled()


def test_a_collector_the_user_turned_off_stays_off() -> None:
    gc.disable()
    try:
        tl.trace(nn.Tanh(), torch.ones(2))
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_overlapping_captures_in_threads_never_leave_the_collector_off() -> None:
    started, release = threading.Barrier(3), threading.Event()

    def capture() -> None:
        with paused_gc():  # held open so that the captures overlap
            started.wait()
            release.wait(10)
            tl.trace(nn.Tanh(), torch.ones(2))

    threads = [threading.Thread(target=capture) for _ in range(2)]
    for thread in threads:
        thread.start()
    started.wait()
    assert not gc.isenabled()  # paused while either is inside
    release.set()
    for thread in threads:
        thread.join(10)
    assert gc.isenabled()
