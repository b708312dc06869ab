"""grad_health: verdicts, the frontier, thresholds, basis and pass selection."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import torchlens_nb as tl
from torchlens_nb.errors import DiagnosticArgumentError, UnavailableError
from torchlens_nb.options import CaptureOptions
from torchlens_nb.report._gradients import GRAD_HEALTH_COLUMNS


def test_frontier_names_exactly_the_dead_block_and_upstream_is_zero(dead_trace) -> None:
    report = tl.debug.grad_health(dead_trace)
    frame = report.to_pandas()
    # Block 2's Linear is linear_3: its ReLU passes no gradient, its consumer relu_3 gets one.
    assert report.frontier == ("linear_3",)
    assert frame[frame.is_frontier].module.tolist() == ["2.0"]
    frontier_index = dead_trace["linear_3"].index
    upstream_params = [
        op.label for op in dead_trace if op.param_names and op.index < frontier_index
    ]
    assert upstream_params == ["linear_1", "linear_2"]
    verdict = dict(zip(frame.op, frame.verdict))
    assert {verdict[label] for label in upstream_params} == {"zero"}
    assert [verdict[op] for op in ("relu_1", "relu_2", "linear_3")] == ["zero"] * 3
    assert {verdict[op.label] for op in dead_trace if op.index > frontier_index} == {"ok"}
    assert report.status == "found"
    assert report.lead == "1 frontier op: linear_3 (zero); 5 of 11 gradients flagged."
    (finding,) = report.findings
    assert (finding.code, finding.where.op, finding.where.module) == (
        "gradient_frontier",
        "linear_3",
        "2.0",
    )
    assert finding.fields["num_upstream_flagged"] == 4  # relu_2, linear_2, relu_1, linear_1
    assert finding.message == (
        "the zero gradient begins at linear_3: none of its consumers "
        "shares it; 4 ops upstream share it too."
    )


def test_healthy_mlp_is_clean_with_no_frontier(healthy_trace) -> None:
    report = tl.debug.grad_health(healthy_trace)
    assert report.status == "clean"
    assert report.frontier == ()
    assert dict(report.verdict_counts) == {
        "ok": 11,
        "zero": 0,
        "vanishing": 0,
        "exploding": 0,
        "unknown": 0,
    }
    assert report.lead == "all 11 gradients are within [1e-07, 10000] (total_norm)."


def test_columns_rms_and_frame_attrs(dead_trace) -> None:
    frame = tl.debug.grad_health(dead_trace).to_pandas()
    assert tuple(frame.columns) == GRAD_HEALTH_COLUMNS
    row = frame.set_index("op").loc["relu_3"]
    assert row.numel == 4 * 8
    assert row.rms == row.grad_norm / math.sqrt(32)
    assert row.grad_norm == row.grad_norm_raw  # unscaled: nothing to divide by
    assert (row.stage, row.scale_provenance) == ("pre_clip_unscaled", "unscaled")
    attrs = frame.attrs
    assert (attrs["bwd"], attrs["vanishing_threshold"], attrs["exploding_threshold"]) == (
        0,
        1e-7,
        1e4,
    )
    assert attrs["coverage"] == {
        "num_rows": 11,
        "num_ops": 12,
        "num_grad_ops": 11,
        "num_not_reached": 0,
    }


def test_rows_core_holds_the_same_facts_as_the_report(dead_trace) -> None:
    rows, attrs = tl.debug.grad_health_rows(dead_trace)
    report = tl.debug.grad_health(dead_trace)
    assert [tuple(r[c] for c in GRAD_HEALTH_COLUMNS) for r in rows] == list(report.table().rows)
    assert {k: report.to_pandas().attrs[k] for k in attrs} == attrs


def test_gradient_norms_match_torch(dead_trace) -> None:
    frame = tl.debug.grad_health(dead_trace).to_pandas().set_index("op")
    for label in ("linear_6", "relu_4", "linear_4"):
        expected = torch.linalg.vector_norm(dead_trace[label].grad).item()
        assert frame.loc[label, "grad_norm"] == pytest.approx(expected, rel=1e-6)


class Mixed(nn.Module):
    """A bf16 layer under autocast, then float32 ops: gradients of both dtypes in one pass."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            hidden = torch.relu(self.fc(x))
        return hidden.float() * 3.0


def test_norms_of_mixed_dtypes_land_on_their_rows(batch) -> None:
    trace = tl.trace(Mixed(), batch, capture=CaptureOptions(save_grads=True))
    trace.backward(trace.output.square().mean())
    dtypes = [str(trace[label].grad.dtype).removeprefix("torch.") for label in trace.labels[1:]]
    assert dtypes == ["bfloat16", "bfloat16", "float32", "float32"]
    for row in tl.debug.grad_health(trace).table().dicts():
        expected = torch.linalg.vector_norm(trace[row["op"]].grad.float()).item()
        assert row["grad_norm"] == pytest.approx(expected, rel=1e-6), row["op"]


class Scaled(nn.Module):
    """linear -> x * factor -> linear: the gradient reaching the first linear is scaled by
    ``factor`` (W2^T @ 1 is O(1)), so 1e-9 makes it vanish and 1e9 makes it explode."""

    def __init__(self, factor: float) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.first, self.second, self.factor = nn.Linear(4, 4), nn.Linear(4, 2), factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(self.first(x) * self.factor)


@pytest.mark.parametrize(
    ("factor", "verdict"), [(1e-9, "vanishing"), (1e9, "exploding")], ids=["vanishing", "exploding"]
)
def test_magnitude_frontier(factor: float, verdict: str) -> None:
    trace = tl.trace(Scaled(factor), torch.ones(3, 4), capture=CaptureOptions(save_grads=True))
    trace.backward(trace.output.sum())
    report = tl.debug.grad_health(trace)
    frame = report.to_pandas().set_index("op")
    assert frame.verdict.to_dict() == {"linear_1": verdict, "mul_1": "ok", "linear_2": "ok"}
    assert report.frontier == ("linear_1",)
    assert report.findings[0].severity == ("critical" if verdict == "exploding" else "warning")


def test_rms_basis_classifies_per_element() -> None:
    torch.manual_seed(0)
    trace = tl.trace(
        nn.Linear(1000, 1000, bias=False),
        torch.randn(1, 1000),
        capture=CaptureOptions(save_grads=True),
    )
    trace.backward(trace.output.mean())  # each of 1000 elements gets 1e-3
    # norm = 1e-3 * sqrt(1000) = 0.0316 (ok at 1e-2); rms = 1e-3 (vanishing at 1e-2)
    total = tl.debug.grad_health(trace, vanishing_threshold=1e-2)
    rms = tl.debug.grad_health(trace, vanishing_threshold=1e-2, basis="rms")
    assert total.to_pandas().verdict.tolist() == ["ok"]
    assert rms.to_pandas().verdict.tolist() == ["vanishing"]
    assert rms.to_pandas().rms.tolist() == [pytest.approx(1e-3)]
    assert rms.to_pandas().attrs["basis"] == "rms"


class RootOfZero(nn.Module):
    """sqrt(relu(linear(x)) * 0): the forward is finite, the backward of sqrt at 0 is inf."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc = nn.Linear(2, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sqrt(self.fc(x) * 0)


def test_nonfinite_gradients_are_never_ok() -> None:
    trace = tl.trace(RootOfZero(), torch.ones(1, 2), capture=CaptureOptions(save_grads=True))
    trace.backward(trace.output.sum())
    report = tl.debug.grad_health(trace)
    frame = report.to_pandas().set_index("op")
    # d sqrt(u)/du at u = 0 is inf (mul_1's gradient); times d(u)/d(fc) = 0 it is nan.
    assert frame.verdict.to_dict() == {"linear_1": "unknown", "mul_1": "exploding", "sqrt_1": "ok"}
    assert math.isnan(frame.loc["linear_1", "grad_norm_raw"])
    assert frame.loc["mul_1", "grad_norm_raw"] == math.inf
    nonfinite = [f for f in report.findings if f.code == "gradient_nonfinite"]
    assert [(f.severity, f.fields["count"], f.where.op) for f in nonfinite] == [
        ("critical", 2, "linear_1")
    ]


def test_ops_the_backward_did_not_reach_are_counted_not_rowed() -> None:
    class TwoHeads(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = nn.Linear(2, 2), nn.Linear(2, 2)

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return self.a(x), self.b(x)

    trace = tl.trace(TwoHeads(), torch.ones(1, 2), capture=CaptureOptions(save_grads=True))
    trace.backward(trace.output[0].sum())
    report = tl.debug.grad_health(trace)
    assert report.to_pandas().op.tolist() == ["linear_1"]
    assert report.to_pandas().attrs["coverage"]["num_not_reached"] == 1
    assert "1 op with a grad_fn got no gradient" in report.disclosures[-1]


# ----- arguments and preconditions ---------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"vanishing_threshold": -1.0}, "vanishing_threshold must be a number >= 0"),
        ({"exploding_threshold": float("nan")}, "exploding_threshold must be a number >= 0"),
        ({"vanishing_threshold": "1e-7"}, "vanishing_threshold must be a number"),
        ({"vanishing_threshold": 1.0, "exploding_threshold": 1.0}, "must be finite and below"),
        (
            {"vanishing_threshold": float("inf"), "exploding_threshold": float("inf")},
            "must be finite and below",
        ),
        ({"basis": "mean"}, "basis must be 'total_norm' or 'rms'"),
        ({"bwd": 1}, r"bwd must be an int in 0..0"),
        ({"bwd": True}, r"bwd must be an int"),
    ],
    ids=["negative", "nan", "text", "equal", "inf-vanishing", "basis", "bwd-range", "bwd-bool"],
)
def test_bad_arguments_raise_a_typed_error(dead_trace, kwargs, match) -> None:
    with pytest.raises(DiagnosticArgumentError, match=match):
        tl.debug.grad_health(dead_trace, **kwargs)


def test_exploding_threshold_inf_turns_the_verdict_off() -> None:
    trace = tl.trace(Scaled(1e9), torch.ones(3, 4), capture=CaptureOptions(save_grads=True))
    trace.backward(trace.output.sum())
    frame = tl.debug.grad_health(trace, exploding_threshold=float("inf")).to_pandas()
    assert frame.verdict.tolist() == ["ok", "ok", "ok"]


def test_missing_gradients_are_a_typed_unavailable_error(batch) -> None:
    plain = tl.trace(nn.Linear(8, 1), batch)
    with pytest.raises(UnavailableError, match="save_grads=True") as no_grads:
        tl.debug.grad_health(plain)
    assert no_grads.value.code == "no_saved_grads"
    ready = tl.trace(nn.Linear(8, 1), batch, capture=CaptureOptions(save_grads=True))
    with pytest.raises(UnavailableError, match="call trace.backward") as no_pass:
        tl.debug.grad_health(ready)
    assert no_pass.value.code == "no_backward"
    with pytest.raises(DiagnosticArgumentError, match="got list"):
        tl.debug.grad_health([ready])


def test_several_passes_need_bwd(batch) -> None:
    trace = tl.trace(nn.Linear(8, 1), batch, capture=CaptureOptions(save_grads=True))
    out = trace.output
    trace.backward(out.sum(), retain_graph=True)
    trace.backward((out * 0).sum())  # a second pass whose gradients are all zero
    with pytest.raises(DiagnosticArgumentError, match=r"2 backward passes; pass bwd=N"):
        tl.debug.grad_health(trace)
    assert tl.debug.grad_health(trace, bwd=0).to_pandas().verdict.tolist() == ["ok"]
    second = tl.debug.grad_health(trace, bwd=1)
    assert second.to_pandas().verdict.tolist() == ["zero"]  # d(out * 0) / d out = 0
    assert second.to_pandas().attrs["bwd"] == 1
