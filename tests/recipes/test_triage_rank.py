"""The root-cause ranking rules of tl.recipes.triage (recipes/triage/_rank.py), one at a time,
on findings built by hand the way the recipes build them."""

from __future__ import annotations

import pytest

from torchlens_nb.recipes.triage._rank import CAUSES, rank
from torchlens_nb.report import Finding, Where

W = Where(op="relu_1", module="fc1")


def finding(code: str, severity: str = "warning", where: Where | None = None) -> Finding:
    return Finding(code, severity, f"{code} happened.", where=where)  # type: ignore[arg-type]


def chain(ranked: tuple[Finding, ...]) -> list[tuple[str, str, str | None]]:
    return [(f.fields["check"], f.code, f.fields.get("follows_from")) for f in ranked]


def test_the_first_cause_in_causal_order_claims_what_it_explains() -> None:
    ranked, root = rank(
        [
            ("data_sanity", finding("input_not_standardized")),
            ("init_loss", finding("loss_far_above_expected")),
            ("overfit_one_batch", finding("loss_diverged", "critical")),
        ]
    )
    # raw inputs explain the high init loss and the diverged overfit; init_loss, a cause of its
    # own elsewhere, is not one here because it is explained
    assert chain(ranked) == [
        ("data_sanity", "input_not_standardized", None),
        ("init_loss", "loss_far_above_expected", "data_sanity.input_not_standardized"),
        ("overfit_one_batch", "loss_diverged", "data_sanity.input_not_standardized"),
    ]
    assert root is not None and (root.cause, root.severity) == ("unscaled_inputs", "critical")
    assert ranked[0].severity == "critical"  # the chain's worst: the root sorts first


def test_a_zero_gradient_is_a_dead_layer_only_where_a_frontier_op_names_it() -> None:
    at_frontier = [
        ("gradient_flow", finding("grad_zero", where=W)),
        ("random_input_test", finding("model_ignores_input", "critical")),
    ]
    without = [
        ("gradient_flow", finding("grad_zero")),
        ("random_input_test", finding("model_ignores_input", "critical")),
    ]
    assert chain(rank(at_frontier)[0])[0] == ("gradient_flow", "grad_zero", None)
    # no dead op: the zero weight gradient comes from an input that never arrives (x * 0)
    assert chain(rank(without)[0]) == [
        ("random_input_test", "model_ignores_input", None),
        ("gradient_flow", "grad_zero", "random_input_test.model_ignores_input"),
    ]


def test_independent_causes_lead_their_own_chains_worst_first() -> None:
    ranked, root = rank(
        [
            ("data_sanity", finding("input_not_standardized")),
            ("batch_independence", finding("batch_leak", "critical")),
            ("weight_distribution", finding("weights_huge")),
        ]
    )
    # a critical leak outranks a warning about the data; ties keep the causal order
    assert chain(ranked) == [
        ("batch_independence", "batch_leak", None),
        ("data_sanity", "input_not_standardized", None),
        ("weight_distribution", "weights_huge", None),
    ]
    assert root is not None and root.check == "batch_independence" and root.explains == ()
    assert [f.fields["is_root_cause"] for f in ranked] == [True, False, False]


def test_info_findings_take_no_part_and_unknown_findings_stand_alone() -> None:
    ranked, root = rank(
        [
            ("overfit_one_batch", finding("memorised", "info")),
            ("weight_distribution", finding("subnormal_heavy")),
        ]
    )
    assert chain(ranked) == [("weight_distribution", "subnormal_heavy", None)]
    assert root is not None and root.cause == "subnormal_heavy"


def test_nothing_found_means_no_root_cause() -> None:
    assert rank([]) == ((), None)


def test_a_follower_says_what_it_follows_from_and_why() -> None:
    ranked, _ = rank(
        [
            ("output_vs_loss", finding("double_softmax", "critical")),
            ("overfit_one_batch", finding("cannot_overfit", "critical")),
        ]
    )
    assert ranked[1].message == (
        "cannot_overfit happened. Follows from output_vs_loss's double_softmax: the loss reads "
        "the outputs in the wrong form, so it can barely fall."
    )
    assert ranked[0].fields["explains"] == ("overfit_one_batch.cannot_overfit",)


@pytest.mark.parametrize("cause", CAUSES, ids=lambda c: c.name)
def test_every_cause_says_why(cause) -> None:
    assert cause.because and cause.matches
