"""End-to-end tier: follow-ups survive the way people write notebooks, in a real JupyterLab.

One scenario (~60 s): the gradient-health tutorial's flow (report, then ``trace`` rebound and
collected) and the compare tutorial's (traces passed inline); both reports' lineage clicks
still answer from the kernel. Locations in the notebook read "Cell In[1], line N"; the text card
printed beside each panel (for converters with no network) is hidden where the panel runs.
Screenshots: tests/artifacts/lab_followups_light.png, tests/artifacts/lab_followups_dark.png.
"""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.slow

CELLS = [
    "import gc\n"
    "import torch\n"
    "from torch import nn\n"
    "import torchlens_nb as tl\n"
    "from torchlens_nb.options import CaptureOptions\n"
    "class Block(nn.Module):\n"
    "    def __init__(self, dead):\n"
    "        super().__init__()\n"
    "        self.linear, self.dead = nn.Linear(8, 8), dead\n"
    "    def forward(self, x):\n"
    "        return torch.relu(self.linear(x) - 1e3 * self.dead)\n"  # line 11: a dead block
    "torch.manual_seed(1)\n"
    "model = nn.Sequential(Block(False), Block(True), Block(False))\n"
    "trace = tl.trace(model, torch.randn(4, 8), capture=CaptureOptions(save_grads=True))\n"
    "trace.backward(trace.output.square().mean())\n"
    "report = tl.debug.grad_health(trace)\n"
    "report",
    "trace = tl.trace(model, torch.randn(4, 8))  # the notebook rebinds trace\ngc.collect()",
    "torch.manual_seed(0)\n"
    "gelu = nn.Sequential(nn.Linear(4, 4), nn.GELU(), nn.Linear(4, 2))\n"
    "compared = tl.debug.compare(tl.trace(gelu, torch.randn(2, 4)), tl.trace(gelu, torch.randn(2, 4)))\n"
    "gc.collect()\n"
    "compared",
]


def test_lineage_clicks_answer_after_the_traces_are_gone(lab_notebook) -> None:
    nb = lab_notebook(CELLS, name="followups.ipynb")
    nb.run_cell(0)
    health = nb.output_panel(0)
    expect(health.locator(".tln-head .tln-badge")).to_have_attribute("data-tone", "warning")
    # the card printed beside the panel for offline converters is hidden where the panel runs
    card = nb.page.locator(".jp-Notebook .jp-Cell").nth(0).locator(".tln-card-beside-panel")
    expect(card).to_have_count(1)
    expect(card).to_be_hidden()
    nb.run_cell(1)
    frontier = health.locator('tr[data-frontier="true"] .tln-row-button')
    op = frontier.inner_text()
    frontier.click()
    lineage = health.locator('.tln-followup .tln-panel[data-panel="lineage"]')
    expect(lineage.locator(".tln-lead")).to_have_text(
        f"{op} has 1 ancestor and 1 descendant within depth 1.", timeout=30_000
    )
    source = lineage.locator(".tln-lin-detail dd").nth(3)
    expect(source).to_have_text("Cell In[1], line 11")  # as IPython's tracebacks name the cell
    expect(lineage.locator(".tln-notes")).to_contain_text("the trace was released")

    nb.run_cell(2)
    compare = nb.output_panel(2)
    compare.get_by_role("button", name="Lineage of linear_1").click()
    followup = compare.locator('.tln-followup .tln-panel[data-panel="lineage"]')
    expect(followup.locator(".tln-lead")).to_have_text(
        "linear_1 has 1 ancestor in total.", timeout=30_000
    )
    health.evaluate("el => el.scrollIntoView()")
    nb.screenshot("lab_followups_light")
    nb.set_theme("JupyterLab Dark")
    try:
        expect(health).to_have_attribute("data-tln-theme", "dark")
        nb.screenshot("lab_followups_dark")
    finally:  # the theme is a user setting of the session's Lab: later tests start light
        nb.set_theme("JupyterLab Light")
