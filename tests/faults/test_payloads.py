"""Every payload is valid: reports built from hostile tensors (payload_reports.py) encode to
strict JSON (``allow_nan=False``), decode back bit for bit through the payload decoder
(``_jsonsafe.decode_float``), stay within the panel caps, and keep their card bounded.
"""

from __future__ import annotations

import json
import math
import struct
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings

from tests.faults import _tally
from tests.faults.payload_reports import hostile_tensors, reports_of
from torchlens_nb import widgets
from torchlens_nb._jsonsafe import FLOAT_TAG, decode_float, to_jsonable
from torchlens_nb.report._base import CARD_LINE_MAX_CHARS, MAX_CARD_FINDINGS

pytestmark = pytest.mark.fault("payload")


def decoded(value: Any) -> Any:
    """The payload with every ``{"$float": ...}`` stand-in turned back into a float."""
    value = decode_float(value)
    if isinstance(value, dict):
        return {k: decoded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [decoded(v) for v in value]
    return value


def assert_same_bits(a: Any, b: Any, path: str = "$") -> None:
    """Equal trees, floats compared by their IEEE bits (NaN == NaN, -0.0 != 0.0)."""
    if isinstance(a, float) and isinstance(b, float):
        same = (math.isnan(a) and math.isnan(b)) or struct.pack(">d", a) == struct.pack(">d", b)
        assert same, f"{path}: {a!r} != {b!r}"
    elif isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), f"{path}: keys differ"
        for key in a:
            assert_same_bits(a[key], b[key], f"{path}.{key}")
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), f"{path}: lengths differ"
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same_bits(x, y, f"{path}[{i}]")
    else:
        assert a == b and type(a) is type(b), f"{path}: {a!r} != {b!r}"


def stand_ins(value: Any) -> int:
    """How many ``{"$float": ...}`` stand-ins the payload holds."""
    if isinstance(value, dict):
        return int(set(value) == {FLOAT_TAG}) + sum(stand_ins(v) for v in value.values())
    if isinstance(value, list):
        return sum(stand_ins(v) for v in value)
    return 0


def check_payload(name: str, report: Any) -> None:
    payload = report.to_dict()
    text = json.dumps(payload, allow_nan=False)  # raises on a bare NaN/Inf
    assert_same_bits(decoded(json.loads(text)), decoded(payload), f"{name}")
    panel = widgets.panel_payload(report)
    json.dumps(panel, allow_nan=False)
    assert all(len(t["rows"]) <= widgets.MAX_TABLE_ROWS for t in panel["tables"])
    arrays = widgets.panel_arrays(report)
    assert sum(len(a["data"]) for a in arrays.values()) <= widgets.MAX_ARRAY_BYTES
    card = report.card()
    assert all(len(line) <= CARD_LINE_MAX_CHARS for line in card.splitlines()), name
    assert card.count("\n") <= MAX_CARD_FINDINGS + len(report.unavailable) + 6, name


@settings(
    max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
@given(tensor=hostile_tensors())
def test_reports_of_hostile_tensors_are_strict_json_and_decode_bitwise(
    tensor: torch.Tensor,
) -> None:
    _tally.examples["payload"] += 1
    for name, report in reports_of(tensor).items():
        check_payload(name, report)


def test_the_specials_reach_the_payload_as_stand_ins() -> None:
    # NaN, +Inf, -Inf become stand-ins; -0.0 and subnormals stay numbers with their bits
    tensor = torch.tensor([math.nan, math.inf, -math.inf, -0.0, 5e-324], dtype=torch.float64)
    table = reports_of(tensor)["values_table"].to_dict()["tables"][0]
    assert [row[1] for row in table["rows"]] == [
        {FLOAT_TAG: "nan"},
        {FLOAT_TAG: "inf"},
        {FLOAT_TAG: "-inf"},
        -0.0,
        5e-324,
    ]
    assert math.copysign(1.0, json.loads(json.dumps(table["rows"][3][1]))) == -1.0
    # value, negated and the "all" attr hold three each; the "first" attr holds the NaN
    assert stand_ins(table) == 3 + 3 + 3 + 1


def test_int64_extremes_stay_exact_python_ints() -> None:
    tensor = torch.tensor([2**63 - 1, -(2**63)])
    table = reports_of(tensor)["values_table"].to_dict()["tables"][0]
    assert [row[1] for row in json.loads(json.dumps(table))["rows"]] == [2**63 - 1, -(2**63)]


@pytest.mark.parametrize(
    "value",
    [
        torch.tensor(math.nan),
        torch.empty(0, 3),
        torch.full((2, 2), -math.inf, dtype=torch.bfloat16),
    ],
    ids=["0d-nan", "empty", "bf16-neg-inf"],
)
def test_to_jsonable_of_raw_tensors_is_strict_json(value: torch.Tensor) -> None:
    encoded = to_jsonable(value)
    json.dumps(encoded, allow_nan=False)
    assert_same_bits(decoded(encoded), decoded(to_jsonable(value.tolist())))
