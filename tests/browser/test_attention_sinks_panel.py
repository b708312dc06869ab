"""Fast browser tier: the attention_sinks panel on a real MiniLM report in headless chromium.

The report comes from ``tl.debug.attention_sinks`` on the offline MiniLM and one sentence;
screenshots: tests/artifacts/attention_sinks_*.png (look at them).
"""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

import torchlens_nb as tl
from tests.attention_sinks import minilm
from torchlens_nb import widgets

pytestmark = pytest.mark.browser

SENTENCE = "The cat sat on the mat near the door."


@pytest.fixture(scope="module")
def sinks_report():
    tokenizer = minilm.tokenizer()
    batch = tokenizer([SENTENCE], return_tensors="pt")
    report = tl.debug.attention_sinks(minilm.trained(), batch, tokenizer)
    return report, list(report.tokens)


def mount(panel_page, report):
    return panel_page.mount(
        "attention_sinks", widgets.panel_payload(report), arrays=widgets.panel_arrays(report)
    )


def strongest_sink(report) -> tuple[int, int]:
    return max(
        (
            (i, h)
            for i, layer in enumerate(report.layers)
            for h, flag in enumerate(layer.is_sink)
            if flag
        ),
        key=lambda lh: report.layers[lh[0]].masses[lh[1]],
    )


def test_clicking_a_head_cell_shows_its_pattern_with_the_token_labels(panel_page, sinks_report):
    report, tokens = sinks_report
    assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]" and len(tokens) == 12
    root = mount(panel_page, report)
    cells = root.locator(".tln-as-cell")
    assert cells.count() == 6 * 12
    layer, head = strongest_sink(report)
    cell = root.locator(f'.tln-as-cell[data-layer="{layer}"][data-head="{head}"]')
    assert cell.locator(".tln-as-token").inner_text() == "◆ [CLS]"  # Python flagged it
    cell.click()
    figure = root.locator(f'figure.tln-as-pattern[data-layer="{layer}"][data-head="{head}"]')
    expect(figure).to_be_visible()
    assert figure.locator(".tln-as-keys li").all_text_contents() == tokens
    assert figure.locator(".tln-as-queries li").all_text_contents() == tokens
    assert figure.locator('.tln-as-keys li[data-sink="true"]').all_text_contents() == ["[CLS]"]
    expect(cell).to_have_attribute("aria-pressed", "true")
    # Hover query 3 ("on") over key 0 ([CLS]): the readout shows the decoded probability.
    canvas = figure.locator("canvas")
    box = canvas.bounding_box()
    side = box["width"] / len(tokens)
    canvas.hover(position={"x": side * 0.5, "y": side * 3.5})
    value = report.pattern(layer, head)[3][0]
    expect(figure.locator(".tln-as-readout")).to_have_text(
        f"query sat (3) → key [CLS] (0): {value:.4g} · sink column"
    )
    panel_page.screenshot("attention_sinks_light", root)


def test_the_stepper_and_arrow_keys_walk_layers_and_heads(panel_page, sinks_report):
    report, _ = sinks_report
    root = mount(panel_page, report)
    root.locator('.tln-as-cell[data-layer="2"][data-head="5"]').click()
    root.locator('.tln-as-cell[data-layer="2"][data-head="5"]').press("ArrowRight")
    expect(root.locator('figure[data-layer="2"][data-head="6"]')).to_be_visible()
    root.locator('.tln-as-cell[data-layer="2"][data-head="6"]').press("ArrowDown")
    expect(root.locator('figure[data-layer="3"][data-head="6"]')).to_be_visible()
    expect(root.locator('.tln-as-cell[data-layer="3"][data-head="6"]')).to_be_focused()
    root.get_by_role("button", name="Previous head").click()
    expect(root.locator('figure[data-layer="3"][data-head="5"]')).to_be_visible()
    where = root.locator(".tln-as-where")
    expect(where).to_contain_text("Layer 3 (of 0–5) · head 5 (of 0–11)")


def test_the_head_list_sorts_by_mass_and_opens_a_head(panel_page, sinks_report):
    report, _ = sinks_report
    root = mount(panel_page, report)
    rows = root.locator(".tln-as-list tbody tr")
    heads = report.to_pandas("heads").sort_values("mass", ascending=False, kind="stable")
    first = rows.first
    assert (first.get_attribute("data-layer"), first.get_attribute("data-head")) == (
        str(heads["layer"].iloc[0]),
        str(heads["head"].iloc[0]),
    )
    root.get_by_role("button", name="mass").click()  # now ascending
    assert rows.first.get_attribute("data-head") == str(heads["head"].iloc[-1])
    rows.nth(4).get_by_role("button").click()
    layer, head = rows.nth(4).get_attribute("data-layer"), rows.nth(4).get_attribute("data-head")
    expect(root.locator(f'figure[data-layer="{layer}"][data-head="{head}"]')).to_be_visible()


def test_outlier_dims_are_labelled_on_the_bars_and_cleanup_releases_everything(
    panel_page, sinks_report
):
    report, _ = sinks_report
    root = mount(panel_page, report)
    chooser = root.get_by_label("Block output")
    flagged = [o for o in report.outlier_dims if o.label == report.residual[4].label]
    chooser.select_option("4")
    labels = root.locator(".tln-as-bar-label").all_text_contents()
    assert labels == [f"d{o.dim} {o.factor:.4g}×" for o in flagged] and labels
    assert root.locator(".tln-as-bar, .tln-as-bar-flagged").count() == 384
    panel_page.set_theme("dark")
    panel_page.screenshot("attention_sinks_dark", root)
    panel_page.cleanup()
    assert panel_page.listener_count() == 0 and panel_page.dom_listener_count() == 0


def test_the_offline_html_copy_inflates_and_shows_patterns(page, base_url, out_dir, sinks_report):
    report, tokens = sinks_report
    report.to_html(str(out_dir / "sinks.html"))
    page.goto(f"{base_url}/out/sinks.html")
    page.wait_for_selector('#tln-root[data-rendered="1"]')
    root = page.locator("#tln-root")
    root.locator('.tln-as-cell[data-layer="3"][data-head="2"]').click()
    figure = root.locator('figure.tln-as-pattern[data-layer="3"][data-head="2"]')
    expect(figure.locator(".tln-as-keys li")).to_have_text(tokens)


def test_a_128_token_pattern_keeps_every_label_and_thins_the_visible_ones(panel_page):
    tokenizer = minilm.tokenizer()
    text = " ".join([SENTENCE] * 14)
    batch = tokenizer([text], truncation=True, max_length=128, return_tensors="pt")
    report = tl.debug.attention_sinks(minilm.trained(), batch, tokenizer)
    root = mount(panel_page, report)
    root.locator('.tln-as-cell[data-layer="1"][data-head="0"]').click()
    keys = root.locator('figure[data-layer="1"][data-head="0"] .tln-as-keys li')
    assert keys.all_text_contents() == list(report.tokens) and keys.count() == 128
    # 4 px cells: one label in 3 is shown, the rest stay in the DOM for search and hover.
    assert root.locator(".tln-as-keys li:not(.tln-as-hidden-label)").count() == 43
    panel_page.screenshot("attention_sinks_128", root.locator("figure.tln-as-pattern"))
