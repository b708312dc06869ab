"""The data-parallel corpus on 2 gloo ranks (``tests/corpus/distributed.py``): DDP and a
hand-written all_reduce loop are judged in full (a forgotten ``zero_grad``, replicas that drift
apart: caught); on FSDP2 shards a forgotten ``zero_grad`` is caught and every invariant that
cannot run there is named in ``unavailable``; ranks that never all-reduce a gradient are never
compared, and say so (issue 42, defect 8)."""

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


@pytest.mark.parametrize("setup", ["fsdp2", "fsdp2_accumulating"])
def test_fsdp2_healthy_is_quiet_and_its_forgotten_zero_grad_is_caught(
    runs: Any, setup: str
) -> None:
    healthy, planted = runs[f"{setup}:healthy"], runs[f"{setup}:planted"]
    for result in healthy:
        assert result["serious"] == [] and result["warnings"] == []
    for result in planted:
        assert "grads_not_reset" in result["serious"]
    for result in healthy + planted:
        assert "fresh_grads:sharded_params" not in result["unavailable"]
        assert {"step_moves:sharded_params", "outside_writes:sharded_params"} <= set(
            result["unavailable"]
        )
        assert result["status"] != "clean"  # what does not run on shards is named


def test_a_hand_written_all_reduce_loop_is_compared_and_its_drift_is_caught(runs: Any) -> None:
    healthy, planted = runs["all_reduce:healthy"], runs["all_reduce:planted"]
    assert healthy[0]["weights"] == healthy[1]["weights"]
    assert planted[0]["weights"] != planted[1]["weights"]  # the replicas really drifted
    for result in healthy:
        assert result["serious"] == [] and result["warnings"] == []
        assert "replicas:replicas_not_compared" not in result["unavailable"]
    for result in planted:
        assert "replicas_disagree" in result["serious"]
    for result in healthy + planted:  # the session's watch on all_reduce is gone after it
        assert result["all_reduce_restored"]


def test_a_forgotten_zero_grad_is_caught_on_ranks_that_train_alone(runs: Any) -> None:
    for result in runs["independent:planted"]:
        assert "grads_not_reset" in result["serious"]


def test_ranks_that_never_all_reduce_a_gradient_are_not_compared(runs: Any) -> None:
    """Model-parallel-like: each rank trains its own model and no gradient is all-reduced
    (other tensors are): the replicas may differ on purpose, never an accusation."""
    results = runs["independent:healthy"]
    assert results[0]["weights"] != results[1]["weights"]
    for result in results:
        assert result["serious"] == [] and result["warnings"] == []
        assert "replicas:replicas_not_compared" in result["unavailable"]
        assert result["status"] != "clean"
