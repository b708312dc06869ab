"""grad_health over ``torch.utils.checkpoint``: the reentrant form runs the checkpointed blocks
without autograd in the forward (inside a custom ``autograd.Function``), so their gradients are
never recorded. The report says so (an ``unavailable`` entry, a card line) and is never clean;
the non-reentrant form records them and finds the frontier."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import torchlens_nb as tl
from tests.models import Checkpointed
from torchlens_nb.options import CaptureOptions


def _report(model: nn.Module, x: torch.Tensor) -> tl.report.GradHealthReport:
    trace = tl.trace(model, x, capture=CaptureOptions(save_grads=True))
    trace.backward(trace.output.square().mean())
    return tl.debug.grad_health(trace)


def test_reentrant_checkpoint_is_not_clean_when_only_the_head_was_read(batch) -> None:
    x = batch.clone().requires_grad_()
    report = _report(Checkpointed(use_reentrant=True, stem=False), x)
    # 10 ops (5 x linear + relu) ran under no_grad inside CheckpointFunction; 1 row: the head.
    assert report.to_pandas().op.tolist() == ["linear_6"]
    assert report.status == "unknown"
    assert report.lead == (
        "no gradient is flagged among the 1 read, but 10 ops ran inside a custom "
        "autograd.Function and their gradients were not recorded."
    )
    (missing,) = report.unavailable
    assert missing.code == "gradients_not_recorded"
    assert missing.reason == (
        "10 ops (linear_1, relu_1, linear_2 and 7 more; in blocks.0.0, blocks.0.1 and 8 more) "
        "ran in a custom autograd.Function, so their gradients were not recorded. With "
        "torch.utils.checkpoint, pass use_reentrant=False."
    )
    assert f"  NOT CHECKED grad_health: {missing.reason}" in report.card().splitlines()
    assert report.to_pandas().attrs["unrecorded_ops"][:3] == ["linear_1", "relu_1", "linear_2"]


def test_reentrant_checkpoint_names_no_false_frontier_upstream_of_the_blocks(batch) -> None:
    report = _report(Checkpointed(use_reentrant=True), batch)
    frame = report.to_pandas().set_index("op")
    # The stem's gradient is zero (block 2 kills it), but the blocks in between went unread:
    # the stem is where the zero is SEEN, not where it begins.
    assert frame.verdict.to_dict() == {"linear_1": "zero", "linear_7": "ok"}
    assert report.frontier == ()
    assert not frame.is_frontier.any()
    assert report.status == "found"
    (hidden,) = report.findings
    assert (hidden.code, hidden.where.op, hidden.fields["verdict"]) == (
        "gradient_frontier_hidden",
        "linear_1",
        "zero",
    )
    assert hidden.message == (
        "the zero gradient reaches linear_1 from 1 consumer whose gradient was not recorded "
        "(linear_2, inside a custom autograd.Function): the frontier may lie downstream of it."
    )
    assert [u.code for u in report.unavailable] == ["gradients_not_recorded"]


@pytest.mark.parametrize("stem", [True, False], ids=["stem", "input-requires-grad"])
def test_non_reentrant_checkpoint_is_read_and_finds_the_dead_block(batch, stem: bool) -> None:
    x = batch if stem else batch.clone().requires_grad_()
    report = _report(Checkpointed(use_reentrant=False, stem=stem), x)
    assert report.status == "found"
    assert [report.table().dicts()[0]["op"], *report.frontier] == [
        "linear_1",
        "linear_4" if stem else "linear_3",  # block 2's Linear
    ]
    assert report.unavailable == ()
    assert report.to_pandas().attrs["unrecorded_ops"] == []
