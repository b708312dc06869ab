"""Every recipe report: strict JSON with NaN/Inf inside, a bounded card, a figure, a panel."""

from __future__ import annotations

import json

import plotly.graph_objects as go
import pytest

from tests.recipes.reports import BUILDERS, NONFINITE
from torchlens_nb import widgets


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_report_is_strict_json_with_a_bounded_card(name: str) -> None:
    report = BUILDERS[name]()
    text = json.dumps(report.to_dict(), allow_nan=False)
    if name in NONFINITE:
        assert '{"$float": "' in text  # NaN / Inf were present and encoded
    card = report.card().splitlines()
    hand_checks = len(getattr(report, "not_checked", ()))  # triage's "not checked by this call"
    assert len(card) <= 1 + 5 + 1 + len(report.unavailable) + 4 + 1 + hand_checks
    assert all(len(line) <= 240 for line in card)
    assert json.dumps(widgets.panel_payload(report), allow_nan=False)


@pytest.mark.parametrize(
    "name", sorted(set(BUILDERS) - {"leakage_poison", "prime_dims", "output_vs_loss", "triage"})
)
def test_report_figure_is_a_plotly_figure(name: str) -> None:
    report = BUILDERS[name]()
    assert isinstance(report.figure(), go.Figure)


def test_recipe_reports_with_charts_get_the_recipe_panel() -> None:
    report = BUILDERS["class_balance"]()
    assert widgets.panel_name(report) == "recipe"
    assert widgets.panel_name(BUILDERS["prime_dims"]()) == "table"
