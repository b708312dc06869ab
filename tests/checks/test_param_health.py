"""``tl.debug.param_health``: one batched scan of a module or any name -> tensor mapping."""

from __future__ import annotations

import json
import math

import pytest
import torch
from torch import nn

import torchlens_nb as tl
from tests import models


def test_fresh_model_is_clean_with_full_coverage() -> None:
    audit = tl.debug.param_health(models.small_cnn())
    assert audit.status == "clean" and audit.findings == ()
    # conv 108 + 4, bn 4 + 4, head 8 + 2, buffers 4 + 4 + 1 = 139 elements
    assert [r.name for r in audit.rows] == [
        "conv.weight",
        "conv.bias",
        "bn.weight",
        "bn.bias",
        "head.weight",
        "head.bias",
        "bn.running_mean",
        "bn.running_var",
        "bn.num_batches_tracked",
    ]
    assert audit.coverage["fraction"] == 1.0 and audit.coverage["elements_total"] == 139
    assert audit.row("bn.weight").fill == "all_same"  # ones: a 1-D init, no finding
    assert audit.checks_run == ("nonfinite", "dtype_headroom", "subnormal", "fill")


def test_signed_nonfinite_counts_bounds_headroom_subnormal_and_fill() -> None:
    tiny = torch.finfo(torch.float32).tiny
    state = {
        "w": torch.tensor([[math.nan, math.inf], [-math.inf, -math.inf]]),
        "near_max": torch.tensor([60000.0, 1.0], dtype=torch.float16),
        "sub": torch.tensor([tiny / 4, tiny / 8, 1.0, 2.0]),
        "zeros": torch.zeros(3, 2),
        "bounded": torch.tensor([-2.0, 0.5, 3.0]),
    }
    audit = tl.debug.param_health(state, bounds={"bounded": (-1.0, 1.0)})
    codes = [(f.code, f.fields["tensor"]) for f in audit.findings]
    assert ("param_nonfinite", "w") in codes
    w = next(f for f in audit.findings if f.code == "param_nonfinite")
    assert (w.fields["nan_count"], w.fields["posinf_count"], w.fields["neginf_count"]) == (1, 1, 2)
    headroom = next(f for f in audit.findings if f.code == "dtype_headroom_low")
    assert headroom.fields["tensor"] == "near_max"
    assert headroom.fields["headroom_fraction"] == pytest.approx(60000 / 65504)
    assert ("subnormal_heavy", "sub") in codes  # 2 of 4 values > 0.1
    assert ("suspicious_fill", "zeros") in codes
    assert audit.row("bounded").out_of_bounds_count == 2
    assert ("param_out_of_bounds", "bounded") in codes
    assert audit.status == "found"
    json.dumps(audit.to_dict(), allow_nan=False)
    assert len(audit.card().splitlines()) <= 12


@pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor")
def test_skipped_rows_keep_their_reason_and_coverage_is_honest() -> None:
    state = {
        "meta": torch.empty(10, device="meta"),
        "sparse": torch.eye(3).to_sparse(),
        "quantized": torch.quantize_per_tensor(torch.ones(4), 0.1, 0, torch.qint8),
        "grad": None,
        "step": 3,
        "dense": torch.ones(5, 1) * torch.arange(5.0).reshape(5, 1),
    }
    audit = tl.debug.param_health(state)
    assert {r.name: r.skip_reason for r in audit.skipped} == {
        "meta": "meta",
        "sparse": "sparse",
        "quantized": "quantized",
        "grad": "none",
        "step": "not_a_tensor",
    }
    # scanned 5 of 10 + 9 + 4 + 5 elements
    assert audit.coverage["elements_scanned"] == 5 and audit.coverage["elements_total"] == 28
    assert audit.status == "incomplete"
    assert {u.code for u in audit.unavailable} == {
        "skipped_meta",
        "skipped_sparse",
        "skipped_quantized",
        "skipped_none",
        "skipped_not_a_tensor",
    }


def test_within_and_nested_checkpoint_mappings() -> None:
    model = models.mlp()
    checkpoint = {"model": model.state_dict(), "epoch": 3}
    audit = tl.debug.param_health(checkpoint, within="model.0")
    assert [r.name for r in audit.rows] == ["model.0.weight", "model.0.bias"]
    buffers = tl.debug.param_health(models.small_cnn(), include_buffers=False, within="*.bias")
    assert [r.name for r in buffers.rows] == ["conv.bias", "bn.bias", "head.bias"]


def test_rows_core_matches_the_report_and_frame() -> None:
    model = models.mlp()
    rows, attrs = tl.debug.param_health_rows(model)
    audit = tl.debug.param_health(model)
    assert tuple(rows) == audit.rows
    frame = audit.to_pandas()
    assert list(frame["name"]) == ["0.weight", "0.bias", "2.weight", "2.bias"]
    assert frame.attrs["tensors_scanned"] == attrs["tensors_scanned"] == 4


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"max_fraction": 0.0}, "max_fraction"),
        ({"subnormal_fraction_threshold": 2.0}, "subnormal_fraction_threshold"),
        ({"bounds": (1.0, -1.0)}, "low < high"),
        ({"within": ""}, "within"),
    ],
    ids=["max_fraction", "subnormal", "bounds", "within"],
)
def test_invalid_arguments_are_refused_before_any_read(kwargs, match) -> None:
    with pytest.raises(tl.errors.DiagnosticArgumentError, match=match):
        tl.debug.param_health(nn.Linear(2, 2), **kwargs)


def test_a_list_is_refused_with_the_spelling_that_works() -> None:
    with pytest.raises(tl.errors.DiagnosticArgumentError, match="dict\\(enumerate"):
        tl.debug.param_health([torch.ones(2)])


def test_session_param_scan_uses_the_same_rules_at_the_step_site() -> None:
    model = models.mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    session = tl.debug.ChecksSession(model, optimizer, scaler=None)
    session.register_param_scan(every=1)
    with session:
        for step in range(3):
            optimizer.zero_grad()
            model(torch.randn(4, 8)).square().mean().backward()
            if step == 1:
                model[2].bias.grad.fill_(math.inf)  # SGD writes -inf into 2.bias
            optimizer.step()
    report = session.report()
    first_seen = {f.fields["tensor"]: f.fields["first_attempt"] for f in report.findings}
    # attempt 1 wrote the inf; attempt 2's forward saw it and every gradient went NaN
    assert first_seen == {"2.bias": 1, "0.weight": 2, "0.bias": 2, "2.weight": 2}
    assert {f.code for f in report.findings} == {"param_nonfinite"}
    assert report.check("param_scan").evaluations == 3


def test_include_buffers_must_be_a_bool() -> None:
    with pytest.raises(tl.errors.DiagnosticArgumentError, match="include_buffers must be True"):
        tl.debug.param_health(torch.nn.BatchNorm1d(2), include_buffers="yes")
