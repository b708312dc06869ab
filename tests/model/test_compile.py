"""count_compiles and graph_breaks, and the capture's force_eager coexistence with torch.compile.

torch.compile's default backend (inductor) builds C++ on this CPU: the first compile of a
process costs about 16 s with a cold cache and under 2 s warm (measured on the 2-core CI box),
so the compiled model is built once per module.
"""

from __future__ import annotations

import importlib.util
import warnings

import pytest
import torch
from torch import nn

import torchlens_nb as tl


class Compiled(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.act = torch.compile(lambda t: torch.relu(t))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.fc(x))


def test_spec_example_capture_compiles_nothing_and_warns_force_eager() -> None:
    model = Compiled()
    x = torch.randn(2, 4)
    with tl.debug.count_compiles() as warm:
        model(x)  # warm the compile cache
    assert warm.frames_compiled == 1
    with warnings.catch_warnings(record=True) as capture_notes:
        warnings.simplefilter("always")
        with tl.debug.count_compiles() as during:
            tl.trace(model, x)
    assert any("force_eager" in str(note.message) for note in capture_notes)
    assert [n.filename for n in capture_notes if "force_eager" in str(n.message)] == [__file__]
    with tl.debug.count_compiles() as after:
        model(x)
    print(during.frames_compiled, after.frames_compiled <= 1)
    assert (during.frames_compiled, after.frames_compiled <= 1) == (0, True)
    assert after.frames_compiled == 0  # the cache from before the capture is still valid


def test_a_compiled_region_first_reached_inside_a_capture_is_not_compiled() -> None:
    fresh = torch.compile(lambda t: t * 3)

    class UsesFresh(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return fresh(x)

    with tl.debug.count_compiles() as during:
        trace = tl.trace(UsesFresh(), torch.ones(2))
    assert during.frames_compiled == 0
    assert [op.func for op in trace] == ["input", "mul"]  # recorded eagerly, op by op


def test_counts_are_live_inside_the_block_and_frozen_after() -> None:
    with tl.debug.count_compiles() as counts:
        torch.compile(lambda t: t - 1, backend="eager")(torch.ones(1))
        assert counts.frames_compiled == 1
    torch.compile(lambda t: t + 5, backend="eager")(torch.ones(1))
    assert (counts.frames_compiled, counts.frames_attempted) == (1, 1)
    assert repr(counts).startswith("<CompileCounts frames_compiled=1")


def test_missing_dynamo_counters_raise_the_typed_error(monkeypatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "torch._dynamo" else real(name, *a),
    )
    with pytest.raises(tl.errors.CompileCountsUnavailableError, match="no torch._dynamo"):
        tl.debug.count_compiles()


class Breaks(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x)
        if h.sum() > 0:  # data-dependent branch: a graph break
            h = h * 2
        return h.relu()


def test_graph_breaks_name_the_breaking_line() -> None:
    report = tl.debug.graph_breaks(Breaks(), torch.ones(2, 4))
    assert (report.graph_count, report.graph_break_count) == (2, 1)
    (row,) = report.table("breaks").dicts()
    assert row["source_line"].endswith(
        f"test_compile.py:{Breaks.forward.__code__.co_firstlineno + 2}"
    )
    assert row["code"] == "if h.sum() > 0:  # data-dependent branch: a graph break"
    single = tl.debug.graph_breaks(nn.Linear(4, 4), torch.ones(2, 4))
    assert (single.graph_break_count, single.status) == (0, "single_graph")
