"""Recipes and helpers never pass, match or say clean about what they did not analyse.

Each case below used to end with a reassuring verdict on data or values the tool never
looked at: a numpy batch holding a NaN, a NaN loss, a meta model's weights, NaN inputs to a
precision bisection, an input the eager model rejects, a model whose output ignores its input.
Each now ends with the verdict that names what was found, or with a typed refusal.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import torchlens_nb as tl
from tests.faults._guards import untouched
from tests.recipes.planted import IgnoresInput
from torchlens_nb.errors import ForwardError

pytestmark = pytest.mark.fault("no_false_clean")

NAN_LOSS = lambda out, y: (out * float("nan")).sum()  # noqa: E731


def linear() -> nn.Linear:
    torch.manual_seed(0)
    return nn.Linear(4, 3)


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    return torch.randn(8, 4), torch.randint(0, 3, (8,))


def test_data_sanity_reads_a_numpy_batch_holding_a_nan() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(50.0, 100.0, size=(64, 4))
    x[3, 1] = np.nan
    with untouched(inputs=()):
        report = tl.recipes.data_sanity((x, np.arange(64) % 3))
    codes = {f.code for f in report.findings}
    assert report.status == "fail"
    assert {"nonfinite_values", "input_not_standardized"} <= codes
    inputs = report.fields[0]
    assert (inputs.type_name, inputs.shape, inputs.stats.nan_count) == ("ndarray", (64, 4), 1)
    assert 40 < inputs.stats.mean < 60  # the 255 finite values were read, not skipped
    assert np.isnan(x[3, 1])  # the caller's array is unchanged


def test_data_sanity_never_passes_a_field_it_could_not_read() -> None:
    report = tl.recipes.data_sanity(
        {"x": torch.randn(4, 3), "text": ["a", "b", "c", "d"], "label": torch.tensor([0, 1, 0, 1])}
    )
    assert report.status == "inconclusive"
    assert [(u.check, u.code) for u in report.unavailable] == [("field 'text'", "not_analysed")]
    assert "field 'text' (list) was not analysed" in report.lead


def test_init_loss_with_a_nan_loss_fails_and_names_it() -> None:
    report = tl.recipes.init_loss(linear(), batch(), NAN_LOSS, loss_kind="cross_entropy")
    assert report.status == "fail"
    assert report.findings[0].code == "loss_nonfinite"
    assert report.lead.startswith("the initial loss is nan")


def test_update_ratio_with_a_nan_loss_fails_and_names_it() -> None:
    report = tl.recipes.update_ratio(linear(), batch(), NAN_LOSS, steps=3)
    assert report.status == "fail"
    assert [f.code for f in report.findings] == ["loss_nonfinite"]
    assert report.lead == "the loss was nan at step 0: no update ratio can be judged."


def test_compare_params_of_a_meta_model_is_not_a_match() -> None:
    real = linear()
    meta = nn.Linear(4, 3, device="meta")
    report = tl.debug.compare_params(meta, real)
    assert report.status == "incomplete"
    assert report.lead == "no tensor could be compared"
    assert [(u.check, u.code) for u in report.unavailable] == [
        ("weight", "meta"),
        ("bias", "meta"),
    ]


def test_compare_params_with_a_shape_mismatch_is_diverged() -> None:
    left, right = linear(), nn.Linear(5, 3)
    right.bias.data.copy_(left.bias.data)  # the biases agree, the weights differ in shape
    report = tl.debug.compare_params(left, right)
    assert report.status == "diverged"
    assert report.lead == "1 of 2 tensors differ (1 in shape)"


def test_bisect_precision_on_a_nan_input_is_not_clean() -> None:
    x = torch.randn(2, 4)
    x[0, 0] = float("nan")
    report = tl.debug.bisect_precision(linear(), x)
    assert report.status == "inconclusive"
    assert report.lead.startswith("1 op holds NaN/Inf in both runs: its precision cannot be judged")
    assert [u.code for u in report.unavailable] == ["nonfinite"]


def test_graph_breaks_refuses_an_input_the_eager_model_rejects() -> None:
    # Dynamo traces numpy arrays as tensors, so explain() alone accepted this input
    x = np.ones((2, 4), dtype=np.float32)
    with pytest.raises(ForwardError, match=r"the eager model rejects these inputs: TypeError"):
        tl.debug.graph_breaks(linear(), x)


def test_batch_independence_of_a_model_ignoring_its_input_cannot_judge() -> None:
    torch.manual_seed(0)
    report = tl.recipes.batch_independence(IgnoresInput(), torch.randn(8, 4))
    assert report.status == "inconclusive"
    assert report.lead == (
        "no output depends even on its own input: independence cannot be judged."
    )
    (finding,) = report.findings
    assert (finding.code, finding.severity) == ("no_input_gradient", "warning")
    assert "tl.recipes.gradient_flow" in (finding.remedy or "")
