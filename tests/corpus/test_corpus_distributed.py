"""The data-parallel corpus on 2 gloo ranks (``tests/corpus/distributed.py``): DDP is judged in
full; on FSDP2 shards and under a hand-written all_reduce, every invariant that cannot run is
named in ``unavailable`` and the report is never "clean" (issue 42, defect 8)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.corpus import distributed
from tests.distributed import ranks


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    return ranks.launch(tmp_path_factory.mktemp("corpus"), scenarios=distributed.SCENARIOS)


def test_ddp_healthy_is_clean_and_its_forgotten_zero_grad_is_caught(runs: Any) -> None:
    for result in runs["ddp:healthy"]:
        assert result["serious"] == [] and result["warnings"] == []
    for result in runs["ddp:planted"]:
        assert "grads_not_reset" in result["serious"]


def test_fsdp2_names_the_invariants_it_cannot_run(runs: Any) -> None:
    for case in ("fsdp2:healthy", "fsdp2:planted"):
        for result in runs[case]:
            assert {
                "fresh_grads:sharded_params",
                "step_moves:sharded_params",
                "outside_writes:sharded_params",
            } <= set(result["unavailable"])
            assert result["status"] != "clean" and result["serious"] == []


def test_a_hand_written_all_reduce_loop_names_the_replica_comparison_it_cannot_run(
    runs: Any,
) -> None:
    healthy, planted = runs["all_reduce:healthy"], runs["all_reduce:planted"]
    assert healthy[0]["weights"] == healthy[1]["weights"]
    assert planted[0]["weights"] != planted[1]["weights"]  # the replicas really drifted
    for result in healthy + planted:
        assert "replicas:replicas_not_compared" in result["unavailable"]
        assert result["status"] != "clean" and result["serious"] == []
