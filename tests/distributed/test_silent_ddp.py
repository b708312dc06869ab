"""The DDP ports of the silent-bug zoo on 2 gloo ranks (``tests/distributed/silent_ranks.py``):
each bug makes the replicas diverge, every rank reports ``replicas_disagree`` at the step it
starts (before any rank writes the disagreeing gradient), and each fixed twin ends with
bitwise-identical replicas and no warning or critical finding."""

from __future__ import annotations

from typing import Any

import pytest

from tests.distributed import ranks, silent_ranks


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    return ranks.launch(tmp_path_factory.mktemp("silent"), scenarios=silent_ranks.SCENARIOS)


@pytest.mark.parametrize("case", list(silent_ranks.DDP_CASES))
def test_every_rank_reports_the_disagreement_at_the_trigger_step(runs, case: str) -> None:
    per_rank = runs[f"{case}:bug"]
    assert per_rank[0]["weights"] != per_rank[1]["weights"]  # the bug is real: replicas diverged
    trigger = silent_ranks.DDP_CASES[case][1]
    for result in per_rank:
        found = [f for f in result["findings"] if f["code"] == "replicas_disagree"]
        assert found and found[0]["severity"] == "critical"
        assert found[0]["first_attempt"] == trigger
        assert result["warnings"].count("replicas_disagree") == 1  # warned once, not per step


@pytest.mark.parametrize("case", list(silent_ranks.DDP_CASES))
def test_the_fixed_twin_keeps_identical_replicas_and_no_finding(runs, case: str) -> None:
    per_rank = runs[f"{case}:twin"]
    assert per_rank[0]["weights"] == per_rank[1]["weights"]
    for result in per_rank:
        assert [f for f in result["findings"] if f["severity"] != "info"] == []
        assert result["warnings"] == []
        assert result["agreements"] == silent_ranks.STEPS
