"""Runs inside the venv the wheel was installed into (``python -I``: no checkout on sys.path).

Writes into the folder given as argv[1]: ``facts.json`` (where the package was imported from,
its panels, the doctor's bundle row, a report's mime bundle keys), ``payloads.json`` (one real
report's panel payload per panel kind, keyed by panel name) and ``report.html``
(``Report.to_html``). Only the public API is used, as a user of the wheel would.
"""

from __future__ import annotations

import base64
import json
import pathlib
import sys
from collections.abc import Callable

import torch
from torch import nn

import torchlens_nb as tl
from torchlens_nb import widgets


class _LogBlock(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log(x - 10.0)  # every input is below 10: the NaN is born here


class _Attention(nn.Module):
    """Two-head self-attention whose (batch, heads, queries, keys) softmax the sink probe reads."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(8, 24)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, tokens, _ = x.shape
        q, k, v = (t.view(batch, tokens, 2, 4).transpose(1, 2) for t in self.qkv(x).chunk(3, -1))
        weights = torch.softmax(q @ k.transpose(-1, -2) / 2.0, dim=-1)
        return (weights @ v).transpose(1, 2).reshape(batch, tokens, 8)


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


def _nonfinite() -> tl.report.Report:
    return tl.debug.nonfinite_origin(nn.Sequential(nn.Linear(4, 4), _LogBlock()), torch.randn(2, 4))


def _lineage() -> tl.report.Report:
    trace = tl.trace(_mlp(), torch.randn(2, 4))
    return tl.debug.lineage(trace, trace.ops[1].label)


def _grad_health() -> tl.report.Report:
    trace = tl.trace(_mlp(), torch.randn(4, 4), capture=tl.options.CaptureOptions(save_grads=True))
    trace.backward(trace.output.square().mean())
    return tl.debug.grad_health(trace)


def _compare() -> tl.report.Report:
    model = _mlp()
    return tl.debug.compare(tl.trace(model, torch.randn(2, 4)), tl.trace(model, torch.randn(2, 4)))


def _cost() -> tl.report.Report:
    return tl.debug.hot_path(tl.trace(_mlp(), torch.randn(2, 4)))


def _grad_fn() -> tl.report.Report:
    model = _mlp()
    return tl.debug.walk_grad_fn(model(torch.randn(2, 4)).sum(), model=model)


def _attention_sinks() -> tl.report.Report:
    torch.manual_seed(0)
    return tl.debug.attention_sinks(_Attention(), torch.randn(1, 6, 8))


def _checks() -> tl.report.Report:
    model = _mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    session = tl.debug.ChecksSession(model, optimizer, scaler=None)
    with session:
        for _ in range(3):
            optimizer.zero_grad()
            model(torch.randn(8, 4)).square().mean().backward()
            optimizer.step()
    return session.report()


def _spike() -> tl.report.Report:
    model = _mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    session = tl.debug.ChecksSession(model, optimizer, scaler=None)
    session.register_stability_check(action="collect", keep="every_step")
    with session:
        for _ in range(3):
            optimizer.zero_grad()
            model(torch.randn(8, 4)).square().mean().backward()
            optimizer.step()
    return session.spike_forensics()


def _recipe() -> tl.report.Report:
    return tl.recipes.class_balance(torch.tensor([0] * 30 + [1] * 2))


def _triage() -> tl.report.Report:
    torch.manual_seed(0)
    model = _mlp()
    batch = (torch.randn(16, 4), torch.randint(0, 2, (16,)))
    return tl.recipes.triage(model, batch, nn.CrossEntropyLoss(), live=False)


def _doctor() -> tl.report.Report:
    return tl.report.doctor()


BUILDERS: tuple[Callable[[], tl.report.Report], ...] = (
    _nonfinite,
    _lineage,
    _grad_health,
    _compare,
    _cost,
    _grad_fn,
    _attention_sinks,
    _checks,
    _spike,
    _recipe,
    _triage,
    _doctor,
)


def _panel_state(report: tl.report.Report) -> dict:
    """The payload and the binary arrays (base64) the panel's widget would carry."""
    arrays = {
        name: {
            **{k: v for k, v in spec.items() if k != "data"},
            "data": base64.b64encode(spec["data"]).decode(),
        }
        for name, spec in widgets.panel_arrays(report).items()
    }
    return {"payload": widgets.panel_payload(report), "arrays": arrays}


def main(out: pathlib.Path) -> None:
    payloads: dict[str, dict] = {}
    for build in BUILDERS:
        report = build()
        payloads.setdefault(widgets.panel_name(report), _panel_state(report))
    report = _nonfinite()
    report.to_html(out / "report.html")
    card_only = tl.report.Report(subject="a findings card", status="ok", lead="ok")
    payloads[widgets.panel_name(card_only)] = _panel_state(card_only)
    bundle_row = tl.report.doctor().check("panel_bundles")
    facts = {
        "module_file": tl.__file__,
        "version": tl.__version__,
        "available_panels": list(widgets.available_panels()),
        "required_panels": list(widgets.required_panels()),
        "panel_bundles": {"status": bundle_row.status, "details": bundle_row.details},
        "mime_keys": sorted(report._repr_mimebundle_()),
        "prefix": sys.prefix,
    }
    (out / "payloads.json").write_text(json.dumps(payloads, allow_nan=False))
    (out / "facts.json").write_text(json.dumps(facts))


if __name__ == "__main__":
    main(pathlib.Path(sys.argv[1]))
