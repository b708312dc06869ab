"""The objects that existed before a capture or a trace analysis are kept out of the collector's
scans while it runs (``gc.freeze()``), and the collector comes back as it was: after a raise,
under overlapping captures in several threads, and as the user left it. New reference cycles are
still collected meanwhile (capture/_gc_pause.py)."""

from __future__ import annotations

import gc
import threading
import tracemalloc

import pytest
import torch
from torch import nn

import torchlens_nb as tl
from torchlens_nb.capture._gc_pause import paused_gc


class SeesTheCollector(nn.Module):
    """Records how many objects were frozen while its forward ran."""

    def __init__(self) -> None:
        super().__init__()
        self.frozen: list[int] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.frozen.append(gc.get_freeze_count())
        return torch.tanh(x)


def test_a_capture_freezes_what_existed_and_gives_it_back() -> None:
    model = SeesTheCollector()
    trace = tl.trace(model, torch.ones(2))
    assert model.frozen[0] > 1000 and gc.get_freeze_count() == 0 and gc.isenabled()
    tl.debug.dtype_range(trace)
    trace.audit()
    assert gc.get_freeze_count() == 0 and gc.isenabled()


def test_a_forward_that_raises_gives_the_frozen_objects_back() -> None:
    class Boom(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise RuntimeError("boom")

    with pytest.raises(tl.errors.ForwardError):
        tl.trace(Boom(), torch.ones(2))
    assert gc.get_freeze_count() == 0 and gc.isenabled()


def test_a_collector_the_user_turned_off_stays_off() -> None:
    gc.disable()
    try:
        tl.trace(nn.Tanh(), torch.ones(2))
        assert not gc.isenabled()
    finally:
        gc.enable()


class TurnsTheCollectorOff(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gc.disable()
        return torch.tanh(x)


def test_a_gc_disable_inside_the_forward_is_not_undone() -> None:
    try:
        tl.trace(TurnsTheCollectorOff(), torch.ones(2))
        assert not gc.isenabled()  # as after a plain call
    finally:
        gc.enable()


def test_objects_the_user_froze_stay_frozen() -> None:
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        tl.trace(SeesTheCollector(), torch.ones(2))
        # an unfreeze would empty the permanent generation and a freeze of the capture's own
        # would add every object made since; a frozen object that dies by refcount may leave
        # it, so the count may drop by a few
        assert 0.99 * frozen <= gc.get_freeze_count() <= frozen
    finally:
        gc.unfreeze()


class Churn(nn.Module):
    """Makes short-lived reference cycles: each a self-referencing holder of 10 KB."""

    def __init__(self, cycles: int) -> None:
        super().__init__()
        self.cycles = cycles

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(self.cycles):
            holder: dict[str, object] = {"payload": bytes(10_000)}
            holder["self"] = holder  # garbage once the loop moves on, freed only by the collector
        return torch.tanh(x)


def _peak_bytes(call: object) -> int:
    gc.collect()
    tracemalloc.start()
    try:
        call()  # type: ignore[operator]
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_short_lived_cycles_do_not_pile_up_during_a_capture() -> None:
    # 6,000 cycles x 10 KB = 60 MB if none is collected before the forward ends; the
    # collector's generation-0 threshold (700 allocations) keeps a plain call near 4 MB
    model, x = Churn(6000), torch.ones(2)
    plain = _peak_bytes(lambda: model(x))
    captured = _peak_bytes(lambda: tl.trace(model, x))
    assert plain < 15e6
    assert captured < 2 * plain + 2e6


def test_overlapping_captures_in_threads_never_leave_objects_frozen() -> None:
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
    assert gc.get_freeze_count() > 0  # frozen while either is inside
    release.set()
    for thread in threads:
        thread.join(10)
    assert gc.get_freeze_count() == 0 and gc.isenabled()
