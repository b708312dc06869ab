"""data_sanity and class_balance: the batch statistics and label counts people print by hand."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import torchlens_nb as tl
from torchlens_nb.errors import DiagnosticArgumentError, InputFormError


def test_data_sanity_reports_exact_field_statistics_of_a_tuple_batch() -> None:
    x = torch.tensor([[0.0, 2.0], [4.0, float("nan")]])
    report = tl.recipes.data_sanity((x, torch.tensor([1, 1])))
    rows = report.table("fields").dicts()
    assert [(r["field"], r["role"], r["shape"]) for r in rows] == [
        ("0", "input", (2, 2)),
        ("1", "target", (2,)),
    ]
    # finite values 0, 2, 4: mean 2, sample std 2, one NaN
    assert (rows[0]["min"], rows[0]["max"], rows[0]["mean"], rows[0]["std"], rows[0]["nan"]) == (
        0.0,
        4.0,
        2.0,
        2.0,
        1,
    )
    assert rows[1]["distinct"] == 1
    assert [(f.code, f.severity) for f in report.findings] == [
        ("nonfinite_values", "critical"),
        ("single_target_value", "warning"),
        ("input_not_standardized", "info"),  # mean 2, std 2: within 10x of unit scale, a hint
    ]
    assert report.status == "fail"


def test_data_sanity_flags_pixel_scale_inputs_and_passes_standardised_ones() -> None:
    torch.manual_seed(0)
    labels = torch.randint(0, 10, (32,))
    raw = tl.recipes.data_sanity((torch.rand(32, 3, 4, 4) * 255, labels))
    normalised = tl.recipes.data_sanity((torch.randn(32, 3, 4, 4), labels), num_classes=10)
    assert [f.code for f in raw.findings] == ["input_not_standardized"]
    assert raw.findings[0].fields["field"] == "0"
    assert normalised.status == "pass" and normalised.findings == ()


def test_data_sanity_reads_dict_batches_and_checks_labels() -> None:
    batch = {"input": torch.randn(4, 3), "labels": torch.tensor([0, -3, 2, 12])}
    report = tl.recipes.data_sanity(batch, num_classes=10)
    assert {f.code for f in report.findings} == {"negative_labels", "labels_out_of_range"}
    assert report.table().dicts()[1]["role"] == "target"


def test_data_sanity_pools_batches_of_a_loader_and_catches_size_mismatch() -> None:
    loader = DataLoader(TensorDataset(torch.ones(6, 2), torch.arange(6)), batch_size=2)
    report = tl.recipes.data_sanity(loader, num_batches=3)
    assert report.num_batches == 3
    assert report.fields[1].stats is not None and report.fields[1].stats.numel == 6
    assert [f.code for f in report.findings] == ["constant_field"]
    broken = tl.recipes.data_sanity((torch.randn(4, 2), torch.arange(3)))
    assert broken.findings[0].code == "batch_size_mismatch"


def test_data_sanity_refuses_a_string() -> None:
    with pytest.raises(InputFormError, match="DataLoader"):
        tl.recipes.data_sanity("train.csv")
    with pytest.raises(DiagnosticArgumentError, match="num_batches"):
        tl.recipes.data_sanity(torch.ones(2), num_batches=0)


def test_class_balance_flags_a_100_to_1_imbalance_with_weights() -> None:
    labels = torch.tensor([0] * 100 + [1])
    report = tl.recipes.class_balance(labels)
    assert report.ratio == 100.0 and report.total == 101
    assert [(c.label, c.count) for c in report.counts] == [(0, 100), (1, 1)]
    (finding,) = report.findings
    assert (finding.code, finding.severity) == ("class_imbalance", "warning")
    assert "99.0% accuracy" in finding.message
    # inverse-frequency weights: 101 / (2 * 100) = 0.505 and 101 / (2 * 1) = 50.5
    assert report.table().dicts()[1]["weight"] == pytest.approx(50.5)
    assert "torch.tensor([0.505, 50.5])" in (finding.remedy or "")


@pytest.mark.parametrize(
    ("counts", "severity"),
    [
        ((50, 10), None),
        ((110, 10), "warning"),
        ((1010, 10), "critical"),
    ],
    ids=["5to1", "11to1", "101to1"],
)
def test_class_balance_thresholds(counts: tuple[int, int], severity: str | None) -> None:
    labels = torch.tensor([0] * counts[0] + [1] * counts[1])
    report = tl.recipes.class_balance(labels)
    assert [f.severity for f in report.findings] == ([severity] if severity else [])


def test_class_balance_reads_a_loader_and_counts_missing_classes() -> None:
    data = TensorDataset(torch.randn(8, 2), torch.tensor([0, 1, 0, 1, 0, 1, 0, 1]))
    report = tl.recipes.class_balance(DataLoader(data, batch_size=3), num_classes=3)
    assert [(c.label, c.count) for c in report.counts] == [(0, 4), (1, 4), (2, 0)]
    assert report.ratio == float("inf")
    assert report.findings[0].code == "missing_classes"


def test_class_balance_counts_multilabel_columns_and_skips_ignore_index() -> None:
    multi = tl.recipes.class_balance(torch.tensor([[1.0, 0.0], [1.0, 1.0], [1.0, 0.0]]))
    assert multi.is_multilabel and [c.count for c in multi.counts] == [3, 1]
    tokens = tl.recipes.class_balance(torch.tensor([[0, 1, -100], [1, 0, -100]]))
    assert tokens.total == 4 and tokens.table().attrs["ignored"] == 2


def test_class_balance_refuses_continuous_targets() -> None:
    with pytest.raises(DiagnosticArgumentError, match="continuous"):
        tl.recipes.class_balance(torch.tensor([0.5, 1.2]))


def test_class_balance_figure_is_a_bar_chart_of_the_counts() -> None:
    fig = tl.recipes.class_balance([0, 0, 0, 1]).figure()
    assert list(fig.data[0].y) == [3, 1] and list(fig.data[0].x) == ["0", "1"]
