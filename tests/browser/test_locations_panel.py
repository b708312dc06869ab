"""Fast browser tier: locations and facts read as a person reads them (issue 18).

A notebook cell is named as IPython's own tracebacks name it ("Cell In[3], line 9") wherever a
location is shown (card, finding, lineage node, table cell) while the payload keeps the real
file; a finding's facts are a formatted key/value list, not raw JSON. IPython is stood in for by
a shell whose compiler names this test file as cell 3, as ipykernel names a cell's file.
Screenshots: tests/artifacts/locations_*.png.
"""

from __future__ import annotations

import math
import types

import IPython
import pytest
import torch
from playwright.sync_api import expect
from torch import nn

import torchlens_nb as tl
from torchlens_nb import widgets
from torchlens_nb.report import Finding, Report

pytestmark = pytest.mark.browser


class Doubler(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(x)
        return y * 2  # the line the lineage of mul_1 points at


def _line_of(text: str) -> int:
    source = open(__file__, encoding="utf-8").read().splitlines()  # noqa: SIM115
    return next(i for i, line in enumerate(source, 1) if text in line)


@pytest.fixture
def cell_three(monkeypatch: pytest.MonkeyPatch) -> str:
    """This file is "Cell In[3]" to a stand-in IPython shell (ipykernel's compiler does that
    for each cell's file)."""
    names = {__file__: ("Cell", "In[3]")}
    shell = types.SimpleNamespace(compile=types.SimpleNamespace(format_code_name=names.get))
    monkeypatch.setattr(IPython, "get_ipython", lambda: shell)
    return __file__


def test_a_cell_reads_as_cell_in_n_line_m_and_the_payload_keeps_the_file(
    panel_page, cell_three
) -> None:
    line = _line_of("return y * 2")
    trace = tl.trace(Doubler(), torch.tensor([[-1.0, 2.0]]))
    report = tl.debug.lineage(trace, "mul_1", direction="both", max_depth=1)
    payload = widgets.panel_payload(report)
    assert payload["locations"] == {cell_three: "Cell In[3]"}
    assert payload["data"]["nodes"][0]["file"] == cell_three  # the real file travels
    root = panel_page.mount("lineage", payload)
    details = root.locator(".tln-lin-detail")
    source = details.locator("dd").nth(3)
    expect(source).to_have_text(f"Cell In[3], line {line}")
    assert source.locator("code").get_attribute("title") == f"{cell_three}:{line}"
    panel_page.screenshot("locations_lineage", root)


def test_cards_findings_and_table_cells_name_the_cell(panel_page, cell_three) -> None:
    line = _line_of("y = torch.relu(x)")
    model = nn.Sequential(nn.Linear(2, 4), Doubler())
    trace = tl.trace(model, torch.tensor([[-1.0, 2.0]]))
    relu = trace["relu_1"]
    report = Report(
        subject="Doubler",
        status="warn",
        lead="relu_1 zeroes a unit.",
        findings=(Finding("dead_units", "warning", "relu_1 zeroes a unit.", where=_where(relu)),),
        tables=(
            tl.report.Table.from_dicts(
                "ops",
                [{"op": relu.label, "source_line": f"{relu.file}:{relu.line}"}],
                ("op", "source_line"),
            ),
        ),
    )
    assert f"(relu_1 in 1 at Cell In[3], line {line})" in report.card()
    root = panel_page.mount("table", widgets.panel_payload(report))
    root.locator(".tln-finding summary").click()
    where = root.locator(".tln-finding-body dd").nth(2)
    expect(where).to_have_text(f"Cell In[3], line {line}")
    cell = root.locator('table[data-table="ops"] tbody td').first
    expect(cell).to_have_text(f"Cell In[3], line {line}")
    assert cell.get_attribute("title") == f"{cell_three}:{line}"
    panel_page.screenshot("locations_table", root)


def _where(op: tl.capture.Op) -> tl.report.Where:
    return tl.report.Where(op.label, op.module, op.file, op.line, op.code)


def test_a_findings_facts_are_a_formatted_list_not_json(panel_page) -> None:
    report = Report(
        subject="facts",
        status="warn",
        lead="One finding with awkward facts.",
        findings=(
            Finding(
                "awkward",
                "warning",
                "the facts below are formatted like table cells.",
                fields={
                    "ratio": 0.123456789012345,
                    "missing": None,
                    "bounds": {"low": 1.5e-7, "high": math.inf},
                    "sizes": [1, 2.5, 1234567],
                    "is_scaled": False,
                },
            ),
        ),
    )
    root = panel_page.mount("report", widgets.panel_payload(report))
    root.locator(".tln-finding summary").click()
    facts = root.locator(".tln-finding-body > dl.tln-facts")
    assert facts.locator(":scope > dt").all_inner_texts() == [
        "ratio",
        "missing",
        "bounds",
        "sizes",
        "is_scaled",
    ]
    values = facts.locator(":scope > dd")
    expect(values.nth(0)).to_have_text("0.1235")
    assert values.nth(0).get_attribute("title") == "0.123456789012345"  # exact on hover
    expect(values.nth(1)).to_have_text("—")
    expect(values.nth(2)).to_have_text("low 1.50e-7 · high inf")  # plain pairs: one line
    expect(values.nth(3)).to_have_text("[1, 2.5, 1,234,567]")
    expect(values.nth(4)).to_have_text("False")
    assert "null" not in facts.inner_text() and "{" not in facts.inner_text()
    panel_page.screenshot("locations_facts", root)
