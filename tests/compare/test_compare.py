"""compare / compare_rows / first_divergence / compare_params: aligned on labels, execution order."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch
from torch import nn

import torchlens_nb as tl
from torchlens_nb.report._compare import COMPARE_COLUMNS


def test_spec_example_two_relu_runs_have_one_diverged_value() -> None:
    model = nn.ReLU()
    left = tl.trace(model, torch.tensor([[-1.0, 2.0]]))
    right = tl.trace(model, torch.tensor([[-1.0, 3.0]]))
    comparison = tl.debug.compare(left, right).to_pandas()
    # rows: input_1 (the inputs differ: evidence, not a divergence) and relu_1 (0, 2) vs (0, 3)
    assert comparison.shape == (2, len(COMPARE_COLUMNS))
    assert comparison.attrs["value_diverged"] == 1
    assert comparison["status"].tolist() == ["input_differs", "value_diverged"]
    assert comparison.loc[1, "max_abs_diff"] == 1.0  # |2 - 3|
    assert comparison.loc[1, "max_rel_diff"] == pytest.approx(1 / 3)  # 1 / max(2, 3)


class Branchy(nn.Module):
    """zeta_head runs before alpha_head: execution order is not alphabetical order."""

    def __init__(self) -> None:
        super().__init__()
        self.zeta_head = nn.Linear(4, 4)
        self.alpha_head = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.alpha_head(torch.sigmoid(self.zeta_head(x))))


def test_rows_follow_execution_order_and_first_divergence_is_the_earliest_op() -> None:
    torch.manual_seed(0)
    model = Branchy()
    x = torch.randn(3, 4)
    left = tl.trace(model, x)
    with torch.no_grad():
        model.alpha_head.bias.add_(0.5)  # changes alpha_head's linear and everything after it
    right = tl.trace(model, x)
    rows, attrs = tl.debug.compare_rows(left, right)
    assert [r["op"] for r in rows] == ["input_1", "linear_1", "sigmoid_1", "linear_2", "tanh_1"]
    assert [r["module"] for r in rows[1:3]] == ["zeta_head", ""]
    assert [r["status"] for r in rows] == [
        "match",
        "match",
        "match",
        "value_diverged",
        "value_diverged",
    ]
    assert attrs["first_divergence"] == "linear_2"
    first = tl.debug.first_divergence(left, right)
    assert (first["op"], first["module"], first["status"]) == (
        "linear_2",
        "alpha_head",
        "value_diverged",
    )


def test_identical_runs_have_no_divergence_and_a_match_card() -> None:
    model = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
    x = torch.ones(1, 2)
    report = tl.debug.compare(tl.trace(model, x), tl.trace(model, x))
    assert tl.debug.first_divergence(tl.trace(model, x), tl.trace(model, x)) is None
    assert report.status == "match"
    assert report.card().splitlines() == [
        "compare [match] Sequential (3 ops) vs Sequential (3 ops): all 3 compared ops agree "
        "within rtol=1e-05, atol=1e-08",
        "  note: coverage: compared 3 of 3 aligned ops; aligned: 3 same dtype and device",
    ]


def test_tolerance_decides_what_diverges() -> None:
    left = tl.trace(nn.Identity(), torch.tensor([1.0]))
    right = tl.trace(nn.Identity(), torch.tensor([1.0 + 1e-6]))
    # |a - b| = 1e-6 <= atol + rtol * |b| = 1e-8 + 1e-5 * 1.000001
    assert tl.debug.compare_rows(left, right)[0][0]["allclose"] is True
    assert tl.debug.compare_rows(left, right, rtol=0.0, atol=0.0)[0][0]["allclose"] is False


def test_different_dtypes_are_compared_in_the_wider_dtype_and_named() -> None:
    torch.manual_seed(0)
    model = nn.Linear(3, 3)
    x = torch.randn(2, 3)
    narrow = tl.trace(model, x)
    wide = tl.trace(model.double(), x.double())
    report = tl.debug.compare(narrow, wide)
    rows = report.table("comparison").dicts()
    assert {r["reason"] for r in rows} == {"in float64 (float32 vs float64)"}
    assert report.alignment == {"in float64 (float32 vs float64)": 2}
    assert report.coverage == (
        "coverage: compared 2 of 2 aligned ops; aligned: 2 in float64 (float32 vs float64)"
    )
    assert report.coverage in report.card()
    assert report.status == "match"  # fp32 rounding (~1e-7) is inside rtol=1e-5


class ArgMax(nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x.argmax(dim=1), x > 0


def test_integer_and_boolean_activations_must_match_exactly() -> None:
    left = tl.trace(ArgMax(), torch.tensor([[1.0, 2.0, 0.5]]))
    right = tl.trace(ArgMax(), torch.tensor([[2.5, 2.0, -0.5]]))
    rows, attrs = tl.debug.compare_rows(left, right, rtol=10.0, atol=10.0)
    by_op = {r["op"]: r for r in rows}
    # argmax 1 vs 0 and mask [T, T, T] vs [T, T, F] differ by 1: inside the tolerance, but exact
    assert (by_op["argmax_1"]["status"], by_op["argmax_1"]["reason"]) == (
        "value_diverged",
        "exact (int64)",
    )
    assert (by_op["gt_1"]["status"], by_op["gt_1"]["reason"]) == ("value_diverged", "exact (bool)")
    assert by_op["gt_1"]["mismatched"] == 1
    assert attrs["value_diverged"] == 2


class Switch(nn.Module):
    """Runs relu or tanh on the second step depending on the flag: a structural difference."""

    def __init__(self, use_relu: bool) -> None:
        super().__init__()
        self.use_relu = use_relu
        self.fc = nn.Linear(2, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x)
        h = torch.relu(h) if self.use_relu else torch.tanh(h)
        return h * 2


def test_ops_of_only_one_run_are_structural_divergences_in_execution_order() -> None:
    # trace_a's own op comes first, trace_b's own op slots in before the next shared op
    torch.manual_seed(0)
    a, b = Switch(True), Switch(False)
    b.load_state_dict(a.state_dict())
    x = torch.randn(1, 2)
    rows, attrs = tl.debug.compare_rows(tl.trace(a, x), tl.trace(b, x))
    assert [(r["op"], r["status"]) for r in rows] == [
        ("input_1", "match"),
        ("linear_1", "match"),
        ("relu_1", "only_in_a"),
        ("tanh_1", "only_in_b"),
        ("mul_1", "structure_diverged"),
    ]
    assert rows[4]["reason"].startswith("parents ['relu_1'] vs ['tanh_1']")
    assert (attrs["only_in_a"], attrs["only_in_b"], attrs["structure_diverged"]) == (1, 1, 1)
    assert attrs["first_divergence"] == "relu_1"


def test_shape_divergence_and_unsaved_ops_are_reported_not_compared() -> None:
    model = nn.Sequential(nn.Linear(2, 3), nn.ReLU())
    left = tl.trace(model, torch.ones(1, 2))
    right = tl.trace(model, torch.ones(4, 2), save=tl.func("relu"))
    rows, attrs = tl.debug.compare_rows(left, right)
    assert [r["status"] for r in rows] == ["input_differs", "shape_diverged", "shape_diverged"]
    assert rows[1]["reason"] == "shape [(1, 3)] vs [(4, 3)]"
    partial = tl.trace(model, torch.ones(1, 2), save=tl.func("relu"))
    rows, attrs = tl.debug.compare_rows(left, partial)
    assert [r["status"] for r in rows] == ["not_saved", "not_saved", "match"]
    assert rows[1]["reason"] == "output not saved in trace_b (save= selector)"
    assert (attrs["compared"], attrs["matched"], attrs["not_saved"]) == (1, 3, 2)


def test_rows_core_and_report_table_hold_identical_facts() -> None:
    torch.manual_seed(0)
    model = Branchy()
    left, right = tl.trace(model, torch.randn(2, 4)), tl.trace(model, torch.randn(2, 4))
    rows, attrs = tl.debug.compare_rows(left, right)
    report = tl.debug.compare(left, right)
    assert report.table("comparison").dicts() == rows
    assert dict(report.to_pandas().attrs) == {**attrs, "alignment": dict(attrs["alignment"])}


def test_value_stats_of_both_sides_for_the_panel() -> None:
    left = tl.trace(nn.ReLU(), torch.tensor([[-1.0, 2.0]]))
    right = tl.trace(nn.ReLU(), torch.tensor([[float("nan"), 3.0]]))
    stats = tl.debug.compare(left, right).to_pandas("value_stats")
    relu_b = stats[(stats.op == "relu_1") & (stats.side == "b")].iloc[0]
    # relu(nan) = nan: one NaN; the finite part is [3.0]
    assert (relu_b["nan_count"], relu_b["min"], relu_b["max"]) == (1, 3.0, 3.0)


@pytest.mark.parametrize(
    "rtol, atol",
    [(-1.0, 0.0), (0.0, float("nan")), (float("inf"), 0.0)],
    ids=["negative", "nan", "inf"],
)
def test_bad_tolerances_are_refused(rtol: float, atol: float) -> None:
    t = tl.trace(nn.ReLU(), torch.ones(1))
    with pytest.raises(tl.errors.DiagnosticArgumentError, match="must be a finite number >= 0"):
        tl.debug.compare(t, t, rtol=rtol, atol=atol)


def test_non_trace_arguments_are_refused() -> None:
    t = tl.trace(nn.ReLU(), torch.ones(1))
    with pytest.raises(tl.errors.DiagnosticArgumentError, match="trace_b must be a tl.trace"):
        tl.debug.compare(t, torch.ones(1))


def test_spec_example_compare_params_names_bias() -> None:
    torch.manual_seed(0)
    left = nn.Linear(4, 2)
    right = nn.Linear(4, 2)
    right.load_state_dict(left.state_dict())
    with torch.no_grad():
        right.bias.add_(1.0)
    report = tl.debug.compare_params(left, right).to_pandas()
    assert (report.attrs["matched"], report.attrs["value_diverged"]) == (2, 1)
    assert report.loc[report["allclose"] == False, "name"].tolist() == ["bias"]  # noqa: E712
    assert report.loc[report["name"] == "bias", "max_abs_diff"].item() == 1.0


def test_compare_params_skips_shape_dtype_and_meta_with_reasons_and_adds_buffers() -> None:
    torch.manual_seed(0)
    left = nn.Sequential(nn.Linear(2, 3), nn.BatchNorm1d(3), nn.Linear(3, 1))
    right = nn.Sequential(nn.Linear(2, 4), nn.BatchNorm1d(3), nn.Linear(3, 1).double())
    with torch.device("meta"):
        right[1] = nn.BatchNorm1d(3)
    report = tl.debug.compare_params(left, right, include_buffers=True)
    rows = {r["name"]: r for r in report.table().dicts()}
    assert (rows["0.weight"]["status"], rows["0.weight"]["reason"]) == (
        "shape_mismatch",
        "shape (3, 2) vs (4, 2)",
    )
    assert (rows["2.weight"]["status"], rows["2.weight"]["reason"]) == (
        "dtype_mismatch",
        "dtype float32 vs float64",
    )
    assert rows["1.weight"]["status"] == "meta"
    assert (rows["1.running_mean"]["kind"], rows["1.running_mean"]["status"]) == ("buffer", "meta")
    assert all(r["allclose"] is None for r in rows.values())
    assert report.counts["skipped"] == len(rows) == 9  # 6 params + 3 BatchNorm buffers
    without = tl.debug.compare_params(left, right)
    assert {r["kind"] for r in without.table().dicts()} == {"param"}


def test_compare_params_names_present_in_one_model_only() -> None:
    report = tl.debug.compare_params(nn.Linear(2, 2), nn.Linear(2, 2, bias=False))
    rows = report.table().dicts()
    assert [(r["name"], r["status"]) for r in rows][1] == ("bias", "only_in_a")
    assert report.counts["only_in_a"] == 1
    assert report.status == "diverged"


def test_the_lineage_exit_walks_trace_a_and_holds_it_weakly() -> None:
    torch.manual_seed(0)
    model = Branchy()
    x = torch.randn(3, 4)
    left = tl.trace(model, x)
    with torch.no_grad():
        model.alpha_head.bias.add_(0.5)
    report = tl.debug.compare(left, tl.trace(model, x))
    (exit_,) = report.exits
    assert (exit_.code, exit_.action, dict(exit_.args)) == (
        "tl.debug.lineage(trace_a, 'linear_2')",
        "lineage",
        {"op": "linear_2"},
    )
    ancestors = report.run_action("lineage", **exit_.args)
    assert [node.label for node in ancestors.nodes] == [
        "linear_2",
        "sigmoid_1",
        "linear_1",
        "input_1",
    ]
    released = weakref.ref(left)
    del left
    gc.collect()
    assert released() is None  # the report pins neither trace
    again = report.run_action("lineage", op="linear_2")  # the follow-up holds trace_a's graph
    assert [node.label for node in again.nodes] == [node.label for node in ancestors.nodes]


def test_compare_params_with_no_common_names_does_not_claim_agreement() -> None:
    report = tl.debug.compare_params(nn.Linear(2, 2), nn.Sequential(nn.Linear(2, 2)))
    assert report.status == "diverged"
    # weight/bias only in model_a, 0.weight/0.bias only in model_b
    assert report.lead == "no tensor could be compared; 4 names exist in one model only"
