"""ChecksSession under FSDP2 (``torch.distributed.fsdp.fully_shard``): 2 gloo ranks on CPU.

Every scenario of ``tests/distributed/fsdp2_ranks.py`` runs in one fork launch per module.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.distributed import fsdp2_ranks, ranks
from tests.distributed.test_ddp_checks import codes, rows


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    return ranks.launch(tmp_path_factory.mktemp("fsdp2"), scenarios=fsdp2_ranks.FSDP2_SCENARIOS)


def test_s_a_reads_each_ranks_local_gradient_of_the_whole_parameter(runs) -> None:
    for rank, run in enumerate(runs["fsdp2_sites"]):
        report = run["report"]
        # the invariants that cannot run on shards are named: the report is never "clean"
        assert report["status"] == "incomplete"
        assert {u["check"] for u in report["unavailable"] if u["code"] == "sharded_params"} == {
            "step_moves",
            "outside_writes",
        }  # fresh_grads runs on the shards (tests/corpus/test_corpus_distributed.py)
        counters = report["counters"]
        assert (counters["attempts"], counters["accepted"], counters["backwards"]) == (1, 1, 1)
        assert (counters["grad_arrivals"], counters["rank"], counters["agreements"]) == (4, rank, 1)
        # full parameter names, as named_parameters() of the sharded model gives them
        names = [row["param"] for row in rows(report, "params")]
        assert names == run["names"] == ["0.weight", "0.bias", "2.weight", "2.bias"]
        # S-A norms are of this rank's local, pre-reduce gradient of the whole parameter ...
        session_norms = [row["grad_norm_raw"] for row in rows(report, "params")]
        assert session_norms == pytest.approx(run["local_norms"], rel=1e-5)
        # ... not of its shard of the reduced gradient, which the step site reads
        assert all(abs(a - b) > 1e-4 for a, b in zip(session_norms, run["shard_norms"]))
        assert run["host_reads"] == 1  # S-A norms and the shards' step-site norms: one read
        assert run["collectives_in_loop"] == {"all_reduce": 1}
        assert any("before FSDP2's reduce-scatter" in d for d in report["disclosures"])
    assert runs["fsdp2_sites"][0]["local_norms"] != runs["fsdp2_sites"][1]["local_norms"]


def test_a_nan_born_on_rank_1_stops_every_rank_before_any_writes(runs) -> None:
    rank0, rank1 = runs["fsdp2_nan"]
    # the reduce-scatter put the averaged NaN into rank 0's shard of 0.weight, not rank 1's:
    # a check on the shards would blame rank 0 and pass rank 1
    assert rank0["own_shard_nonfinite"] and not rank1["own_shard_nonfinite"]
    fields = rank1["error"]["fields"]
    assert rank1["error"]["code"] == "nonfinite_grad"
    assert (fields["culprit"], fields["attribution"], fields["rank"]) == ("0.weight", "isolated", 1)
    assert fields["culprit_site"] == "S-A" and fields["raised_on_ranks"] == [0, 1]
    assert rank0["error"]["code"] == "check_raised_on_other_rank"
    assert rank0["error"]["fields"]["raised_on_ranks"] == [1]
    for run in (rank0, rank1):
        assert run["unchanged"]  # this rank's weight and AdamW shards, bitwise
        assert run["full_weights_finite"]
        # one agreement all_reduce per step (3 steps; the third raised after agreeing)
        assert run["collectives_in_loop"] == {"all_reduce": 3}
        assert run["host_reads"] == 3  # one per step
        counters = run["report"]["counters"]
        assert (counters["accepted"], counters["raised"], counters["agreements"]) == (2, 1, 3)


def test_the_gathered_report_names_the_rank_and_the_parameter(runs) -> None:
    gathered = runs["fsdp2_gather"][0]["gathered"]
    assert runs["fsdp2_gather"][1]["gathered"] is None
    # rank 0's own shard of 2.weight got the Inf through the reduce-scatter: its finding says
    # so (site S-B), and it defers the raise to rank 1, where the value was born (site S-A)
    assert codes(gathered) == [
        ("nonfinite_grad", 0),
        ("check_raised_on_other_rank", 0),
        ("nonfinite_grad", 1),
    ]
    on_rank0, _, on_rank1 = gathered["findings"]
    assert on_rank0["fields"]["culprit_site"] == "S-B"
    assert "the reduce-scatter brought it from another rank" in on_rank0["message"]
    assert (on_rank1["fields"]["culprit"], on_rank1["fields"]["culprit_site"]) == (
        "2.weight",
        "S-A",
    )
    assert on_rank1["message"].startswith("[rank 1] non-finite gradient (inf) in 2.weight")
    assert gathered["status"] == "raised"
