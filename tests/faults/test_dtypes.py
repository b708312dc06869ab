"""fp16, bf16 and fp32 models through capture, ``nonfinite_origin``, ``grad_health`` and the
checks kit (CPU runs all three for Linear, ReLU and log)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import torchlens_nb as tl
from tests.faults._guards import untouched
from tests.faults.fault_models import LogOfLinear
from torchlens_nb.errors import CheckViolationError
from torchlens_nb.options import CaptureOptions

pytestmark = pytest.mark.fault("dtype")

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
IDS = ["fp32", "fp16", "bf16"]


def healthy(dtype: torch.dtype) -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).to(dtype)


def batch(dtype: torch.dtype) -> torch.Tensor:
    torch.manual_seed(1)
    return torch.randn(4, 8, dtype=dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_capture_records_the_dtype_and_returns_the_plain_output(dtype: torch.dtype) -> None:
    model, x = healthy(dtype), batch(dtype)
    traced = tl.trace(model, x)
    name = str(dtype).removeprefix("torch.")
    assert [(op.label, op.dtype) for op in traced] == [
        ("input_1", name),
        ("linear_1", name),
        ("relu_1", name),
        ("linear_2", name),
    ]
    assert torch.equal(traced.output, model(x))
    assert traced["linear_2"].out.dtype == dtype


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_nonfinite_origin_names_the_log_in_every_dtype(dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    model, x = LogOfLinear().to(dtype), batch(dtype)
    with untouched([model], inputs=(x,)):
        saved = tl.debug.nonfinite_origin(tl.trace(model, x))
        live = tl.debug.nonfinite_origin(model, x)
    for report in (saved, live):
        thing = report.first_bad_thing
        assert (report.status, thing.op, thing.func, thing.kind) == ("found", "log_1", "log", "nan")
        assert thing.stats.nan_count > 0
    report_json = saved.to_json()  # the fp16/bf16 statistics encode as strict JSON
    assert '"log_1"' in report_json


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_grad_health_judges_gradients_of_every_dtype(dtype: torch.dtype) -> None:
    model, x = healthy(dtype), batch(dtype)
    calm = tl.trace(model, x, capture=CaptureOptions(save_grads=True))
    calm.backward(calm.output.float().sum())
    report = tl.debug.grad_health(calm)
    assert (report.status, len(report.table().rows)) == ("clean", 3)  # input_1, linear_1, relu_1
    loud = tl.trace(model, x * 1e4, capture=CaptureOptions(save_grads=True))
    loud.backward((loud.output * 1e4).sum())
    report = tl.debug.grad_health(loud)
    assert (report.status, [f.code for f in report.findings]) == ("found", ["gradient_frontier"])
    assert report.findings[0].where.op == "linear_2"


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_checks_kit_trains_clean_and_stops_a_nan_step_in_every_dtype(dtype: torch.dtype) -> None:
    model, x = healthy(dtype), batch(dtype)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    checks = tl.debug.ChecksSession(model, optimizer, scaler=None)
    checks.register_nonfinite_grad_check()
    checks.register_param_scan(every=1)
    with checks:
        for _ in range(2):
            optimizer.zero_grad()
            model(x).float().square().mean().backward()
            optimizer.step()
    report = checks.report()
    assert (report.status, report.counters["accepted"], report.findings) == ("clean", 2, ())

    checks = tl.debug.ChecksSession(model, optimizer, scaler=None)
    checks.register_nonfinite_grad_check()
    optimizer.zero_grad()
    with untouched([model], [optimizer], (x,), grads=False):
        with pytest.raises(CheckViolationError, match="nonfinite_grad"):
            with checks:
                (model(x).float().square().mean() * float("nan")).backward()
                optimizer.step()


HEADROOM = [(torch.float16, ["dtype_headroom_low"]), (torch.bfloat16, []), (torch.float32, [])]


@pytest.mark.parametrize("dtype, codes", HEADROOM, ids=["fp16", "bf16", "fp32"])
def test_param_health_headroom_depends_on_the_dtype(dtype: torch.dtype, codes: list[str]) -> None:
    model = healthy(dtype)
    with torch.no_grad():
        model[0].weight[0, 0] = 60_000.0  # 92% of fp16's largest finite value, 65504
    report = tl.debug.param_health(model)
    assert [f.code for f in report.findings] == codes
