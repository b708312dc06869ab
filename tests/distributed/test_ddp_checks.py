"""ChecksSession under real DistributedDataParallel: 2 gloo ranks on CPU, one fork launch.

Every scenario of ``tests/distributed/ranks.py`` runs once per module (about 4 s on 2 cores);
each test reads what both ranks recorded.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from tests.distributed import ranks


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    return ranks.launch(tmp_path_factory.mktemp("ranks"))


def rows(report: dict[str, Any], name: str) -> list[dict[str, Any]]:
    table = next(t for t in report["tables"] if t["name"] == name)
    return [dict(zip(table["columns"], row)) for row in table["rows"]]


def codes(report: dict[str, Any]) -> list[tuple[str, Any]]:
    return [(f["code"], f["fields"].get("rank")) for f in report["findings"]]


def test_sites_read_local_gradients_and_behave_as_in_one_process(runs) -> None:
    for rank, run in enumerate(runs["sites"]):
        report = run["report"]
        counters = report["counters"]
        assert report["status"] == "clean"
        assert (counters["attempts"], counters["accepted"], counters["backwards"]) == (3, 3, 3)
        assert counters["grad_arrivals"] == 3 * 4 and counters["accumulation_factor"] == 1
        assert (counters["rank"], counters["world_size"], counters["agreements"]) == (rank, 2, 3)
        assert report["subject"].endswith(f"on rank {rank}")
        # S-A/S-D evidence is this rank's LOCAL gradient, not the all-reduced average
        session_norms = [row["grad_norm_raw"] for row in rows(report, "params")]
        assert session_norms == pytest.approx(run["local_norms"], rel=1e-6)
        assert all(abs(a - b) > 1e-4 for a, b in zip(session_norms, run["reduced_norms"]))
    assert runs["sites"][0]["reduced_norms"] == runs["sites"][1]["reduced_norms"]
    assert runs["sites"][0]["local_norms"] != runs["sites"][1]["local_norms"]
    assert runs["sites"][0]["weights"] == runs["sites"][1]["weights"]


def test_gather_keeps_ranks_sums_attempts_and_tables_per_rank_counters(runs) -> None:
    gathered = runs["sites"][0]["gathered"]
    assert runs["sites"][1]["gathered"] is None  # rank 1 got its own report back
    counters = gathered["counters"]
    assert (counters["world_size"], counters["attempts"], counters["accepted"]) == (2, 6, 6)
    assert [c["rank"] for c in counters["per_rank"]] == [0, 1]
    assert [c["attempts"] for c in counters["per_rank"]] == [3, 3]
    side_by_side = rows(gathered, "ranks")
    assert [(r["rank"], r["attempts"], r["agreements"]) for r in side_by_side] == [
        (0, 3, 3),
        (1, 3, 3),
    ]
    assert [r["rank"] for r in rows(gathered, "params")] == [0] * 4 + [1] * 4
    assert [r["param"] for r in rows(gathered, "params")][:4] == [
        "module.0.weight",
        "module.0.bias",
        "module.2.weight",
        "module.2.bias",
    ]
    assert gathered["subject"].endswith("on 2 ranks")


def test_nan_born_on_rank_1_is_found_there_and_every_rank_stops_before_writing(runs) -> None:
    rank0, rank1 = runs["nan"]
    # the all-reduce smeared rank 1's NaN into rank 0's gradient: rank 0's step site reads it
    # (site S-B, "the all-reduce brought it") and defers the raise to rank 1, where the
    # pre-reduce evidence says it was born (site S-A), as under FSDP2 (test_fsdp2_checks.py)
    assert rank0["post_allreduce_grad_nonfinite"] and rank1["post_allreduce_grad_nonfinite"]
    assert rank1["error"]["code"] == "nonfinite_grad"
    fields = rank1["error"]["fields"]
    assert (fields["culprit"], fields["attribution"], fields["rank"]) == (
        "module.0.weight",
        "isolated",
        1,
    )
    assert fields["culprit_site"] == "S-A" and fields["raised_on_ranks"] == [0, 1]
    assert rank0["error"]["code"] == "check_raised_on_other_rank"
    assert rank0["error"]["fields"]["raised_on_ranks"] == [1]
    # rank 0's own report leads with the raise it stopped for, never "no findings"
    assert (
        rank0["report"]["lead"].endswith("2 finding(s).") and rank0["report"]["tone"] == "critical"
    )
    for run in (rank0, rank1):
        assert run["unchanged"]  # weights and AdamW state bitwise as before the step
        assert run["replicas_identical"]  # sha256 of the parameters equal on both ranks
        assert run["report"]["status"] == "raised" and run["report"]["counters"]["raised"] == 1
    gathered = rank0["gathered"]
    assert codes(gathered) == [
        ("nonfinite_grad", 0),
        ("check_raised_on_other_rank", 0),
        ("nonfinite_grad", 1),
    ]
    assert "the all-reduce brought it from another rank" in gathered["findings"][0]["message"]
    assert gathered["findings"][2]["message"].startswith(
        "[rank 1] non-finite gradient (nan) in module.0.weight"
    )
    assert (gathered["status"], gathered["counters"]["raised"]) == ("raised", 2)


def test_no_sync_accumulation_recovers_k_and_the_skip_ledger_under_gradscaler(runs) -> None:
    for run in runs["accumulation"]:
        counters = run["report"]["counters"]
        assert counters["accumulation_factor"] == 4
        assert counters["backwards_per_attempt"] == {"4": 6}
        assert (counters["attempts"], counters["accepted"], counters["skipped"]) == (6, 5, 1)
        assert run["report"]["ledgers"]["scale"]["skipped"] == 1  # one scale decrement
        assert run["final_scale"] == 2.0**9
        # nothing fires on the 18 no_sync micro-steps: no raise, no warning, one agreement per
        # step that reached the optimizer (the skipped attempt never reaches S-B)
        assert counters["raised"] == 0 and counters["agreements"] == 5
        assert not [f for f in run["report"]["findings"] if f["severity"] != "info"]
    # the Inf was born on rank 1 inside no_sync: only rank 1 holds the evidence
    assert codes(runs["accumulation"][0]["report"]) == []
    assert codes(runs["accumulation"][1]["report"]) == [("nonfinite_grad_skipped_by_scaler", None)]
    assert runs["accumulation"][0]["weights"] == runs["accumulation"][1]["weights"]


def test_one_collective_per_optimizer_step_none_per_parameter(runs) -> None:
    for run in runs["cost"]:
        by_params = {int(k): v for k, v in run.items() if k != "seconds"}
        assert sorted(by_params) == [4, 20]
        for measured in by_params.values():
            assert measured["collectives"] == {"all_reduce": 5}  # 5 steps, 4 or 20 parameters
            assert measured["agreements"] == 5
            # measured, not bounded here (a shared CI machine decides wall time)
            assert math.isfinite(measured["agreement_ms_per_step"])
            assert measured["agreement_ms_per_step"] > 0
    for run in (runs["nan"][0], runs["accumulation"][0]):
        assert set(run["collectives_in_loop"]) == {"all_reduce"}


def test_fsdp_measured_facts(runs) -> None:
    """FSDP1 is not supported; FSDP2 is (tests/distributed/test_fsdp2_checks.py). These are
    the facts docs/distributed.md states."""
    for run in runs["fsdp"]:
        flat = run["fsdp1"]
        assert flat["ran"] and flat["full_numel"] == 212
        # the optimizer holds one flat shard (half of 212 elements); S-A sees the unsharded
        # flat gradient before the reduce-scatter; the session names one flat parameter
        assert flat["optimizer_params"] == [["_fsdp_wrapped_module._flat_param", [106], 106]]
        assert flat["s_a_grad_numels"] == [212]
        assert flat["session_params"] == ["_fsdp_wrapped_module._flat_param"]
        sharded = run["fsdp2"]
        # a hook on FSDP2's sharded parameters sees DTensor gradients, whose numel() is the
        # global one; FSDP2 calls it after the reduce-scatter (test_fsdp2_checks.py)
        assert sharded["s_a_grad_numels"] == [128, 16, 64, 4]
        assert sharded["ran"]
        assert sharded["session_params"] == ["0.weight", "0.bias", "2.weight", "2.bias"]


def test_rank0_dashboard_shows_every_ranks_counters_from_the_one_agreement(runs) -> None:
    rank0, rank1 = runs["live"]
    # the counters ride on the S-B all_reduce: still exactly one collective per optimizer step
    for run in (rank0, rank1):
        assert run["collectives_in_loop"] == {"all_reduce": 4} and run["agreements"] == 4
    assert "ranks" not in rank0["increments"][0]  # the first backward comes before any agreement
    last = rank0["increments"][-1]["ranks"]
    # as of the 4th S-B: 3 attempts closed; rank 1 ran 2 backwards per step (one in no_sync)
    assert last == [
        {
            "rank": 0,
            "at_step": 4,
            "raising": 0,
            "attempts": 3,
            "accepted": 3,
            "skipped": 0,
            "raised": 0,
            "backwards": 4,
            "pending_backwards": 0,
        },
        {
            "rank": 1,
            "at_step": 4,
            "raising": 0,
            "attempts": 3,
            "accepted": 3,
            "skipped": 0,
            "raised": 0,
            "backwards": 8,
            "pending_backwards": 0,
        },
    ]
    assert rank1["increments"][-1]["ranks"] == last  # every rank knows every rank's row
    steps = [[row["at_step"] for row in m["ranks"]] for m in rank0["increments"] if "ranks" in m]
    assert steps[0] == [1, 1] and steps[-1] == [4, 4]
