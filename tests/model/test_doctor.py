"""tl.report.doctor: the capture-scope, wrapper-binding and fingerprint rows the spec lists."""

from __future__ import annotations

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

import torchlens_nb as tl


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
