"""RangeProbe and LivenessProbe: exact counts against the values themselves, no verdict words."""

from __future__ import annotations

import json
import math

import pytest
import torch
from torch import nn

import torchlens_nb as tl
from torchlens_nb.errors import DiagnosticArgumentError


def relu_model(seed: int = 0) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU())


def hooks(probe) -> tl.options.CaptureOptions:
    return tl.options.CaptureOptions(hooks=probe.hook_plan())


def test_the_spec_range_example_has_no_finding_inside_relu6_bounds() -> None:
    model = relu_model()
    probe = tl.debug.RangeProbe({tl.func("relu"): (0.0, 6.0)})
    trace = tl.trace(model, torch.randn(4, 8), capture=hooks(probe))
    assert [f.code for f in probe.findings] == []
    (stat,) = probe.stats
    assert (stat.label, stat.calls, stat.numel) == ("relu_1", 1, 64)
    assert stat.observed_min == 0.0 and stat.observed_max == float(trace.output.detach().max())


def test_a_range_violation_counts_exactly_what_left_the_bounds() -> None:
    model = relu_model()
    x = torch.randn(4, 8)
    probe = tl.debug.RangeProbe({tl.func("relu"): (0.0, 0.5)})
    tl.trace(model, x, capture=hooks(probe))
    y = model(x).detach()
    (finding,) = probe.findings
    assert finding.code == "activation_range_violated"
    assert finding.where.op == "relu_1" and finding.where.module == "1"
    assert finding.fields["above"] == int((y > 0.5).sum()) and finding.fields["below"] == 0
    assert finding.fields["observed_max"] == pytest.approx(float(y.max()))
    assert "tl.threshold(trace, within=(0, 0.5))" in finding.remedy
    report = probe.report()
    assert report.status == "found"
    assert report.exits[0].code.startswith("tl.threshold(")


def test_ranges_accumulate_over_captures_per_declared_selector_until_reset() -> None:
    model = relu_model()
    probe = tl.debug.RangeProbe({tl.func("relu"): (0.0, 6.0), tl.func("linear"): (-0.1, 0.1)})
    xs = [torch.randn(4, 8), torch.randn(4, 8) * 3]
    for x in xs:
        tl.trace(model, x, capture=hooks(probe))
    linear = next(s for s in probe.stats if s.label == "linear_1")
    outs = [model[0](x).detach() for x in xs]
    assert linear.calls == 2 and linear.numel == 128
    assert linear.below == sum(int((o < -0.1).sum()) for o in outs)
    assert linear.observed_max == pytest.approx(max(float(o.max()) for o in outs))
    probe.reset()
    assert probe.stats == () and probe.report().status == "no_sites"


class LogOf(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log(x)


def test_nan_lies_in_no_range_and_the_report_stays_json_safe() -> None:
    probe = tl.debug.RangeProbe({tl.func("log"): (-10.0, 10.0)})
    tl.trace(LogOf(), torch.tensor([[-1.0, -2.0]]), capture=hooks(probe))  # log(<0) = nan
    (stat,) = probe.stats
    assert (stat.nonfinite, stat.below, stat.above) == (2, 0, 0)
    assert math.isnan(stat.observed_min) and math.isnan(stat.observed_max)
    report = probe.report()
    json.dumps(report.to_dict(), allow_nan=False)
    assert report.card().splitlines()[1] == (
        "  WARNING  activation_range_violated: log_1: 0 values < -10 and 0 > 10, 2 non-finite "
        "over 1 call(s) (observed [nan, nan]). (log_1)"
    )
    assert len(report.card().splitlines()) <= 12


@pytest.mark.parametrize(
    "bounds",
    [
        {},
        {"relu": (0, 1)},
        {tl.func("relu"): (1.0, 0.0)},
        {tl.func("relu"): (0.0, math.nan)},
        {tl.func("relu"): ("0", 1)},
        {tl.func("relu"): (0.0,)},
    ],
    ids=["empty", "string-key", "low-above-high", "nan-bound", "string-bound", "one-bound"],
)
def test_bad_range_declarations_raise_a_typed_error(bounds) -> None:
    with pytest.raises(DiagnosticArgumentError, match="RangeProbe"):
        tl.debug.RangeProbe(bounds)


def test_liveness_counts_zeros_and_running_maxima_exactly() -> None:
    model = relu_model()
    with torch.no_grad():
        model[0].bias[:3] = -100.0  # units 0-2 cannot fire on these inputs
    xs = [torch.randn(4, 8), torch.randn(4, 8)]
    probe = tl.debug.LivenessProbe([tl.func("relu")])
    for x in xs:
        tl.trace(model, x, capture=hooks(probe))
    with torch.no_grad():
        ys = [model(x) for x in xs]
    (stat,) = probe.stats
    assert stat.calls == 2 and stat.numel == 128
    assert stat.zero_fraction == sum(int((y == 0).sum()) for y in ys) / 128
    assert stat.running_max == max(float(y.max()) for y in ys)
    assert (stat.unit_dim, stat.units, stat.units_all_zero) == (1, 16, 3)
    (finding,) = probe.findings
    assert finding.code == "units_zero_so_far" and finding.fields["units_all_zero"] == 3


def test_liveness_never_says_dead() -> None:
    model = relu_model()
    with torch.no_grad():
        model[0].bias[:3] = -100.0
    probe = tl.debug.LivenessProbe([tl.func("relu")])
    tl.trace(model, torch.randn(4, 8), capture=hooks(probe))
    report = probe.report()
    words = json.dumps(
        {
            "findings": report.to_dict()["findings"],
            "tables": report.to_dict()["tables"],
            "lead": report.lead,
            "stats": repr(probe.stats),
            "disclosures": report.disclosures,
        }
    )
    assert probe.findings and "dead" not in words.lower()


@pytest.mark.parametrize(
    ("shape", "unit_dim", "units"),
    [
        ((4, 16), 1, 16),
        ((2, 5, 16), 2, 16),
        ((2, 3, 4, 4), 1, 3),
    ],
    ids=["features", "tokens-features", "channels"],
)
def test_the_default_unit_axis_follows_the_layout(shape, unit_dim, units) -> None:
    probe = tl.debug.LivenessProbe([tl.func("relu")])
    tl.trace(nn.ReLU(), torch.randn(*shape), capture=hooks(probe))
    (stat,) = probe.stats
    assert (stat.unit_dim, stat.units) == (unit_dim, units)


def test_liveness_takes_only_selectors() -> None:
    with pytest.raises(DiagnosticArgumentError, match="LivenessProbe takes selectors"):
        tl.debug.LivenessProbe(["relu"])
    with pytest.raises(DiagnosticArgumentError, match="at least one selector"):
        tl.debug.LivenessProbe([])


def test_liveness_report_with_nan_is_json_safe_and_its_card_bounded() -> None:
    probe = tl.debug.LivenessProbe([tl.func("log")])
    tl.trace(LogOf(), torch.tensor([[-1.0, math.inf]]), capture=hooks(probe))  # nan, inf
    (stat,) = probe.stats
    assert math.isnan(stat.running_max) and stat.zero_fraction == 0.0
    report = probe.report()
    json.dumps(report.to_dict(), allow_nan=False)
    assert len(report.card().splitlines()) <= 8
