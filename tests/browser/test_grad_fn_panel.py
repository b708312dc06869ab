"""Fast browser tier of the grad_fn panel: fold/unfold, search, node details, budgets.

Payloads come from real sketches: a GPT-2 with the 12 blocks of GPT-2 small (785 autograd nodes
in eval mode, 822 with dropout; the width does not change the graph) and the test MLP.
"""

from __future__ import annotations

import pytest
import torch
from playwright.sync_api import expect

import torchlens_nb as tl
from tests import models
from torchlens_nb import widgets

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def gpt2_small_shaped() -> tl.report.GradFnSketch:
    model = models.tiny_gpt2(n_layer=12)
    ids = torch.arange(8).unsqueeze(0)
    return tl.debug.walk_grad_fn(model(input_ids=ids, labels=ids).loss, model=model)


def _expect_units(root, count: int, timeout_ms: float = 5_000) -> None:
    """Wait until the graph shows ``count`` boxes and nodes (big layouts draw a frame later)."""
    expect(root.locator(".tln-gg")).to_have_attribute("data-units", str(count), timeout=timeout_ms)


def _expected_units(sketch, unfolded: set[str]) -> int:
    """Boxes + nodes shown: a node shows as its outermost folded group, or as itself."""
    keys = set()
    for node in sketch.nodes:
        parts = node.group.split(".") if node.group else []
        outer = [".".join(parts[:i]) for i in range(1, len(parts) + 1)]
        keys.add(next((a for a in outer if a not in unfolded), f"#{node.id}"))
    return len(keys)


def _level(sketch, depth: int) -> set[str]:
    return {g.address for g in sketch.groups if g.address.count(".") < depth}


def test_opens_at_the_deepest_level_that_fits_and_unfolds_a_box_on_click(
    panel_page, gpt2_small_shaped
) -> None:
    sketch = gpt2_small_shaped
    root = panel_page.mount("grad_fn", widgets.panel_payload(sketch))

    expect(root.locator(".tln-gg-legend")).to_have_text(
        "STRUCTURE-ONLY read from grad_fn/next_functions; no values, no timing, no verification."
    )
    # level 3 (blocks open, their attn/mlp/ln boxes folded) fits in 150 units; level 4 does not
    assert (
        _expected_units(sketch, _level(sketch, 3)),
        _expected_units(sketch, _level(sketch, 4)),
    ) == (137, 689)
    _expect_units(root, 137)
    attn = root.locator('[data-key="g:transformer.h.0.attn"]')
    expect(attn).to_have_attribute(
        "aria-label", "group transformer.h.0.attn, 36 nodes, folded: activate to unfold"
    )
    panel_page.screenshot("grad_fn_open_light", root)

    attn.click()

    expect(root.locator('[data-key="g:transformer.h.0.attn"]')).to_have_count(0)
    expect(root.locator('[data-key="g:transformer.h.0.attn.c_attn"]')).to_have_count(1)
    _expect_units(root, _expected_units(sketch, _level(sketch, 3) | {"transformer.h.0.attn"}))
    expect(
        root.get_by_role("button", name="Fold transformer.h.0.attn (36 nodes)")
    ).to_have_attribute("aria-expanded", "true")


def test_the_group_tree_and_toolbar_fold_and_unfold(panel_page, gpt2_small_shaped) -> None:
    sketch = gpt2_small_shaped
    root = panel_page.mount("grad_fn", widgets.panel_payload(sketch))

    root.get_by_role("button", name="Fold transformer.h.3 (62 nodes)").click()
    _expect_units(root, _expected_units(sketch, _level(sketch, 3) - {"transformer.h.3"}))
    root.get_by_role("button", name="Fold all groups").click()
    _expect_units(root, 12)  # transformer box + the 11 loss/lm_head nodes at top level
    root.get_by_role("button", name="Unfold every group").click()
    # 785 units: about 1 s of layout on an idle CPU, several on a busy one
    _expect_units(root, len(sketch.nodes), timeout_ms=20_000)
    panel_page.screenshot("grad_fn_unfolded_light", root)


def test_search_reveals_a_parameter_inside_folded_groups_and_shows_its_details(
    panel_page, gpt2_small_shaped
) -> None:
    root = panel_page.mount("grad_fn", widgets.panel_payload(gpt2_small_shaped))

    root.get_by_role("searchbox", name="Search nodes by name").fill("h.3.attn.c_attn.weight")
    results = root.get_by_role("region", name="Search results")
    expect(results.locator("p")).to_have_text("1 match")
    results.get_by_role("button").click()

    selected = root.locator(".tln-gg-unit.is-selected")
    weight = next(
        n for n in gpt2_small_shaped.nodes if n.param_name == "transformer.h.3.attn.c_attn.weight"
    )
    expect(selected).to_have_attribute("data-key", f"n:{weight.id}")
    details = root.locator(".tln-gg-details")
    expect(details.locator("h3")).to_have_text("transformer.h.3.attn.c_attn.weight")
    text = details.inner_text()
    assert "Parameter\ntransformer.h.3.attn.c_attn.weight" in text
    assert "Shape\n(32, 96) float32" in text
    assert "Module group\ntransformer.h.3.attn.c_attn (Conv1D)" in text
    panel_page.screenshot("grad_fn_search_light", root)


def test_clicking_an_op_shows_type_and_saved_shapes(panel_page, gpt2_small_shaped) -> None:
    root = panel_page.mount("grad_fn", widgets.panel_payload(gpt2_small_shaped))
    softmax = next(n for n in gpt2_small_shaped.nodes if n.name == "SoftmaxBackward0")
    root.get_by_role("searchbox", name="Search nodes by name").fill(f"#{softmax.id}")
    root.get_by_role("searchbox", name="Search nodes by name").press("Enter")

    root.locator(f'[data-key="n:{softmax.id}"]').click()

    details = root.locator(".tln-gg-details")
    expect(details.locator("h3")).to_have_text("SoftmaxBackward0")
    text = details.inner_text()
    assert "Output shape\n(1, 4, 8, 8) float32" in text  # batch, heads, query, key
    assert "Saved for backward\nresult (1, 4, 8, 8)" in text
    assert f"Module group\n{softmax.group} (GPT2Attention)" in text


def test_an_unfold_beyond_the_layout_budget_is_refused_with_the_way_out(
    panel_page, gpt2_small_shaped
) -> None:
    payload = widgets.panel_payload(gpt2_small_shaped)
    payload["data"]["layout"]["max_units"] = 100  # a smaller budget than Python's default
    root = panel_page.mount("grad_fn", payload)

    root.get_by_role("button", name="Unfold every group").click()

    expect(root.get_by_role("status")).to_contain_text(
        "That would show 785 boxes and nodes; the panel lays out at most 100 at once."
    )
    _expect_units(root, 53)  # opened at level 2: level 3 (137) is above this budget too


def test_a_truncated_sketch_says_so_and_the_offline_copy_needs_no_kernel(panel_page) -> None:
    model = models.mlp()
    sketch = tl.debug.walk_grad_fn(model(torch.randn(2, 8)).sum(), model=model, max_nodes=4)
    root = panel_page.mount("grad_fn", widgets.panel_payload(sketch), offline=True)

    expect(root.locator(".tln-gg-truncated")).to_have_text(
        "▲ TRUNCATED: the walk stopped at max_nodes=4; dashed nodes have inputs that are not shown."
    )
    expect(root.locator(".tln-gg-unit.is-cut")).to_have_count(2)
    root.get_by_role("button", name="Unfold every group").click()
    root.locator('[data-key="n:1"]').click()
    expect(root.locator(".tln-gg-details h3")).to_have_text("AddmmBackward0")
    assert (
        "Cut\nsome inputs were not walked: max_nodes was reached"
        in root.locator(".tln-gg-details").inner_text()
    )
    assert panel_page.sent() == []  # layout, fold and details all happen in the page


def test_cleanup_releases_every_listener_and_dark_theme_renders(
    panel_page, gpt2_small_shaped
) -> None:
    root = panel_page.mount("grad_fn", widgets.panel_payload(gpt2_small_shaped))
    panel_page.set_theme("dark")
    root.locator('[data-key="g:transformer.h.1.mlp"]').focus()
    panel_page.page.keyboard.press("Enter")  # boxes are keyboard-reachable buttons
    expect(root.locator('[data-key="g:transformer.h.1.mlp.c_fc"]')).to_have_count(1)
    panel_page.screenshot("grad_fn_dark", root)

    panel_page.cleanup()

    assert panel_page.listener_count() == 0
    assert panel_page.dom_listener_count() == 0
