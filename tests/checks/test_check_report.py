"""``CheckReport``: immutable plain data, the schema_version=1 export, NaN-safe JSON, a bounded card."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping

import pytest
import torch

import torchlens_nb as tl
from tests import models


def _report_with_nonfinite_numbers() -> tl.report.CheckReport:
    model = models.mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    session = tl.debug.ChecksSession(model, optimizer, scaler=None)
    session.register_nonfinite_grad_check(action="collect")
    session.register_update_ratio_check(every=1)
    session.register_change_check(action="collect")
    x = torch.randn(4, 8)
    x[0, 0] = math.inf  # NaN/Inf gradient norms and NaN weights after the write
    with session:
        for _ in range(2):
            optimizer.zero_grad()
            model(x).square().mean().backward()
            optimizer.step()
    return session.report()


def test_to_dict_is_strict_json_with_the_public_export_keys() -> None:
    report = _report_with_nonfinite_numbers()
    payload = report.to_dict()
    text = json.dumps(payload, allow_nan=False)
    assert '{"$float": "nan"}' in text
    assert payload["schema_version"] == payload["data"]["schema_version"] == 1
    assert payload["counters"]["attempts"] == 2
    assert payload["ledgers"]["scale"]["method"] == "not_applicable"
    assert [c["name"] for c in payload["checks_run"]] == [
        "nonfinite_grad",
        "update_ratio",
        "change",
        "optimizer_roster",
        "fresh_grads",
        "step_moves",
        "outside_writes",
        "stability",
        "no_accepted_steps",  # the invariants, the stability check and the watchdog by default
    ]
    assert payload["report_type"] == "checks" and json.loads(report.to_json()) == payload


def test_card_stays_bounded_and_report_is_frozen() -> None:
    report = _report_with_nonfinite_numbers()
    lines = report.card().splitlines()
    assert lines[0].startswith("checks [found] Sequential with SGD (4 parameters): 2 attempt(s)")
    assert len(lines) <= 1 + 5 + 1 + len(report.unavailable) + 4 + 1
    assert all(len(line) <= 240 for line in lines)
    with pytest.raises(dataclasses.FrozenInstanceError):
        report.status = "clean"
    with pytest.raises(TypeError):
        report.counters["attempts"] = 0


def test_report_holds_no_tensor_or_module() -> None:
    report = _report_with_nonfinite_numbers()

    def walk(value) -> int:
        """Count the plain leaves under ``value``; fail on anything that is not plain data."""
        if isinstance(value, (str, int, float, bool, type(None))):
            return 1
        if isinstance(value, Mapping):
            return sum(walk(item) for item in value.values())
        if isinstance(value, (list, tuple)):
            return sum(walk(item) for item in value)
        if dataclasses.is_dataclass(value):
            return sum(
                walk(getattr(value, f.name))
                for f in dataclasses.fields(value)
                if f.name != "actions"
            )
        raise AssertionError(f"report holds a {type(value).__name__}")

    assert walk(report) > 100
    assert report.table("series").columns[:4] == ("attempt", "global_step", "group", "status")
    frame = report.to_pandas("params")
    assert list(frame["param"]) == ["0.weight", "0.bias", "2.weight", "2.bias"]
