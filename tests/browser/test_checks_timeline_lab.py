"""End-to-end tier: the dashboard's timeline in a real JupyterLab, growing while the cell runs.

One scenario (~60 s): a cell displays a ChecksSession on the 2-block GPT of ``tests/stability``
and trains 60 steps in the same cell (~6 s). The test reads how many columns the timeline's loss
curve spans while the kernel is still busy with that cell; when the cell ends the panel shows the
final report's timeline, one heatmap per measured metric.
Screenshots: tests/artifacts/lab_checks_timeline.png and lab_checks_timeline_dark.png.
"""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.slow

STEPS = 60
CELLS = [
    "import time\n"
    "import torch\n"
    "import torchlens_nb as tl\n"
    "from tests.stability import gpt\n"
    "model, optimizer, _ = gpt.build(gpt.Setup('lab', steps=60, lr=3e-3))\n"
    "table, generator = gpt.markov_chain(0), torch.Generator().manual_seed(0)\n"
    "session = tl.debug.ChecksSession(model, optimizer, scaler=None)\n"
    "display(session)\n"
    "with session:\n"
    f"    for step in range({STEPS}):\n"
    "        optimizer.zero_grad()\n"
    "        gpt.loss_of(model, gpt.markov_batch(table, generator), 0.0).backward()\n"
    "        optimizer.step()\n"
    "        time.sleep(0.1)\n",
]


def test_the_timeline_grows_while_the_cell_is_still_running(lab_notebook) -> None:
    nb = lab_notebook(CELLS, name="checks_timeline.ipynb")
    loss = nb.output_panel(0, wait=False).locator('svg[data-chart="loss"]')
    spans_seen = nb.sample_while_running(
        0,
        lambda: [loss.first.get_attribute("viewBox") or ""] if loss.count() else [],
        seconds=90,
        period_ms=100,
    )
    panel = nb.output_panel(0)
    # 60 steps over ~6 s, and the feed sends a timeline at most twice a second
    assert len(spans_seen) >= 3, spans_seen
    expect(panel.locator(".tln-ck-final")).to_have_text("Final report (completed).", timeout=30_000)
    expect(loss).to_have_attribute("viewBox", f"0 0 {STEPS} 90")
    for metric in ("grad_norm", "update_ratio", "activation_rms", "attention_logit"):
        expect(panel.locator(f'canvas[data-metric="{metric}"]')).to_have_count(1)
    timeline = panel.locator("[data-timeline]")
    timeline.scroll_into_view_if_needed()
    nb.screenshot("lab_checks_timeline", timeline)
    nb.set_theme("JupyterLab Dark")
    try:
        expect(panel).to_have_attribute("data-tln-theme", "dark")
        nb.screenshot("lab_checks_timeline_dark", timeline)
    finally:  # the theme is a user setting of the session's Lab: later tests start light
        nb.set_theme("JupyterLab Light")
