"""End-to-end tier: the grad_fn panel of a sketch made in an earlier cell, in real JupyterLab.

One scenario: a 12-block GPT-2 loss is computed in cell 0 (as in a notebook, nothing captured),
cell 1 displays ``walk_grad_fn`` of it; in the page, a block is unfolded from its box, a node is
found by search inside folded groups, its details show its shapes, and the tree folds the block
again. Screenshot: tests/artifacts/lab_grad_fn.png.
"""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.slow

CELLS = [
    "import torch\n"
    "import torchlens_nb as tl\n"
    "from tests import models\n"
    "model = models.tiny_gpt2(n_layer=12)\n"
    "ids = torch.arange(8).unsqueeze(0)\n"
    "loss = model(input_ids=ids, labels=ids).loss",
    "tl.debug.walk_grad_fn(loss, model=model)",
]


def test_grad_fn_panel_folds_searches_and_shows_details_in_lab(lab_notebook) -> None:
    nb = lab_notebook(CELLS, name="grad_fn.ipynb")
    nb.run_cell(0)
    outputs = nb.run_cell(1)
    assert outputs[0]["data"]["text/plain"].startswith(
        "grad_fn [complete] 1 output, shape (): 785 autograd nodes (148 leaves)"
    )
    panel = nb.output_panel(1)
    graph = panel.locator(".tln-gg")
    expect(panel.locator(".tln-gg-legend")).to_contain_text("no values, no timing, no verification")
    expect(graph).to_have_attribute("data-units", "137")

    # unfold a folded box by clicking it (search centres it first: the graph is tall)
    search = panel.get_by_role("searchbox", name="Search nodes by name")
    search.fill("transformer.h.5.mlp")
    search.press("Enter")
    panel.locator('[data-key="g:transformer.h.5.mlp"]').click()
    expect(panel.locator('[data-key="g:transformer.h.5.mlp.c_fc"]')).to_have_count(1)
    expect(
        panel.get_by_role("button", name="Fold transformer.h.5.mlp (16 nodes)")
    ).to_have_attribute("aria-expanded", "true")

    # search a parameter inside a folded group, open it, read its details
    search.fill("h.7.attn.c_proj.bias")
    panel.get_by_role("region", name="Search results").get_by_role("button").click()
    details = panel.locator(".tln-gg-details")
    expect(details.locator("h3")).to_have_text("transformer.h.7.attn.c_proj.bias")
    expect(details).to_contain_text("(32,) float32")

    # click an op node for its saved shapes
    consumer = details.get_by_role("button", name="AddmmBackward0", exact=False).first
    consumer.click()
    expect(details.locator("h3")).to_have_text("AddmmBackward0")
    expect(details).to_contain_text("Saved for backward")

    # fold the block again from the tree
    panel.get_by_role("button", name="Fold transformer.h.5.mlp (16 nodes)").click()
    expect(panel.locator('[data-key="g:transformer.h.5.mlp"]')).to_have_count(1)
    nb.screenshot("lab_grad_fn")
