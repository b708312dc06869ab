"""tl.report.doctor: the capture-scope, wrapper-binding and fingerprint rows the spec lists."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode

import torchlens_nb as tl
from torchlens_nb.debug.model._belt import BELT


def test_capture_scope_names_a_scripted_submodule_and_the_status_is_not_ok() -> None:
    model = nn.Sequential(nn.Linear(2, 2), torch.jit.script(nn.Sequential(nn.ReLU(), nn.Tanh())))
    report = tl.report.doctor(model)
    row = report.check("capture_scope")
    assert (row.status, row.severity) == ("scope", "warning")
    assert "1 (RecursiveScriptModule(Sequential))" in row.details  # the outermost one only
    assert report.status == "warn" and report.tone == "warning"
    assert [f.code for f in report.findings] == ["doctor_capture_scope"]


def test_an_eager_model_has_a_clear_capture_scope() -> None:
    report = tl.report.doctor(nn.Linear(2, 2))
    assert report.check("capture_scope").status == "pass"
    assert report.status == "ok"


def test_the_fingerprint_depends_on_the_architecture_not_the_values() -> None:
    def fingerprint(model: nn.Module) -> str:
        return tl.report.doctor(model).check("model_fingerprint").details

    torch.manual_seed(0)
    first, second = nn.Linear(3, 2), nn.Linear(3, 2)  # different values, same structure
    assert fingerprint(first) == fingerprint(second)
    assert fingerprint(first) != fingerprint(nn.Linear(3, 4))
    assert "3 tensors" not in fingerprint(first) and "2 tensors" in fingerprint(first)


def test_another_tools_torch_function_mode_is_disclosed() -> None:
    assert tl.report.doctor().check("torch_wrapper_bindings").status == "pass"

    class Other(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            return func(*args, **(kwargs or {}))

    with Other():
        row = tl.report.doctor().check("torch_wrapper_bindings")
    assert (row.status, row.severity) == ("scope", "warning")
    assert "another mode is active: Other" in row.details


def test_mechanical_belt_counts_the_probed_callables_that_reach_the_recorder() -> None:
    row = tl.report.doctor().check("mechanical_belt")
    assert (row.status, row.severity, row.is_detected) == ("pass", "ok", True)
    assert row.details.startswith(f"{len(BELT)} of {len(BELT)} reach the recorder")
    assert len(BELT) == 44  # 12 torch functions, 12 Tensor methods, 9 operators, 11 F calls


def test_a_callable_that_bypasses_the_mode_drops_the_belt_to_warn_and_is_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    original = torch.tanh

    def bypassing_tanh(x: torch.Tensor) -> torch.Tensor:  # a library's patch that hides the op
        with torch._C.DisableTorchFunction():
            return original(x)

    monkeypatch.setattr(torch, "tanh", bypassing_tanh)
    report = tl.report.doctor(nn.Linear(2, 2))
    row = report.check("mechanical_belt")
    assert (row.status, row.severity, row.is_detected) == ("scope", "warning", False)
    assert row.details.startswith(f"{len(BELT) - 1} of {len(BELT)} reach the recorder")
    assert row.details.endswith("; not reaching it: torch.tanh")
    assert report.status == "warn"
    assert [f.code for f in report.findings] == ["doctor_mechanical_belt"]


def test_a_probed_callable_that_raises_is_named_not_fatal(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise TypeError("patched away")

    monkeypatch.setattr(F, "gelu", broken)
    row = tl.report.doctor().check("mechanical_belt")
    assert row.status == "scope"
    assert row.details.endswith("; not reaching it: F.gelu (raised TypeError)")


def test_the_fingerprint_row_is_an_environment_row_and_unavailable_without_a_model() -> None:
    report = tl.report.doctor()
    row = report.check("model_fingerprint")
    assert (row.status, row.severity, row.is_detected) == ("not_tested", "info", False)
    assert [(u.check, u.code) for u in report.unavailable] == [("model_fingerprint", "no_model")]
    assert "NOT CHECKED model_fingerprint: no model given" in report.card()
    keys = [c.key for c in tl.report.doctor(nn.Linear(2, 2)).checks]
    assert keys.index("model_fingerprint") < keys.index("wrapper_compile")  # before model rows
    assert keys.count("model_fingerprint") == 1
