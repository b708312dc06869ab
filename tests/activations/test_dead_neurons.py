"""dead_neurons: exact dead units of layer outputs, the unit-axis rules, no inherited flags."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import torchlens_nb as tl
from tests.models import five_block_mlp
from torchlens_nb.errors import DiagnosticArgumentError
from torchlens_nb.report._activations import DEAD_NEURONS_COLUMNS

DEAD_CHANNELS = (1, 4)


def conv_with_dead_channels() -> nn.Sequential:
    """Conv2d(3, 6) whose channels 1 and 4 have zero weights and bias (so output exactly 0),
    then ReLU, then a Conv2d(6, 4) that mixes every channel."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 6, 3, padding=1), nn.ReLU(), nn.Conv2d(6, 4, 3, padding=1))
    with torch.no_grad():
        model[0].weight[list(DEAD_CHANNELS)] = 0.0
        model[0].bias[list(DEAD_CHANNELS)] = 0.0
    return model


def rows_by_op(report) -> dict[str, dict]:
    return {row["op"]: row for row in report.table().dicts()}


def test_finds_exactly_the_dead_channels_of_a_conv() -> None:
    torch.manual_seed(1)
    trace = tl.trace(conv_with_dead_channels(), torch.randn(2, 3, 8, 8))
    rows = rows_by_op(tl.debug.dead_neurons(trace))
    facts = [(r["op"], r["dead_count"], r["sample_dead_idx"], r["reason"]) for r in rows.values()]
    assert facts == [
        ("conv2d_1", 2, DEAD_CHANNELS, "channel axis 1"),
        ("relu_1", 2, DEAD_CHANNELS, "channel axis 1"),  # relu of 0 is 0: dead too, truly
        ("conv2d_2", 0, (), "channel axis 1"),  # fed by dead channels, itself alive
    ]
    assert rows["conv2d_1"]["total_units"] == 6
    assert rows["conv2d_1"]["dead_frac"] == 2 / 6


def test_downstream_of_a_dead_layer_is_judged_on_its_own_output(dead_trace) -> None:
    report = tl.debug.dead_neurons(dead_trace)
    rows = rows_by_op(report)
    assert rows["relu_3"]["dead_count"] == 8  # the dead block: every unit
    assert rows["linear_4"]["dead_count"] == 0  # its bias keeps the next layer alive
    for label, row in rows.items():  # every count is the brute-force count of its own output
        out = dead_trace[label].out
        assert row["dead_count"] == int((out.abs().amax(dim=0) == 0).sum()), label


def test_spec_columns_and_the_one_sample_disclosure() -> None:
    trace = tl.trace(nn.ReLU(), torch.tensor([[-1.0, 2.0], [-3.0, 4.0]]))
    report = tl.debug.dead_neurons(trace)
    assert report.to_pandas().columns.tolist() == list(DEAD_NEURONS_COLUMNS)
    assert report.to_pandas().iloc[0].tolist()[:7] == [
        "relu_1",
        "",
        2,
        1,
        0.5,
        (0,),
        "last axis of 2-D",
    ]
    assert report.status == "found"
    assert report.findings[0].message == (
        "1 of 2 units of relu_1 (last axis of 2-D) are exactly zero at every position of this "
        "trace."
    )
    assert report.disclosures[0].startswith("one trace is one sample")


class Shapes(nn.Module):
    """One module per unit-axis rule."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1d = nn.Conv1d(3, 5, 1)
        self.norm = nn.BatchNorm1d(5)
        self.act = nn.ReLU()
        self.tokens = nn.Linear(3, 7)
        self.wide = nn.Flatten(0)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        channels = self.act(self.norm(self.conv1d(x)))  # (2, 5, 4): channels, not last axis
        tokens = self.tokens(x.transpose(1, 2))  # (2, 4, 7): last axis
        four_d = channels.reshape(2, 5, 2, 2) + 1  # 4-D from a reshape: axis 1
        return channels, tokens, four_d, self.wide(x[0])  # 1-D: axis 0


def test_unit_axis_rules() -> None:
    torch.manual_seed(0)
    trace = tl.trace(Shapes(), torch.randn(2, 3, 4))
    rows = rows_by_op(tl.debug.dead_neurons(trace))
    assert {op: (r["total_units"], r["reason"]) for op, r in rows.items()} == {
        "conv1d_1": (5, "channel axis 1"),
        "batch_norm_1": (5, "channel axis 1"),
        "relu_1": (5, "channel axis 1"),  # same shape as the norm it is fed by
        "linear_1": (7, "last axis of 3-D"),
        "add_1": (5, "axis 1 of 4-D"),
        "flatten_1": (12, "axis 0 of 1-D"),
    }


def test_int_dim_forces_one_axis() -> None:
    trace = tl.trace(nn.ReLU(), torch.tensor([[-1.0, 2.0], [-3.0, -4.0], [5.0, 6.0]]))
    row = tl.debug.dead_neurons(trace, dim=0).table().dicts()[0]
    assert (row["total_units"], row["dead_count"], row["sample_dead_idx"], row["reason"]) == (
        3,
        1,
        (1,),
        "axis 0 (dim=0)",
    )  # the second sample is all zero after ReLU
    # an axis no layer output has is a bad argument, not a table of "dim out of range" rows
    with pytest.raises(DiagnosticArgumentError, match=r"dim=2 is out of range for every layer"):
        tl.debug.dead_neurons(trace, dim=2)


class Swish(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(x)


class TanhGelu(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 0.5 * x * (1.0 + torch.tanh(0.7978845608 * (x + 0.044715 * x**3)))


def test_composite_activation_internals_get_no_row() -> None:
    trace = tl.trace(nn.Sequential(nn.Linear(2, 2), Swish(), TanhGelu()), torch.ones(1, 2))
    ops = [row["op"] for row in tl.debug.dead_neurons(trace).table().dicts()]
    assert ops == ["linear_1", "mul_1", "mul_5"]  # no sigmoid_1, no tanh_1
    assert "tanh_1" in trace and "sigmoid_1" in trace


def test_max_activation_widens_dead_and_nan_is_never_dead() -> None:
    trace = tl.trace(nn.Identity(), torch.tensor([[0.1, 2.0, float("nan")], [-0.2, 3.0, 0.0]]))
    exact = tl.debug.dead_neurons(trace).table().dicts()[0]
    loose = tl.debug.dead_neurons(trace, max_activation=0.5).table().dicts()[0]
    assert (exact["dead_count"], loose["dead_count"], loose["sample_dead_idx"]) == (0, 1, (0,))


def test_unsaved_outputs_have_a_reason_and_no_count(batch) -> None:
    trace = tl.trace(five_block_mlp(), batch, save=tl.func("relu"))
    report = tl.debug.dead_neurons(trace)
    rows = rows_by_op(report)
    assert (rows["linear_1"]["dead_count"], rows["linear_1"]["reason"]) == (None, "not saved")
    assert rows["relu_3"]["dead_count"] == 8
    assert (report.num_rows, report.num_counted) == (11, 5)
    assert report.disclosures[1] == (
        "6 of 11 layer outputs were not counted (see the reason column)."
    )


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"dim": "1"}, "dim must be an int axis or None, got '1'"),
        ({"dim": True}, "dim must be an int axis or None"),
        ({"max_activation": -1.0}, "max_activation must be a finite number >= 0"),
        ({"max_activation": float("nan")}, "max_activation must be a finite number >= 0"),
    ],
    ids=["text-dim", "bool-dim", "negative", "nan"],
)
def test_bad_arguments_raise_a_typed_error(dead_trace, kwargs, match) -> None:
    with pytest.raises(DiagnosticArgumentError, match=match):
        tl.debug.dead_neurons(dead_trace, **kwargs)


def test_rows_core_holds_the_same_facts_as_the_report(dead_trace) -> None:
    rows, attrs = tl.debug.dead_neurons_rows(dead_trace)
    report = tl.debug.dead_neurons(dead_trace)
    assert [tuple(r[c] for c in DEAD_NEURONS_COLUMNS) for r in rows] == list(report.table().rows)
    assert (attrs["num_counted"], attrs["total_dead"]) == (report.num_counted, report.total_dead)
