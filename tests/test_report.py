"""The Report model: JSON-safe payloads, bounded cards, tables, actions, and the doctor."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
import torch

import torchlens_nb as tl
from torchlens_nb._jsonsafe import decode_float, to_jsonable
from torchlens_nb.report import Exit, Finding, Report, Table, Unavailable, Where

AWKWARD_VALUES = [
    float("nan"),
    float("inf"),
    float("-inf"),
    -0.0,
    1e308,
    5e-324,
    np.float32("nan"),
    np.int64(2**63 - 1),
    torch.tensor(float("inf")),
    torch.tensor([1.0, float("nan")]),
    np.array([float("-inf"), 2.0]),
]


def make_report(n_findings: int = 7) -> Report:
    findings = [
        Finding(
            f"code_{i}",
            ("critical", "warning", "info")[i % 3],
            f"finding number {i}",
            where=Where(
                op=f"relu_{i}",
                module="encoder.0",
                file="/x/model.py",
                line=10 + i,
                code="y = x.relu()",
            ),
            remedy="look closer",
            fields={"value": AWKWARD_VALUES[i % len(AWKWARD_VALUES)]},
        )
        for i in range(n_findings)
    ]
    table = Table(
        "rows",
        ("name", "value"),
        [(f"r{i}", v) for i, v in enumerate(AWKWARD_VALUES)],
        attrs={"threshold": float("inf")},
    )
    return Report(
        subject="toy",
        status="found",
        lead="seven things",
        findings=findings,
        tables=(table,),
        disclosures=("scoped to saved ops",),
        unavailable=(Unavailable("device_time", "no profiler session"),),
        exits=(Exit("Show lineage", "tl.debug.lineage(trace, 'relu_1')", "lineage"),),
        actions={"lineage": lambda: make_report(1)},
    )


def test_to_dict_is_strict_json_with_nan_inf_and_tensors_inside() -> None:
    payload = make_report().to_dict()
    text = json.dumps(payload, allow_nan=False)
    assert payload["schema"] == "torchlens_nb.report/1"
    rows = payload["tables"][0]["rows"]
    assert rows[0][1] == {"$float": "nan"} and rows[1][1] == {"$float": "inf"}
    assert math.copysign(1.0, rows[3][1]) == -1.0  # -0.0 survives as a number
    assert rows[5][1] == 5e-324 and rows[7][1] == 2**63 - 1
    assert rows[9][1] == [1.0, {"$float": "nan"}]
    assert payload["tables"][0]["attrs"]["threshold"] == {"$float": "inf"}
    assert payload["exits"][0]["runnable"] is True and payload["actions"] == ["lineage"]
    assert "<lambda>" not in text


@pytest.mark.parametrize("value", AWKWARD_VALUES, ids=repr)
def test_every_awkward_value_encodes_and_decodes(value: object) -> None:
    encoded = to_jsonable(value)
    json.dumps(encoded, allow_nan=False)
    if isinstance(value, float) and not math.isfinite(value):
        decoded = decode_float(encoded)
        assert (math.isnan(decoded) and math.isnan(value)) or decoded == value


def test_card_is_bounded_and_counts_the_rest_exactly() -> None:
    report = make_report(7)
    lines = report.card().splitlines()
    assert lines[0] == "report [found] toy: seven things"
    assert (
        sum(
            1
            for line in lines
            if line.startswith("  CRITICAL")
            or line.startswith("  WARNING")
            or line.startswith("  INFO")
        )
        == 5
    )
    assert "  ... and 2 more findings" in lines
    assert "  NOT CHECKED device_time: no profiler session" in lines
    assert lines[-1] == "  next: tl.debug.lineage(trace, 'relu_1')"
    assert str(report) == report.card()
    assert all(len(line) <= 240 for line in lines)
    with pytest.raises(tl.errors.ReportOptionError, match="max_findings must be >= 1"):
        report.card(max_findings=0)


def test_findings_are_ordered_by_severity_and_report_is_frozen() -> None:
    report = make_report(6)
    assert [f.severity for f in report.findings] == ["critical"] * 2 + ["warning"] * 2 + [
        "info"
    ] * 2
    with pytest.raises(dataclasses.FrozenInstanceError):
        report.status = "clean"  # type: ignore[misc]
    with pytest.raises(TypeError):
        report.findings[0].fields["value"] = 1  # type: ignore[index]


def test_tables_have_a_pandas_view_with_attrs_and_repr_is_stable() -> None:
    report = make_report()
    frame = report.to_pandas()
    assert frame.columns.tolist() == ["name", "value"] and len(frame) == len(AWKWARD_VALUES)
    assert frame.attrs["threshold"] == float("inf")
    assert repr(report) == "<Report found 'toy': 7 findings>"
    no_table = Report(subject="s", status="clean", lead="nothing")
    with pytest.raises(tl.errors.ReportOptionError, match="has no table"):
        no_table.to_pandas()


def test_actions_run_follow_ups_and_refuse_unknown_names() -> None:
    report = make_report()
    follow_up = report.run_action("lineage")
    assert isinstance(follow_up, Report) and len(follow_up.findings) == 1
    with pytest.raises(tl.errors.ReportOptionError, match="available: \\['lineage'\\]"):
        report.run_action("missing")


def test_bad_severity_and_ragged_tables_are_refused() -> None:
    with pytest.raises(tl.errors.ReportOptionError, match="severity must be one of"):
        Finding("x", "fatal", "m")  # type: ignore[arg-type]
    with pytest.raises(tl.errors.ReportOptionError, match="row 0 has 1 values for 2 columns"):
        Table("t", ("a", "b"), [(1,)])


def test_mimebundle_always_carries_the_card() -> None:
    bundle = make_report()._repr_mimebundle_()
    assert bundle["text/plain"] == make_report().card()
    assert "seven things" in bundle["text/html"]


def test_doctor_environment_rows_and_model_rows() -> None:
    report = tl.report.doctor()
    assert report.check("pytorch").status == "pass"
    assert report.torch_version == torch.__version__ and report.model_type is None
    assert report.capability_snapshot()["HAS_TORCH_FUNCTION_MODE"] is True
    assert report.to_markdown().startswith("| key | status |")
    json.dumps(report.to_dict(), allow_nan=False)
    with_model = tl.report.doctor(torch.nn.Linear(2, 2), torch.ones(1, 2))
    assert with_model.model_type == "torch.nn.modules.linear.Linear"
    assert with_model.check("inputs").details == "1 tensors: (1, 2) float32"
    meta = tl.report.doctor(torch.nn.Linear(2, 2, device="meta"))
    assert meta.check("tensor_variants").status == "known_broken"
    assert meta.status == "warn" and meta.findings[0].code == "doctor_tensor_variants"
    with pytest.raises(tl.errors.ReportOptionError, match="no doctor row 'nope'"):
        report.check("nope")


def test_every_report_type_keeps_the_short_stable_repr() -> None:
    report_types = [
        obj for obj in vars(tl.report).values() if isinstance(obj, type) and issubclass(obj, Report)
    ]
    assert len(report_types) > 20
    long_reprs = [cls.__name__ for cls in report_types if cls.__repr__ is not Report.__repr__]
    assert long_reprs == []  # subclasses use @dataclass(..., repr=False)


def test_an_action_called_with_wrong_arguments_is_a_typed_error() -> None:
    report = make_report()
    with pytest.raises(
        tl.errors.ReportOptionError, match=r"action 'lineage' does not take \['depth'\]"
    ):
        report.run_action("lineage", depth=2)
