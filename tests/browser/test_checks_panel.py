"""Fast browser tier: the live checks dashboard in headless chromium.

Every payload and increment comes from a real ``ChecksSession`` run in the test: the snapshot
payload the dashboard starts from, the increments the session's feed produced (delivered as the
kernel would set the ``live`` trait), and the final report's payload and arrays.
The per-rank table is fed by a real 2-rank gloo DDP run (``tests/distributed/ranks.py``).
Screenshots: tests/artifacts/checks_live.png, tests/artifacts/checks_final.png,
tests/artifacts/checks_ranks.png.
"""

from __future__ import annotations

import re

import pytest
import torch
from playwright.sync_api import expect

import torchlens_nb as tl
from tests import models
from tests.browser.reports import LiveFeedRecorder
from tests.distributed import ranks
from torchlens_nb import widgets

pytestmark = pytest.mark.browser


@pytest.fixture
def dead_layer_run(monkeypatch):
    """(snapshot report, increments, final report) of 8 AdamW steps whose layer 0 stops
    receiving gradient at step 2 (change check with window 4, min_hits 3)."""
    monkeypatch.setattr("torchlens_nb.checks.dashboard._feed.MIN_INTERVAL_S", 0.0)
    monkeypatch.setattr(
        "torchlens_nb.checks.dashboard._live.live_dashboard", lambda report: recorder
    )
    recorder = LiveFeedRecorder()
    model = models.mlp()
    optimizer = torch.optim.AdamW(model.parameters())
    session = tl.debug.ChecksSession(model, optimizer, scaler=None)
    session.register_change_check(window=4, min_hits=3, action="collect")
    session.register_nonfinite_grad_check()
    session.register_update_ratio_check(every=2)
    snapshot = session.report()
    session.dashboard()
    x = torch.randn(16, 8)
    with session:
        for step in range(8):
            if step == 2:
                with torch.no_grad():
                    model[0].bias.fill_(-1e3)
            optimizer.zero_grad()
            model(x).square().mean().backward()
            optimizer.step()
    return snapshot, recorder.messages, recorder.final


def test_live_counters_checks_findings_and_chart_update_per_increment(
    panel_page, dead_layer_run
) -> None:
    snapshot, increments, _ = dead_layer_run
    # the dashboard widget (LiveChecksWidget) carries a live_id: this mount stands in for it
    root = panel_page.mount(
        "checks", widgets.panel_payload(snapshot), traits={"live_id": "dead-layer-run"}
    )
    accepted = root.locator('[data-counter="accepted"]')
    expect(accepted).to_have_text("0")
    expect(root.get_by_role("status").first).to_have_text(
        "Session running: updates while the loop runs."
    )
    for message in increments[:6]:  # 3 attempts: one increment per backward, one per step
        panel_page.kernel_set("live", message)
    expect(accepted).to_have_text("3")
    state = root.locator('[data-check="change"] .tln-ck-state')
    expect(state).to_have_text("clean")  # attempt 2 is the first without gradient: 1 of 3
    assert root.locator('svg[data-chart="grad_norm"] circle').count() == 3
    for message in increments[6:]:
        panel_page.kernel_set("live", message)
    expect(accepted).to_have_text("8")
    expect(root.locator('li[data-code="param_received_no_gradient"]')).to_have_count(1)
    expect(state).to_have_text("collecting")  # action="collect": a finding, no warning
    badge = root.locator(".tln-head .tln-badge")  # the live badge's tone came from Python
    expect(badge).to_have_attribute("data-tone", "warning")
    expect(badge.locator(".tln-badge-word")).to_have_text("found")
    # update ratios sampled at accepted steps 0, 2, 4, 6
    assert root.locator('svg[data-chart="update_ratio"] circle').count() == 4
    panel_page.kernel_set("live", increments[2])  # a stale message changes nothing
    expect(accepted).to_have_text("8")
    panel_page.screenshot("checks_live", root)
    panel_page.cleanup()
    assert panel_page.listener_count() == 0


def test_final_report_shows_counters_chart_tables_and_scope(panel_page, dead_layer_run) -> None:
    _, _, final = dead_layer_run
    root = panel_page.mount(
        "checks", widgets.panel_payload(final), arrays=widgets.panel_arrays(final)
    )
    expect(root.locator(".tln-ck-final")).to_have_text("Final report (completed).")
    expect(root.locator('[data-counter="attempts"]')).to_have_text("8")
    expect(root.locator('[data-check="nonfinite_grad"] .tln-ck-state')).to_have_text("clean")
    assert root.locator('svg[data-chart="grad_norm"] circle').count() == 8
    # words, not codes: the ledger's reason and where each check runs
    expect(root.locator('[data-ledger="scale"]')).to_have_text(
        "Skip ledger: scaler=None declared: no GradScaler runs, so no attempt is skipped by one"
    )
    site = root.locator('[data-check="nonfinite_grad"] td').first
    expect(site).not_to_contain_text("S-")
    expect(site).to_have_attribute("title", re.compile(r"^S-[ABCD]$"))
    expect(root.get_by_text("param_received_no_gradient").first).to_be_visible()
    assert root.locator("table").count() >= 3  # checks, params, series
    panel_page.screenshot("checks_final", root)


def test_final_report_renders_offline_from_its_html_file(
    page, base_url, out_dir, dead_layer_run
) -> None:
    _, _, final = dead_layer_run
    final.to_html(str(out_dir / "checks.html"))
    page.goto(f"{base_url}/out/checks.html")
    page.wait_for_selector('#tln-root[data-rendered="1"]')
    root = page.locator("#tln-root")
    expect(root.locator('[data-counter="accepted"]')).to_have_text("8")
    assert root.locator('svg[data-chart="grad_norm"] circle').count() == 8


@pytest.fixture(scope="module")
def ddp_live_run(tmp_path_factory):
    """Rank 0's snapshot payload and increments of 4 DDP steps on 2 gloo ranks (rank 1 runs
    two backwards per step); about 2 s."""
    return ranks.launch(tmp_path_factory.mktemp("ranks"), ["live"])["live"][0]


def test_live_dashboard_on_rank_0_lays_out_every_ranks_counters(ddp_live_run, panel_page) -> None:
    root = panel_page.mount("checks", ddp_live_run["snapshot"], traits={"live_id": "ddp-run"})
    table = root.locator('table[data-table="ranks"]')
    expect(table).to_have_count(0)  # no agreement yet: no per-rank rows
    for message in ddp_live_run["increments"]:
        panel_page.kernel_set("live", message)
    expect(table.locator("caption")).to_have_text(
        "Ranks (counters agreed before optimizer.step() of step 4)"
    )
    expect(table.locator("thead th")).to_have_text(
        [
            "rank",
            "at step",
            "raising",
            "attempts",
            "accepted",
            "skipped",
            "raised",
            "backwards",
            "pending backwards",
        ]
    )
    expect(table.locator('[data-rank="0"] [data-col="backwards"]')).to_have_text("4")
    expect(table.locator('[data-rank="1"] [data-col="backwards"]')).to_have_text("8")
    expect(table.locator('tbody [data-col="accepted"]')).to_have_text(["3", "3"])
    expect(root.locator('[data-counter="backwards"]')).to_have_text("4")  # rank 0's own
    panel_page.screenshot("checks_ranks", root)
    panel_page.cleanup()
    assert panel_page.listener_count() == 0
