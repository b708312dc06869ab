"""The recipe panel (js/panels/recipe.js): charts computed in Python, redrawn on live pushes.

Fast tier: payloads of real recipe reports in the harness; the live overfit chart gets the
interim reports ``overfit_one_batch`` really pushed (``on_update``), one ``payload`` set each.
End-to-end tier: JupyterLab runs overfit_one_batch in a cell and the chart moves while it runs.
"""

from __future__ import annotations

import time

import pytest
import torch
from torch import nn

import torchlens_nb as tl
from tests.browser.lab import _JS_NOTEBOOK
from tests.recipes.reports import BUILDERS
from torchlens_nb import widgets


def loss_points(root) -> int:
    """Points drawn on the loss line of the panel's chart."""
    return root.locator('svg.tln-chart g[data-series="loss"] circle').count()


class SlowMLP(nn.Sequential):
    """Each forward outlasts the 0.1 s push interval, so every step is pushed."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(0.11)
        return super().forward(x)


@pytest.mark.browser
def test_overfit_chart_redraws_on_each_push_and_ends_on_the_final_state(panel_page) -> None:
    torch.manual_seed(0)
    model = SlowMLP(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    batch = (torch.randn(8, 8), torch.randint(0, 4, (8,)))
    pushed: list = []
    final = tl.recipes.overfit_one_batch(
        model, batch, nn.CrossEntropyLoss(), steps=6, lr=5e-2, live=False, on_update=pushed.append
    )
    assert [r.steps_run for r in pushed] == [1, 2, 3, 4, 5, 6, 6] and pushed[-1] == final
    root = panel_page.mount("recipe", widgets.panel_payload(pushed[0]))
    seen = [(loss_points(root), root.get_by_role("status").text_content())]
    for report in pushed[1:]:  # each push is one `payload` trait set, as the live sink does
        panel_page.kernel_set("payload", widgets.panel_payload(report))
        progress = root.get_by_role("status")
        seen.append((loss_points(root), progress.text_content() if progress.count() else None))
    assert [points for points, _ in seen] == [1, 2, 3, 4, 5, 6, 6]
    assert [text[:8] for _, text in seen[:-1]] == [f"step {n}/6" for n in range(1, 7)]
    assert seen[-1][1] is None  # final state: no progress line, the verdict leads the card
    assert root.locator(".tln-lead").text_content() == final.lead
    panel_page.screenshot("recipe_overfit_final", root)
    panel_page.cleanup()
    assert panel_page.listener_count() == 0


@pytest.mark.browser
def test_class_balance_panel_draws_the_counts_as_bars(panel_page) -> None:
    report = tl.recipes.class_balance(torch.tensor([0] * 100 + [1] * 1))
    root = panel_page.mount("recipe", widgets.panel_payload(report))
    assert root.locator('svg.tln-chart g[data-series="count"] rect').count() == 2
    assert root.get_by_text("class_imbalance").count() >= 1
    panel_page.screenshot("recipe_class_balance", root)


CHARTED = sorted(name for name in BUILDERS if widgets.PANELS.get(name) == "recipe")


@pytest.mark.browser
@pytest.mark.parametrize("name", CHARTED)
def test_every_charted_recipe_report_draws_its_charts(panel_page, name: str) -> None:
    report = BUILDERS[name]()  # NaN / Inf inside: drawn as marked points, never an error
    root = panel_page.mount("recipe", widgets.panel_payload(report))
    assert root.locator("svg.tln-chart").count() == len(report.chart_specs())
    assert root.locator(".tln-lead").text_content() == report.lead
    panel_page.screenshot(f"recipe_{name}", root)


SLOW_OVERFIT = """
import time, torch
from torch import nn
import torchlens_nb as tl

class Slow(nn.Sequential):
    def forward(self, x):
        time.sleep(0.05)
        return super().forward(x)

torch.manual_seed(0)
model = Slow(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
batch = (torch.randn(8, 8), torch.randint(0, 4, (8,)))
report = tl.recipes.overfit_one_batch(model, batch, nn.CrossEntropyLoss(), steps=60, lr=5e-2)
"""


@pytest.mark.slow
def test_overfit_chart_updates_while_the_cell_runs(lab_notebook) -> None:
    nb = lab_notebook([SLOW_OVERFIT])
    nb.page.evaluate(f"""() => {{
      const nb = {_JS_NOTEBOOK};
      nb.content.activeCellIndex = 0;
      void window.jupyterapp.commands.execute('notebook:run-cell');
    }}""")
    panel = nb.output_panel(0)
    panel.evaluate("el => { el.dataset.probe = 'first view'; }")  # survives payload pushes only
    progress: set[str] = set()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # the cell runs ~3 s: sample what the panel shows
        # all_text_contents does not wait: the status line may vanish between two reads (the
        # final report replaces it), where count() then text_content() waited 30 s for it
        shown = panel.get_by_role("status").all_text_contents()
        if shown:
            progress.update(shown)
        elif panel.locator(".tln-lead").text_content().startswith(("memorised", "decreasing")):
            break
        nb.page.wait_for_timeout(50)
    assert len(progress) >= 3, progress  # distinct step counts seen while the cell was running
    assert panel.locator('svg.tln-chart g[data-series="loss"] circle').count() == 60
    assert panel.get_by_role("status").count() == 0
    # the same element drew every state: updates were traitlet pushes into one widget view
    assert panel.evaluate("el => el.dataset.probe") == "first view"
    nb.screenshot("lab_overfit_live", panel)
