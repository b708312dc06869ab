"""weight_distribution: moments and histograms per parameter, with param_health's verdicts."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import torchlens_nb as tl


def healthy() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4), nn.LayerNorm(4))


def test_fresh_model_passes_with_exact_statistics() -> None:
    model = healthy()
    report = tl.recipes.weight_distribution(model, bins=10)
    assert report.status == "pass" and report.findings == ()
    first = report.params[0]
    weight = model[0].weight.detach().double()
    assert (first.name, first.shape, first.dtype) == ("0.weight", (16, 8), "float32")
    assert first.stats.mean == pytest.approx(float(weight.mean()))
    assert first.stats.std == pytest.approx(float(weight.std()))
    assert sum(first.histogram.counts) == 128 and len(first.histogram.edges) == 11
    # LayerNorm's constant weight (ones) and bias (zeros) are canonical: not flagged
    assert [p.verdict for p in report.params[-2:]] == ["ok", "ok"]


def test_planted_bad_weights_are_each_flagged() -> None:
    model = healthy()
    with torch.no_grad():
        model[0].weight.zero_()  # all-zero weight matrix
        model[2].weight[0, 0] = float("nan")  # one NaN
        model[2].bias.fill_(500.0)  # huge values
        model[3].weight.copy_(torch.tensor([1.0, 1.0, 1.0, 1.0 + 1e-9]))
    report = tl.recipes.weight_distribution(model)
    assert {p.name: p.verdict for p in report.params} == {
        "0.weight": "all_zero",
        "0.bias": "ok",
        "2.weight": "nonfinite",
        "2.bias": "huge",
        "3.weight": "ok",
        "3.bias": "ok",
    }
    assert [f.code for f in report.findings] == [
        "param_nonfinite",
        "suspicious_fill",
        "weights_huge",
    ]
    assert report.status == "fail"


def test_collapsed_and_unusual_scales() -> None:
    layer = nn.Linear(4, 4)
    with torch.no_grad():
        layer.weight.copy_(0.5 + 1e-8 * torch.arange(16.0).reshape(4, 4))
    collapsed = tl.recipes.weight_distribution(layer)
    assert collapsed.params[0].verdict == "collapsed"
    assert collapsed.findings[0].code == "weights_collapsed"
    with torch.no_grad():
        layer.weight.normal_(0, 5.0, generator=torch.Generator().manual_seed(0))
    wide = tl.recipes.weight_distribution(layer)
    assert [(f.code, f.severity) for f in wide.findings] == [("weights_unusual_scale", "info")]


def test_weight_figure_draws_one_histogram_per_parameter() -> None:
    fig = tl.recipes.weight_distribution(healthy()).figure(max_params=2)
    assert len(fig.data) == 2 and fig.layout.title.text == "Weight histograms (2 of 6)"
