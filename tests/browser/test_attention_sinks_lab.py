"""End-to-end tier: the attention_sinks panel in a real JupyterLab, through the kernel.

One scenario: ``tl.debug.attention_sinks`` on the offline MiniLM and one sentence renders as the
attention_sinks panel; its binary pattern block travels as a widget buffer and inflates in the
browser; clicking a head cell shows that head's pattern with the sentence's tokens on both axes.
Screenshot: tests/artifacts/lab_attention_sinks.png.
"""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.slow

CELLS = [
    "import torchlens_nb as tl\n"
    "from tests.attention_sinks import minilm\n"
    "tokenizer = minilm.tokenizer()\n"
    "batch = tokenizer(['Paris is the capital of France.'], return_tensors='pt')\n"
    "report = tl.debug.attention_sinks(minilm.trained(), batch, tokenizer)\n"
    "report",
]
TOKENS = ["[CLS]", "paris", "is", "the", "capital", "of", "france", ".", "[SEP]"]


def test_clicking_a_head_in_lab_shows_its_pattern_with_the_tokens(lab_notebook) -> None:
    nb = lab_notebook(CELLS, name="attention_sinks.ipynb")
    outputs = nb.run_cell(0)
    assert outputs[0]["data"]["text/plain"].startswith("attention_sinks [flagged] BertModel")
    panel = nb.output_panel(0)
    cell = panel.locator('.tln-as-cell[data-layer="2"][data-head="9"]')
    expect(cell.locator(".tln-as-token")).to_have_text("◆ [CLS]")
    cell.click()
    figure = panel.locator('figure.tln-as-pattern[data-layer="2"][data-head="9"]')
    expect(figure.locator(".tln-as-keys li")).to_have_text(TOKENS, timeout=30_000)
    expect(figure.locator(".tln-as-queries li")).to_have_text(TOKENS)
    expect(figure.locator('.tln-as-keys li[data-sink="true"]')).to_have_text(["[CLS]"])
    nb.screenshot("lab_attention_sinks")
