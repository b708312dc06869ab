"""trace.audit(): what one capture supports runs; everything else is skipped with a reason."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import torchlens_nb as tl
from tests.models import Checkpointed, five_block_mlp
from torchlens_nb.errors import ForwardError
from torchlens_nb.options import CaptureOptions

NEVER_RUN = ["compare", "check_determinism", "bisect_precision", "lineage", "dead_neurons"]


def skipped(report) -> dict[str, str]:
    return {item.check: item.reason for item in report.skipped}


def test_a_forward_only_trace_runs_the_value_checks() -> None:
    report = tl.trace(nn.ReLU(), torch.tensor([[-1.0, 2.0]])).audit()
    assert report.checks_run == ("find_nan", "bisect_nan", "dtype_range")
    assert list(skipped(report)) == ["grad_health", "bisect_nan_backward", *NEVER_RUN]
    assert skipped(report)["grad_health"] == (
        "needs gradients: capture with CaptureOptions(save_grads=True) and call "
        "trace.backward(loss)."
    )
    assert not set(report.checks_run) & set(skipped(report))
    assert (report.status, report.lead) == ("clean", "3 checks ran clean; 7 skipped.")


def test_one_backward_adds_the_gradient_checks_and_finds_the_dead_block(dead_trace) -> None:
    report = dead_trace.audit()
    assert report.checks_run == (
        "find_nan",
        "bisect_nan",
        "dtype_range",
        "grad_health",
        "bisect_nan_backward",
    )
    assert report.status == "found"
    assert report.lead == "grad_health found problems; 5 checks ran, 5 skipped."
    frontier = [f for f in report.findings if f.code == "gradient_frontier"]
    assert [(f.where.op, f.fields["check"]) for f in frontier] == [("linear_3", "grad_health")]
    opened = report.run_action("open", check="grad_health")
    assert (opened.report_type, opened.frontier) == ("grad_health", ("linear_3",))


def test_several_backward_passes_need_a_bwd_selection(batch) -> None:
    trace = tl.trace(five_block_mlp(), batch, capture=CaptureOptions(save_grads=True))
    loss = trace.output.square().mean()
    trace.backward(loss, retain_graph=True)
    trace.backward(loss)
    report = trace.audit()
    assert "grad_health" not in report.checks_run
    assert skipped(report)["grad_health"] == (
        "this trace has 2 backward passes and needs a bwd= selection: "
        "tl.debug.grad_health(trace, bwd=N), N in 0..1."
    )


def test_a_selective_save_skips_bisect_nan(batch) -> None:
    report = tl.trace(five_block_mlp(), batch, save=tl.func("relu")).audit()
    assert report.checks_run == ("find_nan", "dtype_range")
    assert skipped(report)["bisect_nan"].startswith("needs a full-coverage trace (save=True)")


def test_a_partial_trace_is_audited_and_never_clean() -> None:
    class Crash(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = torch.log(x)
            raise RuntimeError(f"shape mismatch after {tuple(y.shape)}")

    with pytest.raises(ForwardError) as raised:
        tl.trace(Crash(), torch.ones(2))
    report = raised.value.partial_trace.audit()
    assert report.checks_run == ("find_nan", "bisect_nan", "dtype_range")
    assert report.status == "partial"
    assert report.disclosures == (
        "partial trace: the forward stopped (RuntimeError) after 2 ops; only those were audited.",
    )


def test_a_nan_is_found_and_each_finding_names_its_check() -> None:
    class Bad(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.log(x - 2.0)

    report = tl.trace(Bad(), torch.ones(2)).audit()
    assert report.status == "found"
    assert {f.fields["check"] for f in report.findings} == {"find_nan", "bisect_nan", "dtype_range"}
    assert [o.status for o in report.outcomes] == ["found", "found", "found"]


def test_what_a_check_could_not_see_reaches_the_audit(batch) -> None:
    x = batch.clone().requires_grad_()
    trace = tl.trace(
        Checkpointed(use_reentrant=True, stem=False), x, capture=CaptureOptions(save_grads=True)
    )
    trace.backward(trace.output.square().mean())
    report = trace.audit()
    assert report.status == "partial"
    assert "grad_health (unknown)" in report.lead
    (note,) = [d for d in report.disclosures if d.startswith("grad_health")]
    assert note.startswith("grad_health could not see everything: 10 ops (linear_1, relu_1")
