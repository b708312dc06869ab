"""Every report of the comparison and cost helpers: strict JSON with NaN/Inf present, bounded card."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

import torchlens_nb as tl

CARD_LINE_MAX_CHARS = 240


class Poisoned(nn.Module):
    """Outputs NaN and Inf: 0/0 and 1/0 next to finite values."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        zeros = x - x
        return torch.cat([zeros / zeros, (zeros + 1) / zeros, x.clone()])


def _reports() -> dict[str, tl.report.Report]:
    x = torch.tensor([1.0, -2.0])
    left = tl.trace(Poisoned(), x)
    right = tl.trace(Poisoned(), torch.tensor([1.0, float("inf")]))  # inf - inf = nan
    nan_model = nn.Linear(2, 2)
    with torch.no_grad():
        nan_model.weight[0, 0] = float("nan")
        nan_model.bias[0] = float("inf")
    return {
        "compare": tl.debug.compare(left, right),
        "compare_params": tl.debug.compare_params(nan_model, nn.Linear(2, 2)),
        "hot_path": tl.debug.hot_path(left, by="memory"),
        "recompute": tl.debug.recompute_candidates(left, budget_gb=1e-9),  # inf bytes per FLOP
        "flops_vs_dispatch": tl.report.flops_vs_dispatch(Poisoned(), x),
        "bisect_precision": tl.debug.bisect_precision(Poisoned(), x),
        "determinism": tl.debug.check_determinism(Poisoned(), x, seed_sensitivity=True),
        "determinism inconclusive": tl.debug.check_determinism(nn.Linear(3, 1), x),
        "guess_input_shape": tl.debug.guess_input_shape(nn.Bilinear(2, 2, 1), max_probes=2),
        "graph_breaks": tl.debug.graph_breaks(nn.Linear(2, 2), torch.ones(1, 2)),
    }


@pytest.fixture(scope="module")
def reports() -> dict[str, tl.report.Report]:
    return _reports()


def test_nan_and_inf_are_present_in_the_data(reports) -> None:
    compare_rows = reports["compare"].table("comparison").dicts()
    assert float("inf") in [r["max_abs_diff"] for r in compare_rows]  # 0 vs NaN
    assert float("inf") in [r["bytes_per_flop"] for r in reports["recompute"].table().dicts()]


@pytest.mark.parametrize(
    "name",
    [
        "compare",
        "compare_params",
        "hot_path",
        "recompute",
        "flops_vs_dispatch",
        "bisect_precision",
        "determinism",
        "determinism inconclusive",
        "guess_input_shape",
        "graph_breaks",
    ],
)
def test_payload_is_strict_json_and_card_is_bounded(reports, name: str) -> None:
    report = reports[name]
    text = json.dumps(report.to_dict(), allow_nan=False)
    assert json.loads(text)["report_type"] == report.report_type
    lines = report.card().splitlines()
    assert len(lines) <= 1 + 5 + 1 + 3 + 1 + 1 + len(report.unavailable)
    assert all(len(line) <= CARD_LINE_MAX_CHARS for line in lines)
    assert str(report) == report.card()


def test_panel_view_is_bounded_and_carries_both_sides(reports) -> None:
    view = reports["compare"].to_dict()["data"]["view"]
    assert (view["side_a"], view["side_b"], view["first"]) == ("trace_a", "trace_b", "sub_1")
    first = next(row for row in view["rows"] if row["op"] == view["first"])
    # x - x: [0, 0] in trace_a, [0, nan] in trace_b
    assert first["is_diverged"]
    assert (first["stats_a"]["nan_count"], first["stats_b"]["nan_count"]) == (0, 1)
    assert len(view["rows"]) <= 300 and view["total"] == 7
