"""Fast browser tier: panels that read right at a glance (issue 32).

A live overfit panel whose loss_fn raises ends in a final state; hot_path and tl.dead name a
notebook cell as "Cell In[3], line L" only (a stand-in IPython shell names this file cell 3,
as ipykernel names a cell's file); nested facts are one line or a small table; a follow-up
clicked after the kernel went away says so; VS Code's high-contrast light theme reads as light.
Each panel is shot light and dark: tests/artifacts/glance_*_{light,dark}.png.
"""

from __future__ import annotations

import types

import IPython
import pytest
import torch
from playwright.sync_api import expect
from torch import nn

import torchlens_nb as tl
from tests.nonfinite.nan_models import LogOfNegative, Net, X
from torchlens_nb import widgets
from torchlens_nb.recipes.triage._progress import TriageProgress
from torchlens_nb.report import Exit, Finding, Report

pytestmark = pytest.mark.browser

LAB_WIDTH_PX = 420
"""About the width a finding's facts get beside JupyterLab's default file browser."""


class DeadRelu(nn.Module):
    """Planted bug: a ReLU whose bias keeps units 0-1 below zero on every input."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc = nn.Linear(4, 4)
        with torch.no_grad():
            self.fc.bias[:2] = -100.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.fc(x))  # the line hot_path and tl.dead point at


def _line_of(text: str) -> int:
    source = open(__file__, encoding="utf-8").read().splitlines()  # noqa: SIM115
    return next(i for i, line in enumerate(source, 1) if text in line)


@pytest.fixture
def cell_three(monkeypatch: pytest.MonkeyPatch) -> str:
    """This file is "Cell In[3]" to a stand-in IPython shell."""
    names = {__file__: ("Cell", "In[3]")}
    shell = types.SimpleNamespace(compile=types.SimpleNamespace(format_code_name=names.get))
    monkeypatch.setattr(IPython, "get_ipython", lambda: shell)
    return __file__


def _shoot_both(panel_page, name: str, root) -> None:
    for mode in ("light", "dark"):
        panel_page.set_theme(mode)
        panel_page.screenshot(f"glance_{name}_{mode}", root)


class RaiseAtCall:
    """A cross-entropy loss that raises ValueError on its ``call``-th call."""

    def __init__(self, call: int) -> None:
        self.calls, self.call = 0, call

    def __call__(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.calls == self.call:
            raise ValueError("target 9 is out of range")
        return nn.functional.cross_entropy(out, y)


def test_a_live_overfit_panel_whose_loss_fn_raises_at_step_5_ends_in_a_final_state(
    panel_page,
) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    batch = (torch.randn(16, 8), torch.randint(0, 4, (16,)))
    pushed: list[Report] = []
    with pytest.raises(ValueError):
        tl.recipes.overfit_one_batch(
            model, batch, RaiseAtCall(5), steps=100, live=False, on_update=pushed.append
        )
    running = tl.recipes.overfit_one_batch(model, batch, nn.CrossEntropyLoss(), steps=3)
    running_payload = widgets.panel_payload(running)
    running_payload.update(status="running", tone="info", status_label="running")
    root = panel_page.mount("recipe", running_payload)
    expect(root.locator(".tln-badge-word")).to_have_text("running")
    panel_page.kernel_set("payload", widgets.panel_payload(pushed[-1]))  # the final push
    expect(root.locator(".tln-badge-word")).to_have_text("inconclusive")
    expect(root.locator(".tln-lead")).to_have_text(
        "stopped at step 5/100: the step raised ValueError: target 9 is out of range; "
        f"the last loss was {pushed[-1].losses[-1]:.4g} (from {pushed[-1].losses[0]:.4g})."
    )
    expect(root.locator(".tln-recipe-progress")).to_have_count(0)  # no "running" line left
    expect(root.get_by_text("overfit verdict")).to_be_visible()  # said not checked, not passed
    _shoot_both(panel_page, "overfit_stopped", root)


def test_hot_path_lead_and_rows_name_the_cell_only(panel_page, cell_three) -> None:
    line = _line_of("the line hot_path and tl.dead point at")
    trace = tl.trace(DeadRelu(), torch.randn(8, 4))
    report = tl.debug.hot_path(trace)
    assert report.lead.startswith(f"Cell In[3], line {line} carries ")
    assert "test_glance_panel.py" not in report.card()
    root = panel_page.mount("cost", widgets.panel_payload(report))
    expect(root.locator(".tln-lead")).to_contain_text(f"Cell In[3], line {line} carries")
    expect(root.locator(".tln-cost-where").first).to_have_text(f"Cell In[3], line {line}")
    assert "test_glance_panel.py" not in root.inner_text()
    _shoot_both(panel_page, "hot_path", root)


def test_tl_dead_file_column_names_the_cell_not_the_temp_file(panel_page, cell_three) -> None:
    model = DeadRelu()
    traces = [tl.trace(model, torch.randn(8, 4), save=tl.func("relu")) for _ in range(2)]
    report = tl.dead(traces)
    assert report.status == "found"
    payload = widgets.panel_payload(report)
    root = panel_page.mount(widgets.panel_name(report), payload)
    table = root.locator("table.tln-table").first
    columns = table.locator("thead button").evaluate_all("(bs) => bs.map((b) => b.dataset.column)")
    file_cell = table.locator("tbody tr").first.locator("th, td").nth(columns.index("file"))
    expect(file_cell).to_have_text("Cell In[3]")
    assert file_cell.get_attribute("title") == cell_three  # the real file on hover
    assert "test_glance_panel.py" not in table.inner_text()
    _shoot_both(panel_page, "dead", root)


def test_nested_facts_read_on_one_line_and_records_as_a_table(panel_page) -> None:
    report = Report(
        subject="facts",
        status="warn",
        lead="A finding whose facts nest.",
        findings=(
            Finding(
                "nonfinite_grads",
                "warning",
                "two parameters received a non-finite gradient.",
                fields={
                    "counts": {"zeroed": 3, "nan_count": 12, "inf_count": 0},
                    "params": [
                        {"param": "0.weight", "kind": "inf", "count": 4},
                        {"param": "2.bias", "kind": "nan", "count": 8},
                    ],
                },
            ),
        ),
    )
    panel_page.page.set_viewport_size({"width": LAB_WIDTH_PX, "height": 700})
    root = panel_page.mount("report", widgets.panel_payload(report))
    root.locator(".tln-finding summary").click()
    values = root.locator(".tln-finding-body > dl.tln-facts > dd")
    counts = values.nth(0)
    expect(counts).to_have_text("zeroed 3 · nan_count 12 · inf_count 0")
    line_height = counts.locator(".tln-fact-pair").first.bounding_box()["height"]
    assert counts.bounding_box()["height"] < 1.5 * line_height  # one line, not a letter column
    records = values.nth(1).locator("table.tln-fact-table")
    assert records.locator("th").all_inner_texts() == ["param", "kind", "count"]
    assert records.locator("tbody tr").nth(1).locator("td").all_inner_texts() == [
        "2.bias",
        "nan",
        "8",
    ]
    assert "{" not in root.locator(".tln-finding-body").inner_text()
    _shoot_both(panel_page, "facts", root)


def test_a_follow_up_after_the_kernel_went_away_says_to_rerun_the_cell(panel_page) -> None:
    report = Report(
        subject="gone",
        status="warn",
        lead="A report whose kernel restarted.",
        exits=(Exit("Show lineage", "report.lineage()", "lineage"),),
        actions={"lineage": lambda: report},
    )
    root = panel_page.mount("report", widgets.panel_payload(report))
    panel_page.page.evaluate(  # ipywidgets' send throws once the comm's kernel is gone
        "() => { harness.model.send = () => { throw new Error('Cannot send'); }; }"
    )
    root.get_by_role("button", name="Show lineage").click()
    expect(root.locator(".tln-request-status").first).to_contain_text(
        "The kernel that made this panel is gone (restarted or shut down); re-run the cell "
        "for a live panel."
    )
    assert "Cannot send" not in root.inner_text()
    _shoot_both(panel_page, "kernel_gone", root)


def test_vscode_high_contrast_light_reads_as_light(panel_page) -> None:
    report = Report(subject="theme", status="ok", lead="VS Code high contrast light.")
    root = panel_page.mount("report", widgets.panel_payload(report))
    panel_page.page.evaluate(
        "() => { delete document.body.dataset.jpThemeLight;"
        " document.body.className = 'vscode-high-contrast vscode-high-contrast-light'; }"
    )
    expect(root).to_have_attribute("data-tln-theme", "light")
    panel_page.page.evaluate("() => { document.body.className = 'vscode-high-contrast'; }")
    expect(root).to_have_attribute("data-tln-theme", "dark")


def test_the_lineage_exit_after_an_expand_names_the_frontier_node(panel_page) -> None:
    trace = tl.trace(Net(LogOfNegative()), X)
    first = tl.debug.lineage(trace, "linear_2", max_depth=1)
    ring = first.run_action("expand", label="log_1", direction="ancestors")
    root = panel_page.mount("lineage", widgets.panel_payload(ring))
    button = root.locator(".tln-exits button[data-action=expand]")
    expect(button).to_have_text("Expand sub_1")  # the frontier, not log_1 again
    expect(root.locator(".tln-exits code").first).to_have_text(
        "report.run_action('expand', label='sub_1', direction='ancestors')"
    )
    _shoot_both(panel_page, "lineage_exit", root)


class Proj(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.gate = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.proj(x)) * torch.sigmoid(self.gate(x))


class TwoTower(nn.Module):
    """The tour's model (notebooks/00_tour.ipynb): two towers, the image one cached detached."""

    def __init__(self) -> None:
        super().__init__()
        self.text = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8))
        self.image = nn.Sequential(nn.Linear(24, 32), nn.ReLU(), nn.Linear(32, 8))

    def forward(self, tokens: torch.Tensor, pixels: torch.Tensor) -> torch.Tensor:
        text = nn.functional.normalize(self.text(tokens), dim=-1)
        image = nn.functional.normalize(self.image(pixels).detach(), dim=-1)
        return text @ image.T


def _sketches() -> dict[str, tl.report.GradFnSketch]:
    torch.manual_seed(0)
    towers = TwoTower()
    logits = towers(torch.randn(4, 16), torch.randn(4, 24)) / 0.07
    nested = nn.Sequential(Proj(), nn.Linear(8, 8), Proj())
    return {
        "tour": tl.debug.walk_grad_fn(
            nn.functional.cross_entropy(logits, torch.arange(4)), model=towers
        ),
        "nested": tl.debug.walk_grad_fn(nested(torch.randn(2, 8)).sum(), model=nested),
    }


GEOMETRY = """(root) => {
  const box = (el) => { const r = el.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
  const frames = [...root.querySelectorAll("rect.tln-gg-frame")].map((el) => [el.dataset.address, box(el)]);
  const labels = [...root.querySelectorAll("text.tln-gg-frame-label")].map((el) => [el.dataset.address, box(el)]);
  const nodes = [...root.querySelectorAll(".tln-gg-unit")].map((el) => [el.dataset.key, box(el.querySelector("rect"))]);
  return { panel: box(root), stage: box(root.querySelector(".tln-gg-stage")),
    svg: box(root.querySelector("svg.tln-gg-svg")), frames, labels, nodes };
}"""


def _overlap(a: list[float], b: list[float]) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def _inside(inner: list[float], outer: list[float], slack: float = 0.5) -> bool:
    return all(inner[i] >= outer[i] - slack for i in (0, 1)) and all(
        inner[i] <= outer[i] + slack for i in (2, 3)
    )


@pytest.mark.parametrize("name", ["tour", "nested"])
def test_the_grad_fn_graph_fills_the_width_and_keeps_nodes_inside_their_groups(
    panel_page, name: str
) -> None:
    sketch = _sketches()[name]
    group_of = {f"n:{node.id}": node.group for node in sketch.nodes}
    panel_page.page.set_viewport_size({"width": 1100, "height": 900})
    root = panel_page.mount("grad_fn", widgets.panel_payload(sketch))
    root.get_by_role("button", name="Unfold every group").click()
    root.get_by_role("button", name="Fit the graph to the view").click()
    geometry = root.evaluate(GEOMETRY)
    panel_width = geometry["panel"][2] - geometry["panel"][0]
    assert geometry["stage"][2] - geometry["stage"][0] >= 0.7 * panel_width
    frames = dict(geometry["frames"])
    assert frames, "every group is unfolded: each has a frame"
    labels = geometry["labels"]
    for i, (address, label) in enumerate(labels):
        assert _inside(label, frames[address]), f"label {address} leaves its frame"
        assert _inside(label, geometry["svg"]), f"label {address} is clipped"
        for other, box in labels[i + 1 :]:
            assert not _overlap(label, box), f"labels {address} and {other} overlap"
    for key, box in geometry["nodes"]:
        group = group_of.get(key, "")
        for address, frame in frames.items():
            member = group == address or group.startswith(f"{address}.")
            if member:
                assert _inside(box, frame), f"{key} sticks out of its group {address}"
            else:
                assert not _overlap(box, frame), f"{key} crosses group {address}"
    _shoot_both(panel_page, f"grad_fn_{name}", root)


def test_a_wide_table_pins_its_key_column_and_names_the_hidden_ones(panel_page) -> None:
    model = DeadRelu()
    traces = [tl.trace(model, torch.randn(8, 4), save=tl.func("relu")) for _ in range(2)]
    panel_page.page.set_viewport_size({"width": 520, "height": 700})
    root = panel_page.mount("table", widgets.panel_payload(tl.dead(traces)))
    cue = root.locator(".tln-table-cue")
    expect(cue).to_contain_text("to the right (")
    expect(cue).to_contain_text("line): scroll sideways; label stays in view.")
    scroll = root.locator(".tln-table-scroll")
    scroll.evaluate("(el) => { el.scrollLeft = el.scrollWidth; }")
    expect(cue).to_contain_text("to the left (module")
    key = root.locator("tbody th[scope=row]").first
    assert key.bounding_box()["x"] >= scroll.bounding_box()["x"] - 1  # still in view
    expect(key).to_have_text("relu_1")
    _shoot_both(panel_page, "wide_table", root)


class RaiseOnCall:
    """A cross-entropy loss that raises ValueError on its ``call``-th call."""

    def __init__(self, call: int) -> None:
        self.calls, self.call = 0, call

    def __call__(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.calls == self.call:
            raise ValueError("labels out of range")
        return nn.functional.cross_entropy(out, y)


def test_a_live_triage_whose_loss_fn_raises_ends_in_a_final_state(
    panel_page, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.recipes.zoo import MLP
    from tests.recipes.zoo import batch as zoo_batch

    shown: list[Report] = []
    monkeypatch.setattr(TriageProgress, "show", lambda _, r: shown.append(r))
    with pytest.raises(ValueError):  # three checks call the loss once, then overfit trains
        tl.recipes.triage(MLP(), zoo_batch(), RaiseOnCall(3 + 5), loss_kind="cross_entropy")
    running = next(r for r in shown if r.status == "running")
    root = panel_page.mount("triage", widgets.panel_payload(running))
    expect(root.locator(".tln-badge-word").first).to_have_text("running")
    panel_page.kernel_set("payload", widgets.panel_payload(shown[-1]))  # the final push
    expect(root.locator(".tln-badge-word").first).to_have_text("interrupted")
    expect(root.locator(".tln-lead").first).to_contain_text(
        "overfit_one_batch raised ValueError: labels out of range"
    )
    expect(root.locator(".tln-triage-progress")).to_have_count(0)
    _shoot_both(panel_page, "triage_raised", root)
