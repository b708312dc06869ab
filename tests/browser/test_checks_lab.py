"""End-to-end tier: the live checks dashboard in a real JupyterLab, updating while the cell runs.

One scenario (~30 s): a cell displays a ChecksSession and then trains for ~4 s in the same cell.
The test reads the panel's ``accepted`` counter while the kernel is still busy with that cell
and counts the distinct values it saw; when the cell ends the panel shows the final report.
Screenshots: tests/artifacts/lab_checks.png; after a raise, the replay from the dashboard's
button: lab_checks_investigate.png and lab_checks_investigate_dark.png.
"""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.slow

STEPS = 40
CELLS = [
    "import time\n"
    "import torch\n"
    "import torch.nn as nn\n"
    "import torchlens_nb as tl\n"
    "torch.manual_seed(0)\n"
    "model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))\n"
    "optimizer = torch.optim.AdamW(model.parameters())\n"
    "session = tl.debug.ChecksSession(model, optimizer, scaler=None)\n"
    "session.register_change_check()\n"
    "session.register_nonfinite_grad_check()\n"
    "session.register_update_ratio_check(every=1)\n"
    "display(session)\n"
    "with session:\n"
    f"    for step in range({STEPS}):\n"
    "        optimizer.zero_grad()\n"
    "        model(torch.randn(4, 8)).square().mean().backward()\n"
    "        optimizer.step()\n"
    "        time.sleep(0.1)\n",
]


def test_dashboard_counts_up_while_the_cell_is_still_running(lab_notebook) -> None:
    nb = lab_notebook(CELLS, name="checks_live.ipynb")
    accepted = nb.output_panel(0, wait=False).locator('[data-counter="accepted"]')
    seen_while_running = nb.sample_while_running(
        0, accepted.all_inner_texts, seconds=60, period_ms=50
    )
    panel = nb.output_panel(0)
    # the loop takes ~4 s and the feed sends up to 10 updates per second
    assert len(seen_while_running) >= 5, seen_while_running
    expect(panel.locator(".tln-ck-final")).to_have_text("Final report (completed).", timeout=30_000)
    expect(panel.locator('[data-counter="accepted"]')).to_have_text(str(STEPS))
    assert panel.locator('svg[data-chart="update_ratio"] circle').count() == STEPS
    nb.screenshot("lab_checks", panel)


RAISE_CELLS = [
    "import torch\n"
    "from torch import nn\n"
    "import torchlens_nb as tl\n"
    "class LogFeatures(nn.Module):\n"
    "    def __init__(self):\n"
    "        super().__init__()\n"
    "        self.proj = nn.Linear(4, 4)\n"
    "    def forward(self, x):\n"
    "        return self.proj(x) * torch.log(x + 3.0)\n"  # line 9: NaN once x < -3
    "torch.manual_seed(0)\n"
    "model = nn.Sequential(LogFeatures(), nn.Linear(4, 2))\n"
    "optimizer = torch.optim.AdamW(model.parameters())\n"
    "session = tl.debug.ChecksSession(model, optimizer, scaler=None)\n"
    "session.register_nonfinite_grad_check()\n"
    "def loss_fn(output):\n"
    "    return output.square().mean()\n"
    "display(session)\n"
    "try:\n"
    "    with session:\n"
    "        for step in range(10):\n"
    "            x = torch.rand(8, 4)\n"
    "            if step == 7:\n"
    "                x[5, 2] = -4.0\n"
    "            with session.step(global_step=step, inputs=x, loss_fn=loss_fn):\n"
    "                optimizer.zero_grad()\n"
    "                loss_fn(model(x)).backward()\n"
    "                optimizer.step()\n"
    "except tl.errors.CheckViolationError as err:\n"
    "    print('stopped at step', err.replay.global_step)\n",
]


def test_after_a_raise_the_dashboard_finds_where_the_value_was_born(lab_notebook) -> None:
    nb = lab_notebook(RAISE_CELLS, name="checks_raise.ipynb")
    outputs = nb.run_cell(0)
    assert any("stopped at step 7" in o.get("text", "") for o in outputs), outputs
    panel = nb.output_panel(0)
    expect(panel.locator(".tln-head .tln-badge")).to_have_attribute("data-tone", "critical")
    # the kernel is idle after the raise: the button runs the replay of the kept batch
    panel.get_by_role("button", name="Find where the value was born").click()
    followup = panel.locator('.tln-followup .tln-panel[data-panel="nonfinite"]')
    card = followup.get_by_role("region", name="First non-finite output")
    expect(card).to_contain_text("log_1 (log)", timeout=30_000)
    expect(card).to_contain_text("Cell In[1], line 9")
    expect(followup.locator(".tln-lead")).to_contain_text("replayed step: nan born at log_1")
    # the lineage of the origin, one ring at a time, as in nonfinite_origin's panel
    expect(followup.locator(".tln-lin-label").first).to_be_visible()
    panel.get_by_role("button", name="Find where the value was born").scroll_into_view_if_needed()
    nb.screenshot("lab_checks_investigate")
    nb.set_theme("JupyterLab Dark")
    try:
        expect(panel).to_have_attribute("data-tln-theme", "dark")
        nb.screenshot("lab_checks_investigate_dark")
    finally:  # the theme is a user setting of the session's Lab: later tests start light
        nb.set_theme("JupyterLab Light")
