"""Fast browser tier of the spike forensics panel (``session.spike_forensics()``).

Payloads come from real reports: the LR-growth reproduction of ``tests/stability`` (a detected
spike, layers of block 1 jumped) and a healthy run with a planted foreign sample.
Screenshots: tests/artifacts/spike_*.png.
"""

from __future__ import annotations

import pytest
import torch

import torchlens_nb as tl
from tests.stability import gpt
from tests.stability.cases import LR_GROWTH
from torchlens_nb import widgets

pytestmark = pytest.mark.browser


def _forensics(setup: gpt.Setup, keep: str, plant_at: int | None = None) -> tl.report.SpikeReport:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model, optimizer, scheduler = gpt.build(setup)
        table = gpt.markov_chain(setup.seed)
        gen = torch.Generator().manual_seed(setup.seed)
        session = tl.debug.ChecksSession(model, optimizer, scaler=None)
        session.register_stability_check(action="collect", keep=keep)
        with session:
            for step in range(setup.steps):
                tokens = gpt.markov_batch(table, gen)
                if step == plant_at:  # a sequence of another Markov chain as sample 5
                    tokens[5] = gpt.markov_batch(
                        gpt.markov_chain(7), torch.Generator().manual_seed(7)
                    )[0]
                optimizer.zero_grad()
                gpt.loss_of(model, tokens, 0.0).backward()
                optimizer.step()
                scheduler.step()
        return session.spike_forensics()
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def spike_report() -> tl.report.SpikeReport:
    return _forensics(LR_GROWTH, "spikes")


def test_the_jump_chart_draws_the_ranked_layers_and_marks_the_jumped_ones(
    panel_page, spike_report
) -> None:
    assert spike_report.status == "jumped"
    root = panel_page.mount("spike", widgets.panel_payload(spike_report))
    chart = root.get_by_role(
        "img", name="Jump against the previous step per layer (log axis; 2x counts as a jump)"
    )
    rows = spike_report.table("layers").dicts()
    drawn = chart.locator("g.tln-spike-layer")
    assert drawn.count() == min(12, len(rows))
    assert drawn.evaluate_all("gs => gs.map(g => g.dataset.layer)") == [
        r["layer"] for r in rows[:12]
    ]
    jumped = chart.locator('g.tln-spike-layer[data-jumped="true"]')
    assert jumped.count() == sum(r["is_jumped"] for r in rows[:12]) > 0
    assert jumped.first.locator("text").first.text_content() == f"▲ {rows[0]['layer']}"
    assert chart.locator("line.tln-spike-jump").count() == 1
    # the samples chart has one bar per sample; no sample carries this spike
    samples = root.get_by_role("img", name="Loss per sample of the step's batch, highest first")
    assert samples.locator("rect").count() == gpt.BATCH
    assert root.get_by_text("No sample reaches 2x the batch median.").count() == 1
    assert root.get_by_text("blocks.1.ln1", exact=False).count() >= 1
    panel_page.screenshot("spike_jumped", root)
    panel_page.set_theme("dark")
    panel_page.screenshot("spike_jumped_dark", root)
    panel_page.cleanup()
    assert panel_page.listener_count() == 0


def test_the_sample_that_carries_the_loss_is_named(panel_page) -> None:
    report = _forensics(gpt.Setup("healthy", steps=100, lr=1e-3), "every_step", plant_at=99)
    root = panel_page.mount("spike", widgets.panel_payload(report))
    carriers = root.locator(".tln-spike-carriers li")
    assert carriers.count() == 1
    assert carriers.first.get_attribute("data-sample") == "5"
    assert carriers.first.inner_text().startswith("▲ sample 5 loss 5.156 · 2.728x the batch median")
    panel_page.screenshot("spike_sample", root)


def test_a_session_with_nothing_kept_shows_why(panel_page) -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    session = tl.debug.ChecksSession(model, torch.optim.SGD(model.parameters(), lr=0.1))
    report = session.spike_forensics()
    root = panel_page.mount("spike", widgets.panel_payload(report))
    assert root.get_by_text("no loss spike was detected", exact=False).count() >= 1
    assert root.locator(".tln-spike-chart").count() == 0
