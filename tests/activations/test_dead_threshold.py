"""tl.dead (the multi-sample dead-unit verdict) and tl.threshold (range forensics)."""

from __future__ import annotations

import json
import math

import pytest
import torch
from torch import nn

import torchlens_nb as tl
from torchlens_nb.errors import DiagnosticArgumentError


def gated_model() -> nn.Sequential:
    """Linear(8, 16) -> ReLU where units 0-2 never fire and unit 5 fires only when x[:, 0] > 0."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU())
    with torch.no_grad():
        model[0].bias[:3] = -100.0
        model[0].weight[5] = torch.eye(8)[0]
        model[0].bias[5] = 0.0
    return model


def batch(sign: float, seed: int = 1) -> torch.Tensor:
    """16 rows; column 0 forced to ``sign``."""
    torch.manual_seed(seed)
    x = torch.randn(16, 8)
    x[:, 0] = sign * x[:, 0].abs()
    return x


def test_dead_needs_at_least_two_samples() -> None:
    model = gated_model()
    one = tl.trace(model, batch(-1.0), save=tl.func("relu"))
    with pytest.raises(
        DiagnosticArgumentError, match="at least 2 traces .* one batch can never prove a unit dead"
    ):
        tl.dead([one])
    with pytest.raises(DiagnosticArgumentError, match="takes a list of traces"):
        tl.dead(one)


def test_a_unit_silent_in_one_batch_is_not_dead_once_another_batch_fires_it() -> None:
    model = gated_model()
    negative = tl.trace(model, batch(-1.0), save=tl.func("relu"))  # unit 5 silent here
    positive = tl.trace(model, batch(+1.0, seed=2), save=tl.func("relu"))  # ... fires here
    assert int((negative["relu_1"].out[:, 5] != 0).sum()) == 0
    report = tl.dead([negative, positive])
    (units,) = report.units
    assert (units.label, units.unit_dim, units.units) == ("relu_1", 1, 16)
    assert units.dead_indices == (0, 1, 2)  # not 5
    assert report.status == "found" and (report.samples, report.batch_rows) == (2, 32)
    assert report.lead == (
        "3 units in 1 of 1 ops dead in every sample seen: 2 samples (32 batch "
        "rows); one batch can never prove a unit dead, so read this as an "
        "upper bound."
    )
    (finding,) = report.findings
    assert finding.code == "dead_units" and finding.fields["dead_indices"] == (0, 1, 2)
    assert finding.where.op == "relu_1" and finding.where.line is not None
    assert report.to_pandas()["dead"].tolist() == [3]


def test_only_ops_saved_in_every_trace_are_compared() -> None:
    model = gated_model()
    full = tl.trace(model, batch(-1.0))  # input_1, linear_1, relu_1 saved
    relu_only = tl.trace(model, batch(1.0), save=tl.func("relu"))
    report = tl.dead([full, relu_only])
    assert [u.label for u in report.units] == ["relu_1"]
    assert report.ops_not_common == 1  # linear_1
    assert report.disclosures[1].startswith("1 saved ops skipped")


def test_dead_with_nothing_in_common_is_unavailable_not_an_error() -> None:
    model = gated_model()
    runs = [tl.trace(model, batch(1.0), save=False) for _ in range(2)]
    report = tl.dead(runs)
    assert report.status == "unavailable"
    assert report.unavailable[0].code == "no_common_saved_ops"
    json.dumps(report.to_dict(), allow_nan=False)


class Blowup(nn.Module):
    """linear -> relu -> x1000 -> tanh: only the multiply leaves [-10, 10], tanh brings it back."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(torch.relu(self.fc(x)) * 1000.0)


def test_threshold_names_the_op_where_values_leave_the_range() -> None:
    torch.manual_seed(0)
    model, x = Blowup(), torch.randn(3, 4)
    trace = tl.trace(model, x)
    report = tl.threshold(trace, within=(-10.0, 10.0))
    big = trace["mul_1"].out
    assert [v.label for v in report.violations] == ["mul_1"]
    (violation,) = report.violations
    assert violation.is_origin and violation.above == int((big > 10).sum())
    first = torch.nonzero(big > 10)[0].tolist()  # row-major first hit
    assert list(violation.first_index) == first
    assert violation.first_value == float(big[tuple(first)])
    (finding,) = report.findings
    assert finding.code == "range_origin" and finding.where.op == "mul_1"
    assert report.status == "found" and report.ops_scanned == 5  # input, linear, relu, mul, tanh


class LogChain(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log(x).exp() + 1


def test_nan_is_outside_every_range_and_only_its_origin_is_a_finding() -> None:
    trace = tl.trace(LogChain(), torch.tensor([[-1.0, 2.0]]))
    report = tl.threshold(trace, within=(-math.inf, math.inf))
    assert [(v.label, v.is_origin, v.nonfinite) for v in report.violations] == [
        ("log_1", True, 1),
        ("exp_1", False, 1),
        ("add_1", False, 1),
    ]
    assert [f.where.op for f in report.findings] == ["log_1"]
    json.dumps(report.to_dict(), allow_nan=False)
    assert len(report.card().splitlines()) <= 12


def test_threshold_scans_what_was_saved_and_counts_the_rest() -> None:
    torch.manual_seed(0)
    trace = tl.trace(Blowup(), torch.randn(3, 4), save=tl.func("tanh", "relu"))
    report = tl.threshold(trace, within=(-10.0, 10.0))
    assert (report.status, report.ops_scanned, report.ops_unsaved) == ("clean", 2, 3)
    nothing = tl.threshold(tl.trace(Blowup(), torch.randn(3, 4), save=False), within=(0, 1))
    assert nothing.status == "unavailable" and nothing.unavailable[0].code == "nothing_saved"
    only_fc = tl.threshold(trace, within=(-10.0, 10.0), selector=tl.module("fc"))
    assert only_fc.ops_scanned == 0 and only_fc.ops_unsaved == 1


@pytest.mark.parametrize(
    "within",
    [(1.0, 0.0), (0.0,), ("a", 1.0), (math.nan, 1.0)],
    ids=["reversed", "one-value", "string", "nan"],
)
def test_threshold_rejects_a_bad_range(within) -> None:
    trace = tl.trace(Blowup(), torch.randn(3, 4))
    with pytest.raises(DiagnosticArgumentError, match="tl.threshold within"):
        tl.threshold(trace, within=within)


def test_dead_report_with_an_empty_unit_axis_is_json_safe() -> None:
    runs = [tl.trace(nn.ReLU(), torch.zeros(2, 0)) for _ in range(2)]  # 0 units: fraction nan
    report = tl.dead(runs)
    (units,) = report.units
    assert (units.units, units.dead) == (0, 0)
    assert math.isnan(report.to_pandas()["dead_fraction"][0])
    json.dumps(report.to_dict(), allow_nan=False)
    assert len(report.card().splitlines()) <= 8


def test_the_spec_dead_unit_triage_recipe_runs_as_written(mlp) -> None:
    model = mlp
    liveness = tl.debug.LivenessProbe([tl.func("relu")])
    t1 = tl.trace(
        model, torch.randn(4, 8), capture=tl.options.CaptureOptions(hooks=liveness.hook_plan())
    )
    t2 = tl.trace(model, torch.randn(4, 8), save=tl.func("relu"))
    t3 = tl.trace(model, torch.randn(4, 8), save=tl.func("relu"))
    suspects = tl.dead([t2, t3])  # the verdict door, multi-sample
    assert len(t1) == len(t2) == len(t3)
    assert [s.label for s in liveness.stats] == ["relu_1"]
    assert [u.label for u in suspects.units] == ["relu_1"] and suspects.samples == 2
    assert suspects.units[0].dead == sum(
        int(((t2["relu_1"].out[:, i] == 0).all() & (t3["relu_1"].out[:, i] == 0).all()).item())
        for i in range(16)
    )
