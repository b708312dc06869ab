"""Loss scaling: without a known scale magnitude verdicts are unknown, never a silent pass."""

from __future__ import annotations

import contextlib

import pytest
import torch
from torch import nn

import torchlens_nb as tl
from tests.models import five_block_mlp, traced_backward
from torchlens_nb.errors import DiagnosticArgumentError
from torchlens_nb.options import CaptureOptions

AUTOCAST = {
    "fp32": contextlib.nullcontext,
    "bf16-autocast": lambda: torch.autocast("cpu", dtype=torch.bfloat16),
}


def scaled_and_plain(model: nn.Module, batch: torch.Tensor, precision: str):
    """The same forward twice: once backward on the loss, once on ``scaler.scale(loss)``."""
    scaler = torch.amp.GradScaler("cpu")
    with AUTOCAST[precision]():
        plain = traced_backward(model, batch)
        scaled = traced_backward(model, batch, scale=scaler.scale)
    return plain, scaled, scaler


@pytest.mark.parametrize("precision", list(AUTOCAST))
def test_gradscaler_without_grad_scale_gives_unknown_magnitudes(batch, precision) -> None:
    _, scaled, _ = scaled_and_plain(five_block_mlp(dead_block=None), batch, precision)
    report = tl.debug.grad_health(scaled)
    frame = report.to_pandas()
    assert set(frame.verdict) == {"unknown"}
    assert frame.grad_norm.isna().all()
    assert set(frame.scale_provenance) == {"unknown"}
    assert set(frame.stage) == {"pre_clip_scaled"}
    assert report.status == "unknown"
    (finding,) = report.findings
    assert finding.code == "grad_scale_unknown"
    assert finding.fields["evidence"] == (
        "the loss was multiplied by 65536 (MulBackward0) right before backward"
    )


@pytest.mark.parametrize("precision", list(AUTOCAST))
def test_grad_scale_unscales_to_the_unscaled_run(batch, precision) -> None:
    plain, scaled, scaler = scaled_and_plain(five_block_mlp(), batch, precision)
    expected = tl.debug.grad_health(plain).to_pandas()
    got = tl.debug.grad_health(scaled, grad_scale=scaler.get_scale()).to_pandas()
    # 65536 is a power of two: scaling and unscaling are exact, so the norms are equal bitwise.
    assert got.grad_norm.tolist() == expected.grad_norm.tolist()
    assert got.verdict.tolist() == expected.verdict.tolist()
    assert got.is_frontier.tolist() == expected.is_frontier.tolist()
    assert (got.grad_norm_raw == expected.grad_norm_raw * 65536).all()
    assert set(got.scale_provenance) == {"explicit"}
    assert got.attrs["grad_scale"] == 65536.0


def test_zero_needs_no_scale_so_the_dead_block_is_still_found(batch) -> None:
    _, scaled, _ = scaled_and_plain(five_block_mlp(), batch, "fp32")
    report = tl.debug.grad_health(scaled)
    assert report.frontier == ("linear_3",)
    assert dict(report.verdict_counts) == {
        "ok": 0,
        "zero": 5,
        "vanishing": 0,
        "exploding": 0,
        "unknown": 6,
    }


def test_the_scaler_itself_or_a_per_pass_mapping(batch) -> None:
    _plain, scaled, scaler = scaled_and_plain(five_block_mlp(), batch, "fp32")
    by_scaler = tl.debug.grad_health(scaled, grad_scale=scaler).to_pandas()
    by_map = tl.debug.grad_health(scaled, grad_scales={0: 65536.0}).to_pandas()
    assert set(by_scaler.scale_provenance) == {"gradscaler"}
    assert by_scaler.grad_norm.tolist() == by_map.grad_norm.tolist()


def test_grad_scales_stamps_one_pass_only(batch) -> None:
    trace = tl.trace(five_block_mlp(), batch, capture=CaptureOptions(save_grads=True))
    loss = trace.output.square().mean()
    trace.backward(loss, retain_graph=True)
    trace.backward(loss * 1024.0)
    stamps = {1: 1024.0}
    first = tl.debug.grad_health(trace, bwd=0, grad_scales=stamps).to_pandas()
    second = tl.debug.grad_health(trace, bwd=1, grad_scales=stamps).to_pandas()
    assert set(first.scale_provenance) == {"unscaled"}
    assert set(second.scale_provenance) == {"explicit"}
    assert second.grad_norm.tolist() == first.grad_norm.tolist()


@pytest.mark.parametrize(
    ("loss_of", "evidence"),
    [
        (
            lambda loss: loss / 4,
            "the loss was multiplied by 0.25 (DivBackward0) right before backward",
        ),
        (
            lambda loss: loss * 3.0,
            "the loss was multiplied by 3 (MulBackward0) right before backward",
        ),
    ],
    ids=["divided", "weighted"],
)
def test_any_constant_factor_at_the_root_is_scaling_evidence(batch, loss_of, evidence) -> None:
    trace = traced_backward(five_block_mlp(), batch, scale=loss_of)
    report = tl.debug.grad_health(trace)
    assert report.scale_provenance == "unknown"
    assert report.findings[-1].fields["evidence"] == evidence
    declared = tl.debug.grad_health(trace, grad_scale=1.0)  # "classify them as recorded"
    assert (declared.scale_provenance, declared.stage) == ("explicit", "pre_clip_unscaled")
    assert "unknown" not in declared.to_pandas().verdict.tolist()


def test_a_seed_other_than_one_is_scaling_evidence(batch) -> None:
    trace = tl.trace(five_block_mlp(), batch, capture=CaptureOptions(save_grads=True))
    trace.backward(trace.output.square().mean(), gradient=torch.tensor(8.0))
    report = tl.debug.grad_health(trace)
    assert report.scale_provenance == "unknown"
    assert report.findings[-1].fields["evidence"] == (
        "trace.backward was seeded with gradient= values other than 1"
    )


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"grad_scale": 0.0}, "grad_scale must be finite and > 0, got 0.0"),
        ({"grad_scale": float("nan")}, "grad_scale must be finite and > 0"),
        ({"grad_scale": "65536"}, "grad_scale must be a number or a GradScaler, got str"),
        ({"grad_scale": 2.0, "grad_scales": {0: 2.0}}, "not both"),
        ({"grad_scales": {3: 2.0}}, r"grad_scales keys are backward indices 0..0, got 3"),
        ({"grad_scales": [2.0]}, "grad_scales must be a mapping"),
    ],
    ids=["zero", "nan", "text", "both", "key", "list"],
)
def test_bad_scales_raise_a_typed_error(dead_trace, kwargs, match) -> None:
    with pytest.raises(DiagnosticArgumentError, match=match):
        tl.debug.grad_health(dead_trace, **kwargs)
