"""dtype_range: non-finite, near-max, subnormal-heavy and downcast hazards, honest coverage."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import torchlens_nb as tl
from torchlens_nb.errors import DiagnosticArgumentError
from torchlens_nb.report._activations import DTYPE_RANGE_COLUMNS


class HalfNearMax(nn.Module):
    """Casts to fp16 and multiplies up to 60000, 92% of fp16's largest finite 65504."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.half() * 600.0


class HalfSubnormal(nn.Module):
    """fp16 values of 1e-6: below fp16's smallest normal (6.1e-5), so every one is subnormal."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.half() * 1e-6


def codes(report) -> list[tuple[str, str]]:
    return [(f.code, f.where.op) for f in report.findings]


def test_flags_an_fp16_activation_near_65504() -> None:
    report = tl.debug.dtype_range(tl.trace(HalfNearMax(), torch.full((2, 3), 100.0)))
    assert codes(report) == [("near_dtype_max", "mul_1"), ("downcast", "half_1")]
    near = report.findings[0]
    assert (near.fields["max_abs"], near.fields["dtype_max"]) == (60000.0, 65504.0)
    assert near.message == "mul_1 reaches 60000, 92% of float16's finite max 65504."
    assert report.status == "found"


def test_flags_a_subnormal_heavy_tensor() -> None:
    report = tl.debug.dtype_range(tl.trace(HalfSubnormal(), torch.ones(4)))
    assert codes(report) == [("subnormal_heavy", "mul_1"), ("downcast", "half_1")]
    row = {r["op"]: r for r in report.table().dicts()}["mul_1"]
    assert (row["subnormal_frac"], row["flags"]) == (1.0, ("subnormal_heavy",))


def test_nonfinite_values_name_the_first_op() -> None:
    class LogNegative(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.log(x - 2.0).relu()

    report = tl.debug.dtype_range(tl.trace(LogNegative(), torch.ones(3)))
    (finding,) = report.findings
    assert (finding.code, finding.severity, finding.where.op) == (
        "nonfinite_values",
        "critical",
        "log_1",
    )
    assert finding.fields["ops"] == ("log_1", "relu_1")  # relu(nan) is nan
    row = {r["op"]: r for r in report.table().dicts()}["log_1"]
    assert (row["nan_count"], row["inf_count"], row["max_abs"]) == (3, 0, None)


def test_downcast_under_autocast_reads_recorded_input_dtypes() -> None:
    torch.manual_seed(0)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        trace = tl.trace(nn.Linear(4, 4), torch.randn(2, 4), save=False)
    report = tl.debug.dtype_range(trace)
    assert codes(report) == [("downcast", "linear_1")]
    assert report.findings[0].fields == {"from": "float32", "to": "bfloat16"}
    assert (report.num_audited_ops, report.num_ops) == (0, 2)
    assert report.status == "unknown"  # no value was read: never a pass


def test_coverage_counts_unsaved_ops() -> None:
    model = nn.Sequential(nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 1))
    report = tl.debug.dtype_range(tl.trace(model, torch.ones(1, 2), save=tl.func("relu")))
    assert (report.num_audited_ops, report.num_ops) == (1, 4)
    assert report.to_pandas().is_audited.tolist() == [False, False, True, False]
    assert report.disclosures == (
        "3 ops were not audited for values (3 not saved, 0 not floating point); downcasts are "
        "read from recorded dtypes for every op.",
    )
    assert report.lead == (
        "no non-finite, near-max or subnormal-heavy value in the 1 audited ops (of 4)."
    )


def test_integer_outputs_are_not_audited() -> None:
    class ArgMax(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.argmax(dim=1)

    report = tl.debug.dtype_range(tl.trace(ArgMax(), torch.ones(2, 3)))
    assert report.to_pandas().attrs["not_audited"] == {"not_saved": 0, "not_floating": 1}


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"max_fraction": 0.0}, r"max_fraction must be in \(0, 1\], got 0.0"),
        ({"max_fraction": float("nan")}, r"max_fraction must be in \(0, 1\]"),
        (
            {"subnormal_fraction_threshold": 1.5},
            r"subnormal_fraction_threshold must be in \(0, 1\]",
        ),
        ({"max_fraction": True}, r"max_fraction must be in \(0, 1\], got True"),
    ],
    ids=["zero", "nan", "above-one", "bool"],
)
def test_bad_thresholds_raise_a_typed_error(kwargs, match) -> None:
    trace = tl.trace(nn.ReLU(), torch.ones(2))
    with pytest.raises(DiagnosticArgumentError, match=match):
        tl.debug.dtype_range(trace, **kwargs)


def test_rows_core_holds_the_same_facts_as_the_report() -> None:
    trace = tl.trace(HalfNearMax(), torch.full((2, 3), 100.0))
    rows, attrs = tl.debug.dtype_range_rows(trace)
    report = tl.debug.dtype_range(trace)
    assert [tuple(r[c] for c in DTYPE_RANGE_COLUMNS) for r in rows] == list(report.table().rows)
    assert (attrs["num_audited_ops"], attrs["num_ops"]) == (3, 3)
