"""End-to-end tier: from the checks dashboard to spike forensics in a real JupyterLab.

One scenario (~60 s): a cell displays a ChecksSession and trains the LR-growth reproduction of
``tests/stability`` (its loss spikes at attempt 193); when the cell ends, the dashboard's final
report offers "Explain the spike", whose button runs ``session.spike_forensics()`` in the kernel
and shows the spike panel below it. Screenshots: tests/artifacts/lab_spike.png and
lab_spike_dark.png.
"""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.slow

CELLS = [
    "import torch\n"
    "import torchlens_nb as tl\n"
    "from tests.stability import gpt\n"
    "from tests.stability.cases import LR_GROWTH\n"
    "torch.set_num_threads(1)\n"
    "model, optimizer, scheduler = gpt.build(LR_GROWTH)\n"
    "table, gen = gpt.markov_chain(0), torch.Generator().manual_seed(0)\n"
    "session = tl.debug.ChecksSession(model, optimizer, scaler=None)\n"
    "display(session)\n"
    "with session:\n"
    "    for step in range(LR_GROWTH.steps):\n"
    "        tokens = gpt.markov_batch(table, gen)\n"
    "        optimizer.zero_grad()\n"
    "        gpt.loss_of(model, tokens, 0.0).backward()\n"
    "        optimizer.step()\n"
    "        scheduler.step()\n",
]


def test_the_dashboard_exit_explains_the_spike(lab_notebook) -> None:
    nb = lab_notebook(CELLS, name="spike.ipynb")
    nb.run_cell(0)
    panel = nb.output_panel(0)
    expect(panel.locator(".tln-ck-final")).to_have_text("Final report (completed).", timeout=30_000)
    button = panel.get_by_role("button", name="Explain the spike")
    button.click()
    followup = panel.locator('.tln-followup .tln-panel[data-panel="spike"]')
    expect(followup.locator(".tln-lead")).to_contain_text(
        "Attempt 193, loss 4.06 (2.3x its running median)", timeout=30_000
    )
    chart = followup.get_by_role(
        "img", name="Jump against the previous step per layer (log axis; 2x counts as a jump)"
    )
    expect(chart.locator('g.tln-spike-layer[data-jumped="true"]').first).to_have_attribute(
        "data-layer", "blocks.1.ln1"
    )
    followup.scroll_into_view_if_needed()
    nb.screenshot("lab_spike", followup)
    nb.set_theme("JupyterLab Dark")
    nb.screenshot("lab_spike_dark", followup)
    nb.set_theme("JupyterLab Light")
