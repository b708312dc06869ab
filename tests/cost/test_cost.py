"""hot_path / hot_path_rows / recompute_candidates: cost ranked by source line and by bytes/FLOP."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import torchlens_nb as tl
from torchlens_nb.report._cost import HOT_PATH_COLUMNS, RECOMPUTE_COLUMNS


def test_spec_example_hot_path_is_a_tabular_report() -> None:
    trace = tl.trace(nn.Linear(2, 2), torch.ones(1, 2))
    report = tl.debug.hot_path(trace, by="flops")
    assert isinstance(report, tl.report.Report)
    assert report.report_type == "hot_path"
    frame = report.to_pandas()
    assert frame.columns.tolist() == list(HOT_PATH_COLUMNS)
    assert frame.attrs["metric"] == "flops"
    assert frame["value"].tolist() == [8]  # 2 * 1 (batch) * 2 (out) * 2 (in)


def test_spec_example_hot_path_rows_core() -> None:
    trace = tl.trace(nn.Linear(2, 2), torch.ones(1, 2))
    rows, attrs = tl.debug.hot_path_rows(trace, by="flops")
    assert sorted(rows[0]) == sorted(HOT_PATH_COLUMNS)
    assert attrs["metric"] == "flops"
    assert (attrs["unit"], attrs["excluded"], attrs["is_partial"]) == ("flop", 0, False)


class TwoLines(nn.Module):
    """Two linears on one line, a bigger matmul on the next one."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.b(self.a(x))
        return h @ torch.ones(4, 64)


def _line_of(fragment: str) -> int:
    import inspect

    lines, start = inspect.getsourcelines(TwoLines.forward)
    return start + next(i for i, text in enumerate(lines) if fragment in text)


def test_flops_are_aggregated_per_source_line_largest_first() -> None:
    trace = tl.trace(TwoLines(), torch.ones(2, 4))
    rows, attrs = tl.debug.hot_path_rows(trace, by="flops")
    # line 2: matmul (2, 4) @ (4, 64) = 2 * 2 * 64 * 4 = 1024; line 1: 2 linears 2 * 2 * 4 * 4 = 64
    assert [r["value"] for r in rows[:2]] == [1024, 128]
    assert rows[0]["source_line"].endswith(f"test_cost.py:{_line_of('return')}")
    assert rows[1]["source_line"].endswith(f"test_cost.py:{_line_of('self.b(self.a(x))')}")
    assert (rows[1]["funcs"], rows[1]["ops"], rows[1]["modules"]) == (
        "linear x2",
        ("linear_1", "linear_2"),
        ("a", "b"),
    )
    assert rows[1]["code"] == "h = self.b(self.a(x))"
    assert rows[0]["share"] == pytest.approx(1024 / (1024 + 128))
    # torch.ones is a creation op: 0 FLOPs, but ranked (it has a formula)
    assert attrs["total"] == 1024 + 128


def test_memory_counts_new_allocations_and_views_as_zero() -> None:
    class ViewThenCopy(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            v = x.view(4, 2)
            return v.contiguous() * 2

    trace = tl.trace(ViewThenCopy(), torch.ones(2, 4))
    rows, attrs = tl.debug.hot_path_rows(trace, by="memory")
    values = {r["funcs"]: r["value"] for r in rows}
    # view: 0 bytes; contiguous of a contiguous view returns it (a view, 0); mul: 8 float32 = 32
    assert values == {"view": 0, "contiguous, mul": 32}
    assert attrs["unit"] == "byte"


def test_duration_ranks_host_wall_time() -> None:
    trace = tl.trace(nn.Sequential(nn.Linear(8, 8), nn.ReLU()), torch.ones(2, 8))
    _rows, attrs = tl.debug.hot_path_rows(trace, by="duration")
    assert attrs["total"] == sum(op.duration_ns for op in trace if not op.is_input)
    assert attrs["basis"].startswith("host wall time")


def test_device_time_refuses_with_a_typed_unavailable_error() -> None:
    trace = tl.trace(nn.Linear(2, 2), torch.ones(1, 2))
    with pytest.raises(tl.errors.UnavailableError, match="profiler session") as info:
        tl.debug.hot_path(trace, by="device_time")
    assert info.value.code == "device_time_unavailable"
    with pytest.raises(tl.errors.DiagnosticArgumentError, match="by must be"):
        tl.debug.hot_path(trace, by="latency")


def test_ops_without_formula_or_source_line_are_excluded_and_counted() -> None:
    class Einsum(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.einsum("ij,jk->ik", x, x).relu()

    trace = tl.trace(Einsum(), torch.ones(2, 2))
    rows, attrs = tl.debug.hot_path_rows(trace, by="flops")
    assert attrs["excluded_by_reason"] == {"no_flop_formula": 1}  # einsum has no formula
    assert rows[0]["funcs"] == "relu"
    report = tl.debug.hot_path(trace)
    assert report.excluded == 1
    assert [f.code for f in report.findings] == ["hot_path_excluded"]
    blind = tl.trace(
        Einsum(), torch.ones(2, 2), capture=tl.options.CaptureOptions(source_lines=False)
    )
    assert tl.debug.hot_path_rows(blind)[1]["excluded_by_reason"] == {
        "no_flop_formula": 1,
        "no_source_line": 1,
    }
    assert [u.code for u in tl.debug.hot_path(blind).unavailable] == ["no_source_line"]


def test_spec_example_recompute_candidates_columns() -> None:
    trace = tl.trace(nn.Linear(2, 2), torch.ones(1, 2))
    report = tl.debug.recompute_candidates(trace).to_pandas()
    assert report.columns.tolist() == list(RECOMPUTE_COLUMNS)
    assert len(report) == 0  # the only op is the model output: needed anyway
    assert report.attrs["excluded_by_reason"] == {"model_output": 1}


def test_recompute_ranks_bytes_per_flop_and_greedily_reaches_the_budget() -> None:
    model = nn.Sequential(
        nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 4)
    )
    trace = tl.trace(model, torch.ones(8, 16))
    # linear_1: 8*64*4 = 2048 bytes, 2*8*64*16 = 16384 FLOPs -> 0.125 B/FLOP
    # relu_1:   2048 bytes, 512 FLOPs -> 4 B/FLOP; linear_2: 2048 B / 65536 FLOPs; relu_2 like relu_1
    # total activation bytes: 4 * 2048 + linear_3 (8*4*4 = 128) = 8320
    report = tl.debug.recompute_candidates(trace, budget_gb=5000 / 1e9)
    rows = report.table().dicts()
    assert [r["op"] for r in rows] == ["relu_1", "relu_2", "linear_1", "linear_2"]
    assert rows[0]["bytes_per_flop"] == 4.0
    assert [r["is_selected"] for r in rows] == [True, True, False, False]
    assert [r["remaining_bytes"] for r in rows] == [6272, 4224, 2176, 128]
    assert (report.total_bytes, report.budget_bytes, report.selected_bytes) == (8320, 5000, 4096)
    assert (report.selected_flops, report.is_budget_reached) == (1024, True)
    unreachable = tl.debug.recompute_candidates(trace, budget_gb=100 / 1e9)
    assert unreachable.is_budget_reached is False
    assert [f.code for f in unreachable.findings] == ["recompute_budget_not_reached"]


@pytest.mark.parametrize("budget", [-1.0, float("nan"), "1GB"], ids=["negative", "nan", "str"])
def test_bad_budgets_are_refused(budget: object) -> None:
    trace = tl.trace(nn.Linear(2, 2), torch.ones(1, 2))
    with pytest.raises(tl.errors.DiagnosticArgumentError, match="budget_gb must be None"):
        tl.debug.recompute_candidates(trace, budget_gb=budget)


@pytest.mark.parametrize("by", ["flops", "memory", "duration"])
def test_hot_path_is_a_thin_view_over_the_rows_core(by: str) -> None:
    trace = tl.trace(TwoLines(), torch.ones(2, 4))
    rows, attrs = tl.debug.hot_path_rows(trace, by=by)
    report = tl.debug.hot_path(trace, by=by)
    assert report.table().dicts() == rows
    assert report.to_pandas().attrs == attrs
