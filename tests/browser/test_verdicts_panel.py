"""Fast browser tier: the verdict a panel shows is the one Python decided (issue 18).

Badges show the payload's ``tone`` and ``status_label``; a session that raised is critical; a
final checks report renders as final; the warn badge reads at 4.5:1 in JupyterLab's light theme.
Screenshots: tests/artifacts/verdicts_*.png.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from playwright.sync_api import expect

import torchlens_nb as tl
from tests import models
from tests.attention_sinks import minilm
from tests.models import five_block_mlp, traced_backward
from torchlens_nb import widgets

pytestmark = pytest.mark.browser


def _raising_session() -> tuple[tl.debug.ChecksSession, tl.errors.CheckViolationError]:
    """A session whose non-finite-gradient check stops the loop at its third step."""
    torch.manual_seed(0)
    model = models.mlp()
    optimizer = torch.optim.AdamW(model.parameters())
    session = tl.debug.ChecksSession(model, optimizer, scaler=None)
    session.register_nonfinite_grad_check()
    x = torch.randn(4, 8)
    caught = None
    try:
        with session:
            for step in range(3):
                if step == 2:
                    with torch.no_grad():
                        model[2].weight[0, 0] = math.nan  # the next gradient is non-finite
                optimizer.zero_grad()
                model(x).square().mean().backward()
                optimizer.step()
    except tl.errors.CheckViolationError as err:
        caught = err
    assert caught is not None
    return session, caught


def test_the_raised_sessions_badge_is_critical(panel_page) -> None:
    session, _ = _raising_session()
    final = session.report()
    assert (final.status, final.tone, final.is_final) == ("raised", "critical", True)
    root = panel_page.mount(
        "checks", widgets.panel_payload(final), arrays=widgets.panel_arrays(final)
    )
    badge = root.locator(".tln-head .tln-badge")
    expect(badge).to_have_attribute("data-tone", "critical")
    expect(badge).to_have_text("✖Status: raised")
    expect(root.locator(".tln-ck-final")).to_have_text("Final report (raised CheckViolationError).")
    panel_page.screenshot("verdicts_raised_light", root)
    panel_page.set_theme("dark")
    panel_page.screenshot("verdicts_raised_dark", root)


def test_display_of_a_caught_violations_report_is_final(panel_page) -> None:
    _, err = _raising_session()
    root = panel_page.mount(
        "checks", widgets.panel_payload(err.report), arrays=widgets.panel_arrays(err.report)
    )
    expect(root.locator(".tln-ck-final")).to_have_text("Final report (raised CheckViolationError).")
    expect(root.locator(".tln-head .tln-badge")).to_have_attribute("data-tone", "critical")


def test_a_snapshot_shown_on_its_own_does_not_claim_to_run(panel_page) -> None:
    torch.manual_seed(0)
    model = models.mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    session = tl.debug.ChecksSession(model, optimizer, scaler=None)
    session.register_nonfinite_grad_check()
    with session:
        optimizer.zero_grad()
        model(torch.randn(4, 8)).square().mean().backward()
        optimizer.step()
        snapshot = session.report()  # taken while attached: a snapshot, not the final report
    assert not snapshot.is_final
    root = panel_page.mount(
        "checks", widgets.panel_payload(snapshot), arrays=widgets.panel_arrays(snapshot)
    )
    assert root.locator(".tln-ck-running").count() == 0  # no live feed behind a plain display
    expect(root.locator(".tln-ck-snapshot")).to_contain_text("Snapshot of a session")


def test_only_warnings_read_as_a_warning_not_red(panel_page) -> None:
    torch.manual_seed(1)
    report = tl.debug.grad_health(traced_backward(five_block_mlp(), torch.randn(4, 8)))
    assert {f.severity for f in report.findings} == {"warning"}
    root = panel_page.mount(
        "grad_health", widgets.panel_payload(report), arrays=widgets.panel_arrays(report)
    )
    badge = root.locator(".tln-head .tln-badge")
    expect(badge).to_have_attribute("data-tone", "warning")
    expect(badge).to_have_text("▲Status: found")


def test_a_status_word_reads_as_a_phrase(panel_page) -> None:
    tokenizer = minilm.tokenizer()
    flagged = tl.debug.attention_sinks(
        minilm.trained(), tokenizer(["The cat sat on the mat."], return_tensors="pt"), tokenizer
    )
    # the same report with its flags taken away: the status Python gives an unflagged run
    report = dataclasses.replace(flagged, status="none_flagged", findings=())
    root = panel_page.mount("attention_sinks", widgets.panel_payload(report))
    expect(root.locator(".tln-head .tln-badge-word")).to_have_text("none flagged")
    expect(root.locator(".tln-head .tln-badge")).to_have_attribute("data-tone", "ok")


# JupyterLab 4 light theme (theme-light-extension/index.css): the colours a panel inherits there.
LAB_LIGHT = {
    "--jp-layout-color0": "white",
    "--jp-layout-color2": "#eeeeee",
    "--jp-ui-font-color1": "rgba(0, 0, 0, 0.87)",
    "--jp-ui-font-color2": "rgba(0, 0, 0, 0.54)",
    "--jp-border-color1": "#bdbdbd",
    "--jp-warn-color1": "#f57c00",
    "--jp-error-color1": "#d32f2f",
    "--jp-info-color1": "#0097a7",
    "--jp-success-color1": "#388e3c",
}
LAB_DARK = {
    "--jp-layout-color0": "#111111",
    "--jp-layout-color2": "#424242",
    "--jp-ui-font-color1": "rgba(255, 255, 255, 0.87)",
    "--jp-ui-font-color2": "rgba(255, 255, 255, 0.54)",
    "--jp-border-color1": "#616161",
    "--jp-warn-color1": "#ff9800",
    "--jp-error-color1": "#f44336",
    "--jp-info-color1": "#00bcd4",
    "--jp-success-color1": "#4caf50",
}

CONTRAST = """(badge) => {
  // WCAG 2 contrast of the badge word against the badge's own (tinted) background
  const canvas = document.createElement("canvas");
  canvas.width = canvas.height = 1;
  const g = canvas.getContext("2d", { willReadFrequently: true });
  const rgb = (css) => { g.clearRect(0, 0, 1, 1); g.fillStyle = css; g.fillRect(0, 0, 1, 1);
    return Array.from(g.getImageData(0, 0, 1, 1).data); };
  const under = (el) => { for (let e = el; e; e = e.parentElement) {
    const c = getComputedStyle(e).backgroundColor; if (rgb(c)[3] === 255) return rgb(c); } return [255, 255, 255, 255]; };
  const over = (top, bottom) => top.slice(0, 3).map((v, i) => (v * top[3] + bottom[i] * (255 - top[3])) / 255);
  const lum = ([r, g2, b]) => [r, g2, b].map((v) => { v /= 255; return v <= 0.04045 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; })
    .reduce((s, v, i) => s + v * [0.2126, 0.7152, 0.0722][i], 0);
  const back = over(rgb(getComputedStyle(badge).backgroundColor), under(badge.parentElement));
  const text = over(rgb(getComputedStyle(badge.querySelector(".tln-badge-word")).color), back);
  const [hi, lo] = [lum(text), lum(back)].sort((a, b) => b - a);
  return (hi + 0.05) / (lo + 0.05);
}"""


@pytest.mark.parametrize("theme", [LAB_LIGHT, LAB_DARK], ids=["lab-light", "lab-dark"])
def test_the_warn_badge_reads_at_aa_contrast(panel_page, theme) -> None:
    torch.manual_seed(1)
    report = tl.debug.grad_health(traced_backward(five_block_mlp(), torch.randn(4, 8)))
    panel_page.page.evaluate(
        "(vars) => { for (const [k, v] of Object.entries(vars)) document.body.style.setProperty(k, v); }",
        theme,
    )
    panel_page.set_theme("light" if theme is LAB_LIGHT else "dark")
    root = panel_page.mount(
        "grad_health", widgets.panel_payload(report), arrays=widgets.panel_arrays(report)
    )
    badge = root.locator(".tln-head .tln-badge")
    expect(badge).to_have_attribute("data-tone", "warning")
    assert badge.evaluate(CONTRAST) >= 4.5
    name = "light" if theme is LAB_LIGHT else "dark"
    panel_page.screenshot(f"verdicts_warn_badge_lab_{name}", root.locator(".tln-head"))


def test_row_words_take_the_tone_python_sent(panel_page) -> None:
    """The panels colour a verdict, row status or check state by the payload's ``row_tones``:
    a payload that maps ``zero`` to ``info`` shows the zero rows as info, not critical."""
    report = tl.debug.grad_health(traced_backward(five_block_mlp(), torch.randn(4, 8)))
    payload = widgets.panel_payload(report)
    assert payload["row_tones"]["zero"] == "critical"
    root = panel_page.mount("grad_health", payload, arrays=widgets.panel_arrays(report))
    zero = root.locator("td.tln-gh-verdict", has_text="zero").first
    expect(zero).to_have_attribute("data-tone", "critical")
    payload["row_tones"] = {**payload["row_tones"], "zero": "info"}
    root = panel_page.mount("grad_health", payload, arrays=widgets.panel_arrays(report))
    expect(root.locator("td.tln-gh-verdict", has_text="zero").first).to_have_attribute(
        "data-tone", "info"
    )


def test_a_raised_session_with_a_kept_batch_offers_the_replay_first(panel_page) -> None:
    """The replay of the kept batch is the step the report is there to offer: it sits right
    under the lead, above the counters and tables, as a button."""
    torch.manual_seed(0)
    model = models.mlp()
    optimizer = torch.optim.AdamW(model.parameters())
    session = tl.debug.ChecksSession(model, optimizer, scaler=None)
    session.register_nonfinite_grad_check()
    bad = torch.full((4, 8), math.nan)
    with session, pytest.raises(tl.errors.CheckViolationError):
        with session.step(global_step=0, inputs=bad, loss_fn=torch.sum):
            model(bad).sum().backward()
            optimizer.step()
    final = session.report()
    root = panel_page.mount(
        "checks", widgets.panel_payload(final), arrays=widgets.panel_arrays(final)
    )
    first = root.get_by_role("region", name="First step")
    expect(first.get_by_role("button", name="Find where the value was born")).to_be_enabled()
    sections = root.locator(".tln-card > *").evaluate_all(
        "els => els.map((el) => el.getAttribute('aria-label') || el.className)"
    )
    assert sections.index("First step") == 1  # right after the header
    assert root.get_by_role("region", name="Next steps").count() == 0  # nothing left below
