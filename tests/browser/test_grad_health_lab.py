"""End-to-end tier: the grad_health frontier table in a real JupyterLab, through the kernel.

One scenario (~30 s): the report of the five-block MLP with a dead block renders as the
grad_health panel; sorting and the "Flagged only" filter work on the rows the kernel sent as
binary columns; clicking the frontier row asks the kernel for its lineage, whose panel (another
bundle, shipped by the kernel) appears below. Screenshot: tests/artifacts/lab_grad_health.png.
"""

from __future__ import annotations

import pytest
import torch
from playwright.sync_api import expect

import torchlens_nb as tl
from tests.models import five_block_mlp, traced_backward

pytestmark = pytest.mark.slow

CELLS = [
    "import torch\n"
    "import torchlens_nb as tl\n"
    "from tests.models import five_block_mlp, traced_backward\n"
    "torch.manual_seed(1)\n"
    "trace = traced_backward(five_block_mlp(), torch.randn(4, 8))\n"
    "report = tl.debug.grad_health(trace)\n"
    "report",
]


def expected_order() -> list[str]:
    """The cell's report rebuilt here, sorted by grad_norm as pandas sorts it."""
    torch.manual_seed(1)
    report = tl.debug.grad_health(traced_backward(five_block_mlp(), torch.randn(4, 8)))
    return report.to_pandas().sort_values("grad_norm", kind="stable").op.tolist()


def test_frontier_table_sorts_filters_and_opens_lineage_in_lab(lab_notebook) -> None:
    nb = lab_notebook(CELLS, name="grad_health.ipynb")
    outputs = nb.run_cell(0)
    assert outputs[0]["data"]["text/plain"].startswith(
        "grad_health [found] Sequential backward 0 (11 gradients)"
    )
    panel = nb.output_panel(0)
    expect(panel.locator('tr[data-frontier="true"] .tln-gh-frontier')).to_have_text("◆ frontier")
    ops = panel.locator(".tln-gh-table tbody tr[data-op] th")

    panel.get_by_label("Group by module").uncheck()
    panel.get_by_role("button", name="grad_norm").click()
    expect(ops).to_have_text(expected_order())
    panel.get_by_label("Flagged only").check()
    expect(ops).to_have_count(5)

    panel.get_by_role("button", name="Lineage of linear_3", exact=True).click()
    followup = panel.locator('.tln-followup .tln-panel[data-panel="lineage"]')
    expect(followup.locator(".tln-lead")).to_have_text(
        "linear_3 has 1 ancestor and 1 descendant within depth 1.", timeout=30_000
    )
    nb.screenshot("lab_grad_health")
