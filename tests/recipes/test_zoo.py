"""The bug zoo (tests/recipes/zoo.py): every bug caught by its check and named first, every
healthy twin without a warn or fail row, the caller's model, optimizer, .grad, batch and RNG
bitwise as they were."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
import torch

import torchlens_nb as tl
from tests.recipes.state import assert_untouched, snapshot
from tests.recipes.zoo import INTENDED, TWINS, ZOO, Bug
from torchlens_nb.recipes._batches import call_model, primary_output, split_batch
from torchlens_nb.report import TriageReport


def _tensors_equal(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_tensors_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_tensors_equal(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def triage_untouched(args: dict[str, Any]) -> TriageReport:
    """triage(**args) after one backward (so every trainable parameter holds a .grad), asserting
    that the model (weights, buffers, .grad, modes), the optimizer's state, the batch and the
    RNG are bitwise what they were."""
    model, optimizer, data = args["model"], args["optimizer"], args["batch"]
    inputs, targets = split_batch(data)
    args["loss_fn"](primary_output(call_model(model, inputs)), targets).backward()
    before, state, kept = (
        snapshot(model),
        copy.deepcopy(optimizer.state_dict()),
        copy.deepcopy(data),
    )
    report = tl.recipes.triage(**args, live=False)
    assert_untouched(before, model)
    assert _tensors_equal(optimizer.state_dict(), state)
    assert _tensors_equal(data, kept)
    return report


@pytest.fixture(scope="module")
def reports() -> dict[str, TriageReport]:
    """One triage per bug and per twin (twins are shared between bugs)."""
    torch.set_num_threads(1)
    ran = {bug.name: triage_untouched(bug.call(broken=True)) for bug in (*ZOO, *INTENDED)}
    ran.update({name: triage_untouched(twin.arguments()) for name, twin in TWINS.items()})
    return ran


def test_the_zoo_spans_four_models_and_25_bugs() -> None:
    assert len(ZOO) >= 25
    families = {bug.twin.name.split()[0] for bug in ZOO}
    assert families == {"mlp", "cnn", "gpt2", "encoder"}
    assert all(bug.case.measured and bug.twin.measured for bug in ZOO)


@pytest.mark.parametrize("bug", ZOO, ids=lambda b: b.name)
def test_the_bug_is_caught_by_its_check_and_named_first(
    reports: dict[str, TriageReport], bug: Bug
) -> None:
    report = reports[bug.name]
    row = next(r for r in report.rows if r.check == bug.catching_check)
    assert row.status != "pass" and row.is_root_cause, (row, report.card())
    assert report.findings[0].fields["check"] == bug.catching_check
    assert report.findings[0].fields["is_root_cause"] is True
    assert report.root_cause is not None and report.root_cause.check == bug.catching_check
    assert report.status in ("fail", "warn")
    assert row.status == ("fail" if report.root_cause.severity == "critical" else "warn")
    for finding in report.findings[1:]:  # each other finding is a cause or follows from one
        assert finding.fields["check"] in tl.recipes.TRIAGE_CHECKS
        assert "follows_from" in finding.fields or "cause" in finding.fields


@pytest.mark.parametrize("name", sorted(TWINS))
def test_the_healthy_twin_has_no_fail_or_warn_row(
    reports: dict[str, TriageReport], name: str
) -> None:
    report = reports[name]
    assert [(r.check, r.status) for r in report.rows if r.status in ("fail", "warn")] == []
    assert report.root_cause is None and report.findings == ()


def test_downstream_findings_name_the_finding_they_follow_from(
    reports: dict[str, TriageReport],
) -> None:
    report = reports["dead_layer"]
    # the dead layer stops the gradient: overfitting fails, the output ignores the input,
    # batch independence cannot be judged, and the step-size probe stalls at the user's lr
    assert [(f.fields["check"], f.code, f.fields.get("follows_from")) for f in report.findings] == [
        ("gradient_flow", "grad_zero", None),
        ("overfit_one_batch", "cannot_overfit", "gradient_flow.grad_zero"),
        ("random_input_test", "model_ignores_input", "gradient_flow.grad_zero"),
        ("batch_independence", "no_input_gradient", "gradient_flow.grad_zero"),
        ("update_ratio", "lr_too_low", "gradient_flow.grad_zero"),
    ]
    root = report.root_cause
    assert root is not None and (root.cause, root.severity) == ("dead_layer", "critical")
    assert "Follows from gradient_flow's grad_zero" in report.findings[1].message
    assert report.lead.startswith("root cause in gradient_flow; 4 findings follow from it: ")


def test_the_double_softmax_is_said_by_name(reports: dict[str, TriageReport]) -> None:
    report = reports["double_softmax"]
    assert report.findings[0].code == "double_softmax"
    assert report.check_report("output_vs_loss").output_form == "probabilities"
    assert report.root_cause is not None
    assert "remove the final Softmax" in (report.root_cause.remedy or "")


def test_a_step_size_that_diverges_is_lowered_by_the_measured_factor(
    reports: dict[str, TriageReport],
) -> None:
    report = reports["sgd_lr_100x"]
    root = report.root_cause
    assert root is not None and (root.code, root.cause) == ("lr_too_high", "step_size")
    assert (root.remedy or "").startswith("lower the learning rate by 10x")
    assert "nonfinite_origin" not in (root.remedy or "")
    assert "next: session.report()" not in report.card()


def test_the_setup_is_read_from_what_the_caller_handed_over(
    reports: dict[str, TriageReport],
) -> None:
    codes = {
        name: reports[name].root_cause.code  # type: ignore[union-attr]
        for name in (
            "left_in_eval",
            "layers_not_in_optimizer",
            "decay_on_layernorm",
            "gpt2_frozen_embedding_held",
        )
    }
    assert codes == {
        "left_in_eval": "model_in_eval",
        "layers_not_in_optimizer": "trainable_params_not_in_optimizer",
        "decay_on_layernorm": "weight_decay_on_norm",
        "gpt2_frozen_embedding_held": "frozen_params_in_optimizer",
    }
    setup = reports["frozen_layer_held"].check_report("training_setup")
    assert setup.frozen_held == ("fc1.weight", "fc1.bias")  # type: ignore[attr-defined]


@pytest.mark.parametrize("bug", INTENDED, ids=lambda b: b.name)
def test_a_frozen_layer_that_does_not_stop_fitting_is_a_note_naming_it(
    reports: dict[str, TriageReport], bug: Bug
) -> None:
    report = reports[bug.name]
    setup = next(r for r in report.rows if r.check == "training_setup")
    assert setup.status == "pass" and "requires_grad=False" in setup.lead
    setup_report = report.check_report("training_setup")
    note = next(f for f in setup_report.findings if f.code == "frozen_params_in_optimizer")
    assert note.severity == "info"
    assert note.fields["params"]
    assert report.status not in ("fail", "warn"), report.card()


def test_every_report_says_what_one_call_cannot_see(reports: dict[str, TriageReport]) -> None:
    report = reports["mlp adam 3e-4"]
    payload = report.to_dict()
    assert [item["what"] for item in payload["data"]["not_checked"]] == [
        "label alignment for sequence models",
        "the loop's zero_grad",
        "input/label pairing",
        "loss masking of padding",
    ]
    assert "not checked by this call: the loop's zero_grad: " in report.card()
    json.dumps(payload, allow_nan=False)


def test_one_row_per_check_in_run_order_with_the_key_number(
    reports: dict[str, TriageReport],
) -> None:
    report = reports["head_init_x100"]
    frame = report.to_pandas()
    optional = ("causal_dependency", "padding_dependency")  # seq_dim= / right-padded ids only
    assert list(frame["check"]) == [c for c in tl.recipes.TRIAGE_CHECKS if c not in optional]
    init = report.rows[2]
    assert init.key == f"{init.value:.4g} vs 2.303 expected" and init.value > 30  # ln(10) = 2.303
