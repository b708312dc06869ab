"""The card's "next" step of a live NaN search is a call the reader can type as written."""

from __future__ import annotations

import torch
from torch import nn

import torchlens_nb as tl


class Log(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log(x)  # NaN for the negative inputs


def test_a_live_origins_next_step_is_the_reports_own_action() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), Log())
    report = tl.debug.nonfinite_origin(model, torch.randn(2, 4))
    # no trace exists in the reader's session: the step names the report instead
    assert report.card().splitlines()[-1] == "  next: " + "; ".join(e.code for e in report.exits)
    assert report.exits[0].code == "report.run_action('lineage', label='log_1')"
    follow_up = eval(report.exits[0].code, {"report": report})  # exactly as printed
    assert follow_up.report_type == "lineage"
    assert "log_1" in {node.label for node in follow_up.nodes}


def test_a_saved_traces_next_step_names_that_trace() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), Log())
    trace = tl.trace(model, torch.randn(2, 4))
    report = tl.debug.nonfinite_origin(trace)
    assert report.exits[0].code == "tl.debug.lineage(trace, 'log_1', direction='both', max_depth=1)"
