"""End-to-end tier: what a new user trips over in JupyterLab (issue 45), with Lab's own stylesheet.

Three scenarios: a recipe's report as the cell's last expression shows one panel (the live one,
ending on the final report), and the same report shows as usual in a later cell; a NaN that
came with the batch, found from the dashboard's button (ipywidgets' comm callback calls the
replay), is placed in the batch (its rows), never at a library's line, and the dashboard of that
plain ``ChecksSession(model, optimizer)`` asks for no ``scaler=``; label lists stay on one
line under Lab's ``.jp-OutputArea-output dt {float: left; width: 20%}``, the grad_fn details
show their content, and after "Unfold all" the cue promises Fit only when Fit can show it all.
Screenshots, light and dark: tests/artifacts/lab_new_user_*.png.
"""

from __future__ import annotations

import pytest
from playwright.sync_api import Locator, expect

from tests.browser.lab import LabNotebook

pytestmark = pytest.mark.slow

_JS_TOP_PANELS = """(i) => {
  const cell = document.querySelectorAll('.jp-Notebook .jp-Cell')[i];
  // panels of this cell's outputs, not the follow-up panels nested inside one
  return [...cell.querySelectorAll('.jp-OutputArea-output .tln-panel')]
    .filter((el) => !el.parentElement.closest('.tln-panel'))
    .map((el) => el.dataset.panel);
}"""

ONE_PANEL_CELLS = [
    "import torch\n"
    "from torch import nn\n"
    "import torchlens_nb as tl\n"
    "torch.manual_seed(0)\n"
    "classifier = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 3), nn.Softmax(dim=-1))\n"
    "batch = (torch.randn(64, 8), torch.randint(0, 3, (64,)))\n"
    "optimizer = torch.optim.Adam(classifier.parameters(), lr=3e-4)",
    "t = tl.recipes.triage(classifier, batch, nn.CrossEntropyLoss(), optimizer=optimizer)\nt",
    "t",
    "net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))\n"
    "r = tl.recipes.overfit_one_batch(net, batch, nn.CrossEntropyLoss(), steps=30)\n"
    "r",
]


def _widget_outputs(outputs: list[dict]) -> int:
    return sum(
        1 for o in outputs if "application/vnd.jupyter.widget-view+json" in o.get("data", {})
    )


def test_a_recipe_report_as_the_last_expression_shows_one_panel(lab_notebook) -> None:
    nb = lab_notebook(ONE_PANEL_CELLS, name="one_panel.ipynb")
    nb.run_cell(0)
    triage_outputs = nb.run_cell(1)
    panel = nb.output_panel(1)
    expect(panel.locator(".tln-head .tln-badge")).to_contain_text("fail")  # the final report
    assert _widget_outputs(triage_outputs) == 1, triage_outputs
    assert nb.page.evaluate(_JS_TOP_PANELS, 1) == ["triage"]
    # the same report in a later cell is an ordinary display
    assert _widget_outputs(nb.run_cell(2)) == 1
    nb.output_panel(2)
    assert nb.page.evaluate(_JS_TOP_PANELS, 2) == ["triage"]
    overfit_outputs = nb.run_cell(3)
    nb.output_panel(3)
    assert _widget_outputs(overfit_outputs) == 1, overfit_outputs
    assert len(nb.page.evaluate(_JS_TOP_PANELS, 3)) == 1


NAN_BATCH_CELLS = [
    "import torch\n"
    "from torch import nn\n"
    "import torchlens_nb as tl\n"
    "torch.manual_seed(0)\n"
    "model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))\n"
    "optimizer = torch.optim.AdamW(model.parameters())\n"
    "session = tl.debug.ChecksSession(model, optimizer)\n"
    "session.register_nonfinite_grad_check()\n"
    "def loss_fn(output):\n"
    "    return output.square().mean()\n"
    "display(session)\n"
    "try:\n"
    "    with session:\n"
    "        for step in range(6):\n"
    "            x = torch.rand(8, 4)\n"
    "            if step == 4:\n"
    "                x[5, 2] = float('nan')\n"
    "                x[6, 0] = float('inf')\n"
    "            with session.step(global_step=step, inputs=x, loss_fn=loss_fn):\n"
    "                optimizer.zero_grad()\n"
    "                loss_fn(model(x)).backward()\n"
    "                optimizer.step()\n"
    "except tl.errors.CheckViolationError as err:\n"
    "    print('stopped at step', err.replay.global_step)\n",
]


def _facts(region: Locator) -> dict[str, str]:
    return dict(zip(region.locator("dt").all_inner_texts(), region.locator("dd").all_inner_texts()))


def test_a_nan_that_came_with_the_batch_is_placed_in_its_rows(lab_notebook) -> None:
    nb = lab_notebook(NAN_BATCH_CELLS, name="nan_batch.ipynb")
    outputs = nb.run_cell(0)
    assert any("stopped at step 4" in o.get("text", "") for o in outputs), outputs
    panel = nb.output_panel(0)
    # a plain ChecksSession(model, optimizer) with no AMP: no scaler= to declare, no site codes
    expect(panel.locator('[data-ledger="scale"]')).to_have_text(
        "Skip ledger: every attempt stepped the optimizer: none was skipped"
    )
    expect(panel).not_to_contain_text("scaler=")
    expect(panel.locator(".tln-ck-checks")).not_to_contain_text("S-")
    # the button's click reaches Python through ipywidgets' comm callback
    panel.get_by_role("button", name="Find where the value was born").click()
    followup = panel.locator('.tln-followup .tln-panel[data-panel="nonfinite"]')
    card = followup.get_by_role("region", name="First non-finite output")
    expect(card).to_contain_text("input_1 (input)", timeout=30_000)
    facts = _facts(card)
    assert facts["source"] == "—"  # not widget.py, not the investigate() line
    assert facts["inputs"] == "none: a model input, the values came with the batch"
    assert facts["batch rows"] == "5, 6 (2 of 8)"
    nb.screenshot("lab_new_user_nan_batch", panel)


CSS_CELLS = [
    "import torch\n"
    "import torchlens_nb as tl\n"
    "from tests import models\n"
    "from tests.nonfinite.nan_models import X, LogOfNegative, Net\n"
    "origin = tl.debug.nonfinite_origin(tl.trace(Net(LogOfNegative()), X))\n"
    "origin",
    "model = models.tiny_gpt2(n_layer=6)\n"
    "ids = torch.arange(8).unsqueeze(0)\n"
    "tl.debug.walk_grad_fn(model(input_ids=ids, labels=ids).loss, model=model)",
]


def _assert_one_line_each(dl: Locator) -> None:
    """Each label sits on one line, on the same row as its value."""
    rows = dl.evaluate(
        """(dl) => [...dl.querySelectorAll(':scope > dt')].map((dt) => {
          const dd = dt.nextElementSibling, line = parseFloat(getComputedStyle(dt).lineHeight);
          const a = dt.getBoundingClientRect(), b = dd.getBoundingClientRect();
          return { label: dt.textContent, lines: Math.round(a.height / line),
                   sameRow: Math.abs(a.top - b.top) < 2 };
        })"""
    )
    assert rows and all(r["lines"] == 1 and r["sameRow"] for r in rows), rows


def _check_lists_and_details(nb: LabNotebook, theme: str) -> None:
    origin = nb.output_panel(0)
    _assert_one_line_each(origin.get_by_role("region", name="Origin").locator("dl"))
    origin.locator('.tln-lin-item[data-origin="true"] .tln-lin-node').click()
    details = origin.locator(".tln-lin-detail dl").first
    expect(details).to_contain_text("finite min / mean / max")
    _assert_one_line_each(details)
    nb.screenshot(f"lab_new_user_lists_{theme}", origin)

    graph = nb.output_panel(1)
    search = graph.get_by_role("searchbox", name="Search nodes by name")
    search.fill("h.3.attn.c_proj.bias")
    graph.get_by_role("region", name="Search results").get_by_role("button").click()
    consumer = graph.locator(".tln-gg-details").get_by_role(
        "button", name="AddmmBackward0", exact=False
    )
    consumer.first.click()
    expect(graph.locator(".tln-gg-details h3")).to_have_text("AddmmBackward0")
    slot = graph.locator(".tln-gg-details-slot")
    shown, content = slot.evaluate("(el) => [el.clientHeight, el.scrollHeight]")
    assert content <= shown + 1, (shown, content)  # the details fit their box: nothing hidden
    nb.screenshot(f"lab_new_user_grad_fn_{theme}", graph)


def test_label_lists_and_grad_fn_details_read_whole_under_lab_css(lab_notebook) -> None:
    nb = lab_notebook(CSS_CELLS, name="lab_css.ipynb")
    nb.run_cell(0)
    nb.run_cell(1)
    graph = nb.output_panel(1)
    # the 6-block GPT-2 starts at the level docs/autograd_graph.md states: blocks open on their
    # folded attention, MLP and norms (77 boxes)
    expect(graph.locator(".tln-gg")).to_have_attribute("data-units", "77")
    _check_lists_and_details(nb, "light")
    nb.set_theme("JupyterLab Dark")
    try:
        expect(graph).to_have_attribute("data-tln-theme", "dark")
        _check_lists_and_details(nb, "dark")
    finally:  # the theme is a user setting of the session's Lab: later tests start light
        nb.set_theme("JupyterLab Light")

    # "Unfold all": 401 boxes are taller than the view even at the smallest zoom; the cue says
    # so instead of promising that Fit shows everything
    graph.get_by_role("button", name="Unfold every group").click()
    expect(graph.locator(".tln-gg")).to_have_attribute("data-units", "401", timeout=30_000)
    graph.get_by_role("button", name="Fit the graph to the view").click()
    cue = graph.locator(".tln-gg-cue")
    expect(cue).to_contain_text("too large to fit at the smallest zoom")
    expect(cue).not_to_contain_text("Fit to see all of it")
