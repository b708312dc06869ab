"""End-to-end tier: a NaN origin panel in a real JupyterLab, expanded through the real kernel.

One scenario (~30 s): the origin card renders from the kernel's widget; an expand control asks
the kernel for the next ring, which merges into the view; "Show lineage" opens the lineage
panel (another bundle, shipped by the kernel) below. Screenshot: tests/artifacts/lab_nonfinite.png.
"""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.slow

CELLS = [
    "import torchlens_nb as tl\n"
    "from tests.nonfinite.nan_models import X, LogOfNegative, Net\n"
    "trace = tl.trace(Net(LogOfNegative()), X)\n"
    "report = tl.debug.nonfinite_origin(trace)\n"
    "report",
]


def test_nonfinite_origin_panel_expands_through_the_kernel(lab_notebook) -> None:
    nb = lab_notebook(CELLS, name="nonfinite.ipynb")
    outputs = nb.run_cell(0)
    assert outputs[0]["data"]["text/plain"].startswith("nonfinite [found] Net (saved, 6 ops)")
    panel = nb.output_panel(0)
    lead = panel.get_by_role("region", name="Origin")
    expect(lead.locator("dd").nth(1)).to_have_text("log_1 (log)")
    expect(lead.locator("dd").nth(2)).to_have_text("block")

    # expand: a message to the kernel, answered with the next ring, merged into the view
    graph = panel.locator(".tln-lineage").first.locator(".tln-lin-graph")
    panel.get_by_role("button", name="Show 1 more input of sub_1").click()
    expect(graph.locator(".tln-lin-label")).to_have_text(
        ["linear_1", "sub_1", "log_1 ◆ origin", "mul_1"], timeout=30_000
    )
    graph.locator('.tln-lin-item[data-label="linear_1"] .tln-lin-node').click()
    expect(panel.locator(".tln-lin-detail h4").first).to_have_text("Details of linear_1")

    # an exit button: the kernel runs the action and ships the lineage panel's module
    panel.get_by_role("button", name="Show lineage").click()
    followup = panel.locator('.tln-followup .tln-panel[data-panel="lineage"]')
    expect(followup.locator(".tln-type")).to_have_text("lineage", timeout=30_000)
    expect(followup.locator(".tln-lead")).to_have_text(
        "log_1 has 1 ancestor and 1 descendant within depth 1."
    )
    followup.get_by_role("button", name="Show 1 more output of mul_1").click()
    expect(followup.locator(".tln-lin-label")).to_have_text(
        ["sub_1", "log_1 ◆ origin", "mul_1", "linear_2"], timeout=30_000
    )
    nb.screenshot("lab_nonfinite")
