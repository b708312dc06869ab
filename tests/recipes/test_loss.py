"""init_loss and random_input_test: one forward each, compared with what chance would give."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from torch.nn import functional as F

import torchlens_nb as tl
from tests.recipes.planted import teacher_classifier
from tests.recipes.state import assert_untouched, snapshot
from torchlens_nb.errors import DiagnosticArgumentError, InputFormError


def test_init_loss_of_a_fresh_classifier_is_ln_c(
    mlp10: nn.Module, classification_batch: tuple
) -> None:
    before = snapshot(mlp10)
    report = tl.recipes.init_loss(mlp10, classification_batch, nn.CrossEntropyLoss())
    assert report.status == "pass" and report.findings == ()
    assert report.expected == math.log(10)  # ln(10) = 2.303
    assert report.basis == "ln(10): uniform over 10 classes"
    # measured: a default-initialised 8-16-10 MLP starts within 2% of ln(C)
    assert abs(report.ratio - 1) < 0.02
    assert report.band == (math.log(10) / 1.5, math.log(10) * 1.5)
    assert_untouched(before, mlp10)


def test_init_loss_flags_a_head_sized_for_other_labels(classification_batch: tuple) -> None:
    torch.manual_seed(0)  # planted bug: 100 logits for 10-class labels
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 100))
    report = tl.recipes.init_loss(
        model, classification_batch, nn.CrossEntropyLoss(), num_classes=10
    )
    assert [(f.code, f.severity) for f in report.findings] == [
        ("labels_logits_mismatch", "critical"),
        ("loss_far_above_expected", "warning"),
    ]
    assert report.findings[0].fields == {"logits": 100, "num_classes": 10}
    assert report.loss > 1.5 * math.log(10)  # about ln(100) = 4.6
    assert report.status == "fail"


def test_init_loss_flags_an_n1_output_against_n_targets() -> None:
    torch.manual_seed(0)
    with pytest.warns(UserWarning, match="target size"):  # torch's own broadcast warning
        report = tl.recipes.init_loss(
            nn.Linear(4, 1), (torch.randn(16, 4), torch.randn(16)), nn.MSELoss()
        )
    assert report.findings[0].code == "target_broadcast"  # (16, 1) against (16,) -> (16, 16)
    assert report.findings[0].fields == {"output_shape": (16, 1), "target_shape": (16,)}
    assert "(16, 16)" in report.findings[0].message


def test_init_loss_says_the_model_is_cheating_when_labels_are_in_the_inputs() -> None:
    labels = torch.arange(10).repeat(4)
    inputs = 10 * F.one_hot(labels, 10).float()  # the label, copied into the features
    report = tl.recipes.init_loss(nn.Identity(), (inputs, labels), F.cross_entropy)
    assert report.findings[0].code == "loss_far_below_expected"
    assert report.findings[0].severity == "critical" and report.status == "fail"


@pytest.mark.parametrize(
    ("loss_fn", "targets", "expected"),
    [
        (nn.CrossEntropyLoss(), torch.tensor([0, 1]), math.log(2)),
        (nn.BCEWithLogitsLoss(), torch.tensor([[0.0], [1.0]]), math.log(2)),
        (F.mse_loss, torch.tensor([[1.0], [3.0]]), 1.0),  # var of {1, 3} (population) = 1
        (nn.L1Loss(), torch.tensor([[0.0], [2.0]]), 1.0),  # median 0 (lower): |0|, |2| -> mean 1
    ],
    ids=["cross_entropy_2", "bce_logits", "mse", "l1"],
)
def test_init_loss_expected_value_per_loss_family(
    loss_fn: object, targets: torch.Tensor, expected: float
) -> None:
    width = 2 if isinstance(loss_fn, nn.CrossEntropyLoss) else 1
    model = nn.Linear(3, width)
    report = tl.recipes.init_loss(model, (torch.randn(2, 3), targets), loss_fn)
    assert report.expected == pytest.approx(expected)


def test_init_loss_of_an_unknown_loss_is_inconclusive_unless_told_the_kind() -> None:
    batch = (torch.randn(8, 3), torch.randint(0, 4, (8,)))
    model = nn.Linear(3, 4)
    custom = lambda out, y: F.cross_entropy(out, y) + out.abs().mean()  # noqa: E731
    report = tl.recipes.init_loss(model, batch, custom)
    assert report.status == "inconclusive" and report.unavailable[0].code == "unknown_loss"
    told = tl.recipes.init_loss(model, batch, custom, loss_kind="cross_entropy")
    assert told.expected == math.log(4)


def test_a_plain_loss_function_gets_the_kind_it_reproduces_on_probe_inputs() -> None:
    """``def loss(out, y): return F.nll_loss(out, y)`` is probed as NLL, so init_loss has an
    expected value and output_vs_loss can see raw scores fed to it (issue 41)."""
    batch = (torch.randn(8, 3), torch.randint(0, 4, (8,)))
    model = nn.Linear(3, 4)
    assert tl.recipes.init_loss(model, batch, lambda out, y: F.nll_loss(out, y)).loss_kind == "nll"
    plain = tl.recipes.init_loss(model, batch, lambda out, y: F.cross_entropy(out, y))
    assert (plain.loss_kind, plain.expected) == ("cross_entropy", math.log(4))


def test_init_loss_validates_its_arguments_before_running(mlp10: nn.Module) -> None:
    with pytest.raises(DiagnosticArgumentError, match="loss_fn must be callable"):
        tl.recipes.init_loss(mlp10, (torch.randn(2, 8), torch.tensor([0, 1])), "ce")
    with pytest.raises(InputFormError, match="none of"):
        tl.recipes.init_loss(mlp10, {"pixels": torch.randn(2, 8)}, nn.CrossEntropyLoss())
    with pytest.raises(DiagnosticArgumentError, match="loss_kind"):
        tl.recipes.init_loss(
            mlp10,
            (torch.randn(2, 8), torch.tensor([0, 1])),
            nn.CrossEntropyLoss(),
            loss_kind="hinge",
        )


def test_random_input_test_flags_a_pipeline_that_zeroes_the_signal() -> None:
    model, x, y = teacher_classifier()
    zero_signal = lambda batch: batch * 0.0  # noqa: E731  (the planted pipeline bug)
    report = tl.recipes.random_input_test(model, (zero_signal(x), y), nn.CrossEntropyLoss())
    assert report.is_input_constant
    assert [(f.code, f.severity) for f in report.findings] == [
        ("input_carries_no_signal", "critical")
    ]
    assert report.status == "fail"


def test_random_input_test_passes_a_model_that_uses_its_input() -> None:
    model, x, y = teacher_classifier()
    before = snapshot(model)
    report = tl.recipes.random_input_test(model, (x, y), nn.CrossEntropyLoss(), trials=2)
    assert report.status == "pass" and report.findings == ()
    assert report.real_loss < 0.2 < report.noise_loss  # the teacher is right on its own data
    assert len(report.noise_losses) == 2 and report.relative_gap > 0.5
    assert_untouched(before, model)  # includes the global RNG: noise has its own generator


class IgnoresInput(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.logits = nn.Parameter(torch.tensor([2.0, 0.0, 0.0]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.logits.expand(x.shape[0], -1)


def test_random_input_test_flags_a_forward_that_ignores_its_argument() -> None:
    _, x, y = teacher_classifier()
    report = tl.recipes.random_input_test(IgnoresInput(), (x, y), nn.CrossEntropyLoss())
    assert report.output_change == 0.0
    assert report.findings[0].code == "model_ignores_input"


def test_random_input_test_of_an_untrained_model_is_inconclusive(
    mlp10: nn.Module, classification_batch: tuple
) -> None:
    report = tl.recipes.random_input_test(mlp10, classification_batch, nn.CrossEntropyLoss())
    assert report.status == "inconclusive" and report.chance_loss == math.log(10)
    assert report.findings[-1].code == "both_at_chance"


@pytest.mark.parametrize(
    "loss_fn", [nn.MSELoss(), nn.L1Loss(), nn.BCEWithLogitsLoss()], ids=["mse", "l1", "bce_logits"]
)
def test_init_loss_of_fresh_regression_and_binary_heads_is_within_5_percent(
    loss_fn: nn.Module,
) -> None:
    torch.manual_seed(0)  # the measurement behind TOLERANCE_FACTOR's docstring
    model = nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 1))
    x, t = torch.randn(512, 8), torch.randn(512, 1)
    targets = (t > 0).float() if isinstance(loss_fn, nn.BCEWithLogitsLoss) else t
    report = tl.recipes.init_loss(model, (x, targets), loss_fn)
    assert abs(report.ratio - 1) < 0.05 and report.status == "pass"


def test_init_loss_reads_the_first_batch_of_a_loader_and_dict_batches(
    mlp10: nn.Module, classification_batch: tuple
) -> None:
    x, y = classification_batch
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=64)
    from_loader = tl.recipes.init_loss(mlp10, loader, nn.CrossEntropyLoss())
    from_dict = tl.recipes.init_loss(mlp10, {"input": x, "labels": y}, nn.CrossEntropyLoss())
    from_tuple = tl.recipes.init_loss(mlp10, (x, y), nn.CrossEntropyLoss())
    assert from_loader.loss == from_dict.loss == from_tuple.loss
