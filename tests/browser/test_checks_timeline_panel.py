"""Fast browser tier: the checks dashboard's timeline in headless chromium, light and dark.

The payloads come from a real session on the attention logit growth reproduction of
``tests/stability`` (140 steps of the 2-block GPT at a peak lr of 0.3, warned as
``attention_logit_growth``): the increments its feed produced, delivered as the kernel sets the
``live`` trait, and the final report's payload and binary arrays.
Screenshots: tests/artifacts/checks_timeline_live.png, checks_timeline_final.png and
checks_timeline_final_dark.png.
"""

from __future__ import annotations

import pytest
import torch
from playwright.sync_api import expect

import torchlens_nb as tl
from tests import models
from tests.browser.reports import LiveFeedRecorder
from tests.stability.cases import ATTENTION
from tests.stability.gpt import train
from torchlens_nb import widgets

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def attention_run():
    """(snapshot report, increments that carry a timeline, final report); about 20 s."""
    recorder = LiveFeedRecorder()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("torchlens_nb.checks.dashboard._feed.MIN_INTERVAL_S", 0.0)
        patch.setattr("torchlens_nb.checks.dashboard._timeline.LIVE_INTERVAL_S", 0.0)
        patch.setattr("torchlens_nb.checks.dashboard._live.live_dashboard", lambda r: recorder)
        snapshot: list[tl.report.CheckReport] = []

        def attach(model, optimizer):
            session = tl.debug.ChecksSession(model, optimizer, scaler=None)
            session.register_stability_check(action="collect")
            snapshot.append(session.report())
            session.dashboard()
            return session

        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # as tests/stability runs the cases: exactly reproducible
        try:
            train(ATTENTION, attach)
        finally:
            torch.set_num_threads(threads)
    with_timeline = [m for m in recorder.messages if "timeline" in m]
    return snapshot[0], with_timeline, recorder.final


def test_the_live_timeline_grows_with_each_increment_and_marks_the_warning(
    panel_page, attention_run
) -> None:
    snapshot, increments, final = attention_run
    root = panel_page.mount(
        "checks", widgets.panel_payload(snapshot), traits={"live_id": "attention-run"}
    )
    expect(root.locator('[data-timeline="none"]')).to_have_text(
        "Timeline: no attempt recorded yet."
    )
    panel_page.kernel_set("live", increments[0])
    loss = root.locator('svg[data-chart="loss"]')
    expect(loss).to_have_attribute("viewBox", "0 0 1 90")  # attempt 0: one column
    attention = root.locator('canvas[data-metric="attention_logit"]')
    assert attention.evaluate("c => [c.width, c.height]") == [1, 2]  # blocks.0, blocks.1
    for message in increments[10::10] + increments[-1:]:  # as a throttled feed sends them
        panel_page.kernel_set("live", message)
    columns = final.timeline.columns
    expect(loss).to_have_attribute("viewBox", f"0 0 {columns} 90")
    assert attention.evaluate("c => [c.width, c.height]") == [columns, 2]
    mark = root.locator('.tln-tl-mark[data-mark-code="attention_logit_growth"]')
    expect(mark).to_have_count(1)
    mark.click()
    expect(root.locator('li[data-code="attention_logit_growth"]')).to_have_attribute(
        "data-jumped", ""
    )
    panel_page.screenshot("checks_timeline_live", root)
    panel_page.cleanup()
    assert panel_page.listener_count() == 0
    assert panel_page.dom_listener_count() == 0


def test_the_final_timeline_draws_every_measured_metric_from_binary_arrays(
    panel_page, attention_run
) -> None:
    _, _, final = attention_run
    root = panel_page.mount(
        "checks", widgets.panel_payload(final), arrays=widgets.panel_arrays(final)
    )
    timeline = final.timeline
    for item in timeline.maps:
        canvas = root.locator(f'canvas[data-metric="{item.metric}"]')
        assert canvas.evaluate("c => [c.width, c.height]") == [timeline.columns, len(item.layers)]
        labels = root.locator(f'figure[data-metric="{item.metric}"] .tln-tl-layers div')
        expect(labels).to_have_text(list(item.layers))
    # hover over the last column of blocks.1's attention row: layer, attempt and its value
    attention = timeline.map("attention_logit")
    column = max(c for c, v in enumerate(attention.values[1]) if v == v)  # last probed
    canvas = root.locator('canvas[data-metric="attention_logit"]')
    box = canvas.bounding_box()
    canvas.hover(
        position={"x": (column + 0.5) / timeline.columns * box["width"], "y": 0.75 * box["height"]}
    )
    tip = root.locator(".tln-tl-tip")
    expect(tip).to_have_attribute("data-layer", "blocks.1")
    expect(tip).to_contain_text(f"blocks.1 · attempt {column} · max attention logit: ")
    shown = float(tip.inner_text().rsplit(": ", 1)[1].replace(",", ""))
    assert shown == pytest.approx(attention.values[1][column], rel=1e-3)
    band = root.locator(".tln-tl-loss")
    box = band.bounding_box()
    band.hover(position={"x": 3.5 / timeline.columns * box["width"], "y": 10})
    expect(tip).to_contain_text("loss · attempt 3 · ")  # one attempt per column: min == max
    shown = float(tip.inner_text().rsplit(" · ", 1)[1].replace(",", ""))
    assert shown == pytest.approx(timeline.loss_high[3], rel=1e-3)
    light = band.evaluate("e => getComputedStyle(e).backgroundColor")
    panel_page.screenshot("checks_timeline_final", root)
    mark = root.locator('.tln-tl-mark[data-mark-code="attention_logit_growth"]')
    mark.click()
    row = root.locator('.tln-finding[data-code="attention_logit_growth"]')
    expect(row).to_have_attribute("data-jumped", "")
    expect(row).to_have_js_property("open", True)
    panel_page.set_theme("dark")
    expect(root).to_have_attribute("data-tln-theme", "dark")
    assert band.evaluate("e => getComputedStyle(e).backgroundColor") != light  # theme tokens
    panel_page.screenshot("checks_timeline_final_dark", root)


def test_a_metric_the_session_did_not_measure_is_said_not_drawn(panel_page) -> None:
    session = models.adamw_mlp_session(steps=3)
    report = session.report()
    root = panel_page.mount(
        "checks", widgets.panel_payload(report), arrays=widgets.panel_arrays(report)
    )
    missing = root.locator('.tln-tl-missing[data-metric="attention_logit"]')
    expect(missing).to_contain_text(
        "Max pre-softmax attention logit per layer (probed forwards): not measured"
    )
    expect(root.locator('canvas[data-metric="attention_logit"]')).to_have_count(0)
    expect(root.locator('canvas[data-metric="grad_norm"]')).to_have_count(1)
