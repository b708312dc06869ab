"""Intentional infinities (masks, sentinels) are not NaN origins; real NaN/Inf origins still are.

A NaN is always a finding; an Inf only when it reaches the model output or a NaN, and then the
origin is the first op on that path. A -inf that softmax, an integer cast or another consumer
neutralises is disclosed as "by design", never the headline (issue 23).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

import torchlens_nb as tl

from . import masked_models
from .masked_models import (
    CausalDecoder,
    DecoderThenNaN,
    FullyMaskedRow,
    LogOfNegativeHead,
    MaskedFillAttention,
    NaNWeightBehindMask,
    X,
    t5_inputs,
    tiny_t5,
)
from .nan_models import LogOfZero, Net, line_of
from .nan_models import X as X2
from .test_forward_origin import forward_reports

MASKED: list[Any] = [
    # (model factory, inputs, where the -inf is born, how many outputs hold it)
    # the causal mask full_1 -> triu_1, and nn.TransformerDecoder's own causal-mask probe
    # full_2 -> triu_2 (compared with eq: a bool)
    pytest.param(lambda: CausalDecoder().eval(), X, ("full_1", "full_2"), 4, id="decoder"),
    # T5's relative-position bucket: log(0) = -inf, then / log(..), * 8, cast to long: 3 each
    pytest.param(tiny_t5, t5_inputs(), ("log_1", "log_2"), 6, id="hf-t5"),
    pytest.param(MaskedFillAttention, X, ("masked_fill_1",), 1, id="masked-fill"),
]


@pytest.mark.parametrize(("make", "inputs", "births", "holders"), MASKED)
def test_a_neutralised_infinity_is_disclosed_not_reported(
    make: Callable[[], nn.Module], inputs: Any, births: tuple[str, ...], holders: int
) -> None:
    torch.manual_seed(0)
    model = make()
    args, kwargs = tl.capture.call_arguments(inputs)
    output = model(*args, **kwargs)
    tensors = list(tl.capture.iter_tensors(output))
    assert tensors and all(bool(torch.isfinite(t).all()) for t in tensors)  # finite output
    for name, report in forward_reports(model, inputs).items():
        assert (report.status, report.found, report.first_bad_thing) == ("clean", False, None), name
        assert report.intentional_infinities == births, name
        assert report.num_intentional == holders, name
        note = next(d for d in report.disclosures if "by design" in d)
        assert note.startswith(f"{holders} op"), name
        assert f"born at {births[0]}" in note and note.endswith(
            "none of it reaches the model output or a NaN."
        ), name
        assert report.lead.endswith("(all checked), and no Inf reaches the output."), name


def test_the_decoder_disclosure_names_the_mask_and_what_neutralised_it() -> None:
    report = tl.debug.nonfinite_origin(CausalDecoder().eval(), X)
    assert report.disclosures[1] == (
        "4 ops hold -inf by design (born at full_1, full_2 in decoder; neutralised by eq_1, "
        "multi_head_attention_forward_1, multi_head_attention_forward_3); none of it reaches "
        "the model output or a NaN."
    )


def test_the_live_find_nan_runs_past_a_mask_to_the_end() -> None:
    model = CausalDecoder().eval()
    report = tl.debug.find_nan(model, X)
    # today's run would stop at full_1, op 2 of 47
    assert (report.is_stopped_early, report.num_ops) == (False, len(tl.trace(model, X)))


def test_a_real_nan_born_after_the_mask_is_named_at_its_log() -> None:
    torch.manual_seed(0)
    model = DecoderThenNaN().eval()
    line = line_of(LogOfNegativeHead.forward, "torch.log(shifted)")
    for name, report in forward_reports(model, X).items():
        origin = report.first_bad_thing
        assert (report.status, report.kind) == ("found", "nan"), name
        assert (origin.op, origin.func, origin.module, origin.line) == (
            "log_1",
            "log",
            "head",
            line,
        )
        assert origin.file == masked_models.__file__ and origin.is_proven, name
        assert report.intentional_infinities == ("full_1", "full_2"), name
    report = tl.debug.nonfinite_origin(model, X)
    assert (report.num_nonfinite, report.num_propagated, report.reaches_output) == (2, 1, True)
    live = tl.debug.find_nan(model, X)
    assert live.is_stopped_early and live.num_ops == len(tl.trace(model, X)) - 1  # mul never ran


class DivideByZero(nn.Module):
    def forward(self, h: torch.Tensor) -> torch.Tensor:
        zeros = h - h
        return h / zeros  # 0.5 / 0 = inf, 3 / 0 = inf


class Float16OverflowToNaN(nn.Module):
    def forward(self, h: torch.Tensor) -> torch.Tensor:
        big = h.half() * 60000.0  # 3 * 60000 > 65504 -> inf
        return (big - big).float()  # inf - inf = nan


@pytest.mark.parametrize(
    ("block", "label", "text", "kind"),
    [
        pytest.param(DivideByZero, "div_1", "h / zeros", "inf", id="x-over-zero"),
        pytest.param(Float16OverflowToNaN, "mul_1", "h.half() * 60000.0", "inf", id="fp16-to-nan"),
        pytest.param(LogOfZero, "log_1", "torch.log(shifted)", "-inf", id="log-of-zero"),
    ],
)
def test_an_infinity_that_reaches_the_output_or_a_nan_is_found_at_its_birth(
    block: type[nn.Module], label: str, text: str, kind: str
) -> None:
    line = line_of(block.forward, text)
    for name, report in forward_reports(Net(block()), X2).items():
        origin = report.first_bad_thing
        assert (report.status, report.kind, origin.op, origin.line) == ("found", kind, label, line)
        assert origin.module == "block" and origin.is_proven, name
        assert report.intentional_infinities == (), name


def test_an_fp16_overflow_that_becomes_nan_says_where() -> None:
    report = tl.debug.nonfinite_origin(Net(Float16OverflowToNaN()), X2)
    propagation = next(f for f in report.findings if f.code == "propagation")
    assert "it becomes NaN at sub_1" in propagation.message  # big - big
    assert report.amp_hint.startswith("mul_1 computes in float16")
    live = tl.debug.find_nan(Net(Float16OverflowToNaN()), X2)
    assert live.lead.endswith("the run stopped at the first NaN (sub_1), after 5 ops.")


def test_a_mask_that_hides_a_whole_row_is_the_origin_of_the_nan() -> None:
    report = tl.debug.nonfinite_origin(FullyMaskedRow(), X)
    line = line_of(FullyMaskedRow.forward, 'mask[0] = float("-inf")')
    assert (report.origin.op, report.origin.kind, report.origin.line) == ("setitem_1", "-inf", line)
    # softmax of a row of -inf is nan: the -inf reaches a NaN, so it matters
    assert "it becomes NaN at softmax_1" in report.findings[-1].message
    assert report.intentional_infinities == ()


def test_a_nan_weight_behind_a_causal_mask_is_named_with_per_birth_counts() -> None:
    torch.manual_seed(0)
    model = NaNWeightBehindMask()
    with torch.no_grad():
        model.late.qkv.weight[0, 0] = float("nan")
    report = tl.debug.nonfinite_origin(model, X)
    assert (report.origin.op, report.origin.module) == ("linear_3", "late.qkv")
    assert report.nonfinite_params == ("late.qkv.weight",)
    assert report.findings[0].code == "nonfinite_parameter"
    # chunk_2 (q), matmul_3, div_2, masked_fill_2, softmax_2, matmul_4, late.out, fc: 8
    # (k = transpose_2 stays finite); the early block's -inf mask is not counted
    assert (report.num_propagated, report.num_nonfinite, report.reaches_output) == (8, 9, True)
    assert report.lead.endswith("8 downstream ops propagate it.")
    assert report.intentional_infinities == ("masked_fill_1",)
    assert tl.debug.find_nan(model, X).op == "linear_3"


def test_a_parameter_read_downstream_of_the_origin_is_named_too() -> None:
    torch.manual_seed(0)
    model = NaNWeightBehindMask()
    with torch.no_grad():
        model.late.qkv.weight[0, 0] = float("nan")
        model.fc.bias[0] = float("inf")
    report = tl.debug.nonfinite_origin(model, X)
    assert report.nonfinite_params == ("late.qkv.weight", "fc.bias")
    elsewhere = next(f for f in report.findings if f.code == "nonfinite_parameters")
    assert elsewhere.fields["params"] == ("fc.bias",)


def test_an_infinity_alive_when_the_forward_raised_is_not_dismissed() -> None:
    class RaisesOnInf(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = torch.log(x - 0.5)  # log(0) = -inf
            raise ValueError(f"inf seen: {bool(torch.isinf(y).any())}")

    report = tl.debug.nonfinite_origin(RaisesOnInf(), X2)
    # nothing consumed the -inf before the raise: it may have reached the output
    assert (report.status, report.origin.op, report.intentional_infinities) == (
        "found",
        "log_1",
        (),
    )
    assert any("reaches the output is not known" in d for d in report.disclosures)


def test_dtype_range_and_audit_follow_the_same_rule() -> None:
    trace = tl.trace(CausalDecoder().eval(), X)
    report = tl.debug.dtype_range(trace)
    assert [f.code for f in report.findings if f.code == "nonfinite_values"] == []
    flags = {row["op"]: row["flags"] for row in report.table().dicts()}
    assert flags["full_1"] == flags["triu_1"] == ("intentional_inf",)
    assert report.table().attrs["num_intentional"] == 4
    assert any("4 ops hold -inf by design" in d for d in report.disclosures)
    audit = trace.audit()
    assert (audit.status, audit.findings) == ("clean", ())
    # and a real NaN after the mask is still found by every check of the audit that reads values
    found = tl.trace(DecoderThenNaN().eval(), X).audit()
    assert {o.check for o in found.outcomes if o.status == "found"} == {
        "find_nan",
        "bisect_nan",
        "dtype_range",
    }


class SqrtOfClampedZero(nn.Module):
    """Finite forward; sqrt's gradient at 0 is inf, and clamp's backward zeroes it (h > 0)."""

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return torch.sqrt(torch.clamp(h, max=0.0))


def test_an_inf_gradient_healed_before_every_parameter_is_not_a_backward_birth() -> None:
    trace = tl.trace(
        Net(SqrtOfClampedZero()), X2, capture=tl.options.CaptureOptions(save_grads=True)
    )
    trace.backward(trace.output.sum())
    report = tl.debug.bisect_nan_backward(trace)
    ledger = {row.node: row.transition for row in report.transitions}
    assert (ledger["SqrtBackward0"], ledger["ClampBackward1"]) == ("birth", "healed")
    assert (report.status, report.found, report.first_bad_thing) == ("clean", False, None)
    assert report.neutralised_births == (
        next(r.order for r in report.transitions if r.node == "SqrtBackward0"),
    )
    assert report.lead == (
        f"no NaN, and no Inf that reaches a parameter gradient, in the {len(report.transitions)} "
        "grad_fn fires (all checked)."
    )
    assert any("healed before any parameter gradient" in d for d in report.disclosures)
