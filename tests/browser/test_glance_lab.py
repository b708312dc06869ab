"""End-to-end tier: panels that read right at a glance (issue 32) in a real JupyterLab kernel.

One scenario (a few minutes under load): locations of hot_path and tl.dead read "Cell In[N],
line L" only (ipykernel names the cells here, no stand-in); a warning raised by the kit names
the user's cell; a live overfit panel whose loss_fn raises at step 5 ends in a final state; a
nested fact is one line; the lineage exit after an expand names the frontier node; the tour's
grad_fn graph fills the panel width with separate group labels. Screenshots, light and dark:
tests/artifacts/lab_glance_*_{light,dark}.png.
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.slow

CELL_LOCATION = re.compile(r"Cell In\[\d+\], line \d+")

CELLS = [
    # 0: a model defined in a cell, so its ops' source lines are this cell's
    "import warnings\n"
    "import torch\n"
    "from torch import nn\n"
    "import torchlens_nb as tl\n"
    "from torchlens_nb.report._location import location_text\n"
    "\n"
    "class DeadRelu(nn.Module):\n"
    "    def __init__(self):\n"
    "        super().__init__()\n"
    "        torch.manual_seed(0)\n"
    "        self.fc = nn.Linear(4, 4)\n"
    "        with torch.no_grad():\n"
    "            self.fc.bias[:2] = -100.0\n"
    "\n"
    "    def forward(self, x):\n"
    "        return torch.relu(self.fc(x))\n",
    # 1
    "trace = tl.trace(DeadRelu(), torch.randn(8, 4))\ntl.debug.hot_path(trace)",
    # 2
    "model = DeadRelu()\n"
    "tl.dead([tl.trace(model, torch.randn(8, 4), save=tl.func('relu')) for _ in range(2)])",
    # 3: a kit warning from a training loop
    "mlp = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8))\n"
    "opt = torch.optim.SGD(mlp.parameters(), lr=0.1)\n"
    "session = tl.debug.ChecksSession(mlp, opt, scaler=None)\n"
    "session.register_change_check(window=2, min_hits=2)\n"
    "with warnings.catch_warnings(record=True) as caught, session:\n"
    "    warnings.simplefilter('always')\n"
    "    for _ in range(3):\n"
    "        opt.zero_grad()\n"
    "        mlp[:2](torch.randn(4, 8))[:, :4].square().mean().backward()\n"
    "        opt.step()\n"
    "kit = [w for w in caught if issubclass(w.category, tl.errors.TorchlensNbWarning)]\n"
    "print('WARNED AT', location_text(kit[0].filename, kit[0].lineno))",
    # 4: a live overfit panel whose loss_fn raises at step 5
    "calls = 0\n"
    "def flaky_loss(out, y):\n"
    "    global calls\n"
    "    calls += 1\n"
    "    if calls == 5:\n"
    "        raise ValueError('target 9 is out of range')\n"
    "    return nn.functional.cross_entropy(out, y)\n"
    "torch.manual_seed(0)\n"
    "net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))\n"
    "try:\n"
    "    tl.recipes.overfit_one_batch(net, (torch.randn(16, 8), torch.randint(0, 4, (16,))),\n"
    "                                 flaky_loss, steps=100)\n"
    "except ValueError as error:\n"
    "    print('RAISED', error)",
    # 5: a nested fact
    "from torchlens_nb.report import Finding, Report\n"
    "Report(subject='facts', status='warn', lead='A finding whose facts nest.', findings=(\n"
    "    Finding('nonfinite_grads', 'warning', 'two parameters received a non-finite gradient.',\n"
    "            fields={'counts': {'zeroed': 3, 'nan_count': 12, 'inf_count': 0}}),))",
    # 6: the lineage exit after an expand
    "from tests.nonfinite.nan_models import X, LogOfNegative, Net\n"
    "first = tl.debug.lineage(tl.trace(Net(LogOfNegative()), X), 'linear_2', max_depth=1)\n"
    "first.run_action('expand', label='log_1', direction='ancestors')",
    # 7: the tour's grad_fn graph
    "from tests.browser.test_glance_panel import TwoTower\n"
    "torch.manual_seed(0)\n"
    "towers = TwoTower()\n"
    "logits = towers(torch.randn(4, 16), torch.randn(4, 24)) / 0.07\n"
    "tl.debug.walk_grad_fn(nn.functional.cross_entropy(logits, torch.arange(4)), model=towers)",
]

SHOTS = {1: "hot_path", 2: "dead", 4: "overfit_stopped", 5: "facts", 6: "lineage", 7: "grad_fn"}


def _text(outputs: list[dict]) -> str:
    return "".join(
        o.get("text", "")
        if o.get("output_type") == "stream"
        else o.get("data", {}).get("text/plain", "")
        for o in outputs
    )


def test_panels_read_right_at_a_glance_in_lab(lab_notebook) -> None:
    nb = lab_notebook(CELLS, name="glance.ipynb")
    nb.run_cell(0)

    assert CELL_LOCATION.search(_text(nb.run_cell(1)))  # the text card's lead
    hot = nb.output_panel(1)
    expect(hot.locator(".tln-lead")).to_have_text(re.compile(r"^Cell In\[\d+\], line 16 carries"))
    expect(hot.locator(".tln-cost-where").first).to_have_text(
        re.compile(r"^Cell In\[\d+\], line 16$")
    )
    assert "ipykernel" not in hot.inner_text()

    nb.run_cell(2)
    dead = nb.output_panel(2)
    table = dead.locator("table.tln-table").first
    columns = table.locator("thead button").evaluate_all("(bs) => bs.map((b) => b.dataset.column)")
    file_cell = table.locator("tbody tr").first.locator("th, td").nth(columns.index("file"))
    expect(file_cell).to_have_text(re.compile(r"^Cell In\[\d+\]$"))
    assert "ipykernel" not in table.inner_text()

    warned = _text(nb.run_cell(3))
    assert re.search(r"WARNED AT Cell In\[\d+\], line 10\b", warned), warned

    assert "RAISED target 9 is out of range" in _text(nb.run_cell(4))
    overfit = nb.output_panel(4)
    expect(overfit.locator(".tln-badge-word")).to_have_text("inconclusive")
    expect(overfit.locator(".tln-lead")).to_contain_text("stopped at step 5/100: the step raised")
    expect(overfit.locator(".tln-recipe-progress")).to_have_count(0)

    nb.run_cell(5)
    facts = nb.output_panel(5)
    facts.locator(".tln-finding summary").click()
    counts = facts.locator(".tln-finding-body > dl.tln-facts > dd").first
    expect(counts).to_have_text("zeroed 3 · nan_count 12 · inf_count 0")
    pair_height = counts.locator(".tln-fact-pair").first.bounding_box()["height"]
    assert counts.bounding_box()["height"] < 1.5 * pair_height

    nb.run_cell(6)
    lineage = nb.output_panel(6)
    expect(lineage.locator(".tln-exits button[data-action=expand]")).to_have_text("Expand sub_1")

    nb.run_cell(7)
    graph = nb.output_panel(7)
    graph.get_by_role("button", name="Unfold every group").click()
    graph.get_by_role("button", name="Fit the graph to the view").click()
    stage = graph.locator(".tln-gg-stage").bounding_box()
    assert stage["width"] >= 0.7 * graph.bounding_box()["width"]
    labels = graph.locator("text.tln-gg-frame-label")
    expect(labels).to_have_count(3)  # text, text.0, text.2
    boxes = [labels.nth(i).bounding_box() for i in range(3)]
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            assert not (
                a["x"] < b["x"] + b["width"]
                and b["x"] < a["x"] + a["width"]
                and a["y"] < b["y"] + b["height"]
                and b["y"] < a["y"] + a["height"]
            ), "group labels overlap"

    try:
        for theme, mode in (("JupyterLab Light", "light"), ("JupyterLab Dark", "dark")):
            nb.set_theme(theme)
            for index, name in SHOTS.items():
                panel = nb.output_panel(index)
                panel.scroll_into_view_if_needed()
                nb.screenshot(f"lab_glance_{name}_{mode}", panel)
    finally:  # the theme is a user setting of the session's Lab: later tests start light
        nb.set_theme("JupyterLab Light")
