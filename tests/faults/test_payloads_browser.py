"""The panels render hostile payloads: every report the payload builders make from a sample of
hostile tensors is mounted in headless chromium with its own panel module. The guarded page
fails on any console error or page error; a view that throws (the panel then shows its
``.tln-unreadable`` fallback and warns) fails too.
"""

from __future__ import annotations

import math

import pytest
import torch

from tests.faults.payload_reports import reports_of
from torchlens_nb import widgets

pytestmark = [pytest.mark.fault("payload"), pytest.mark.browser]

SAMPLE = {
    "fp32-specials": torch.tensor([math.nan, math.inf, -math.inf, -0.0, 1e-45, 1e38, 1.0]),
    "fp16-2d": torch.tensor([[65504.0, -math.inf], [6e-8, math.nan]], dtype=torch.float16),
    "bf16-0d-inf": torch.tensor(-math.inf, dtype=torch.bfloat16),
    "fp64-empty": torch.empty(0, 4, dtype=torch.float64),
    "int64-extremes": torch.tensor([2**63 - 1, -(2**63), 0]),
}


@pytest.mark.parametrize("tensor", list(SAMPLE.values()), ids=list(SAMPLE))
def test_every_panel_renders_reports_of_hostile_tensors(panel_page, tensor: torch.Tensor) -> None:
    warnings: list[str] = []
    panel_page.page.on(
        "console",
        lambda msg: (
            warnings.append(msg.text)
            if msg.type == "warning" and "[torchlens_nb]" in msg.text
            else None
        ),
    )
    reports = reports_of(tensor)
    for name, report in reports.items():
        root = panel_page.mount(
            widgets.panel_name(report),
            widgets.panel_payload(report),
            arrays=widgets.panel_arrays(report),
        )
        assert root.get_attribute("data-panel") == widgets.panel_name(report), name
        assert root.locator(".tln-unreadable").count() == 0, (name, root.inner_text()[:300])
        assert report.subject in root.inner_text(), name
    assert warnings == []
    assert len(reports) >= 15
