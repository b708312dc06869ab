"""leakage_poison: NaN dye plus a +/-sentinel differential run, localised per stage."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

import torchlens_nb as tl
from torchlens_nb.errors import DiagnosticArgumentError, InputFormError

CUTOFF = 80


@pytest.fixture
def data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.normal(size=(100, 3)), rng.normal(size=100)


def lag_features(X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A past-only stage: each row gets the previous row's features."""
    lagged = np.vstack([X[:1], X[:-1]])
    return np.hstack([X, lagged]), y


def leaky_scaler(X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The planted bug: the scaler is fit on train AND test rows."""
    return (X - X.mean(axis=0)) / X.std(axis=0), y


def train_scaler(X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    mean, std = X[:CUTOFF].mean(axis=0), X[:CUTOFF].std(axis=0)
    return (X - mean) / std, y


def test_leaky_scaler_is_found_and_localised(data: tuple) -> None:
    X, y = data
    original = X.copy()
    report = tl.recipes.leakage_poison(
        [("lags", lag_features), ("scale", leaky_scaler)], X, y, CUTOFF
    )
    assert report.verdict == "leak" and report.status == "fail"
    lags, scale = report.stages
    assert (lags.nan_crossed, lags.sentinel_changed, lags.is_crossing) == (False, False, False)
    assert (scale.nan_crossed, scale.sentinel_changed, scale.is_crossing) == (True, True, True)
    assert scale.columns == tuple(str(i) for i in range(6)) and scale.past_rows == CUTOFF
    assert report.findings[-1].code == "leak" and report.findings[-1].fields["stage"] == "scale"
    assert np.array_equal(X, original)  # the caller's array was never dyed


def test_scaler_fit_on_train_rows_is_clean(data: tuple) -> None:
    X, y = data
    report = tl.recipes.leakage_poison(
        [("lags", lag_features), ("scale", train_scaler)], X, y, CUTOFF
    )
    assert report.verdict == "clean" and report.findings == ()
    assert [s.sentinel_changed for s in report.stages] == [False, False]


def test_nan_skipping_pandas_scaler_is_caught_by_the_sentinel(data: tuple) -> None:
    X, y = data
    frame = pd.DataFrame(X, columns=["a", "b", "c"])
    pandas_scaler = lambda df, y: ((df - df.mean()) / df.std(), y)  # noqa: E731 (skipna=True)
    report = tl.recipes.leakage_poison(pandas_scaler, frame, pd.Series(y), CUTOFF)
    (stage,) = report.stages
    assert (stage.nan_crossed, stage.sentinel_changed) == (False, True)  # dye alone: false pass
    assert stage.columns == ("a", "b", "c")
    assert "found only by the sentinel" in report.findings[-1].message


def test_imputer_that_swallows_the_dye_is_named(data: tuple) -> None:
    X, y = data
    frame = pd.DataFrame(X, columns=["a", "b", "c"])
    impute = lambda df, y: (df.fillna(df.mean()), y)  # noqa: E731
    report = tl.recipes.leakage_poison([("impute", impute)], frame, y, CUTOFF)
    assert report.stages[0].dye_vanished and report.verdict == "clean"
    assert [f.code for f in report.findings] == ["dye_vanished"]


def test_centred_rolling_window_leaks_and_past_window_does_not(data: tuple) -> None:
    X, y = data
    frame = pd.DataFrame(X, columns=["a", "b", "c"])

    def window(center: bool):
        def stage(df: pd.DataFrame, y: object) -> tuple:
            return df.assign(smooth=df["a"].rolling(5, center=center).mean()), y

        return stage

    leaky = tl.recipes.leakage_poison([("smooth", window(True))], frame, y, CUTOFF)
    clean = tl.recipes.leakage_poison([("smooth", window(False))], frame, y, CUTOFF)
    assert leaky.verdict == "leak" and leaky.stages[0].columns == ("smooth",)
    assert clean.verdict == "clean"


def test_nan_crossing_through_a_zero_mask_is_a_suspect_not_a_leak(data: tuple) -> None:
    X, y = data

    def mask(X: np.ndarray, y: np.ndarray) -> tuple:
        total = (X * 0.0).sum(axis=0)  # NaN * 0 = NaN, but sentinel * 0 = 0
        return X + total, y

    report = tl.recipes.leakage_poison([("mask", mask)], X, y, CUTOFF)
    assert report.verdict == "suspect" and report.status == "warn"
    assert report.findings[0].code == "nan_only_crossing"


def test_a_train_split_output_and_tensors_are_aligned(data: tuple) -> None:
    X, y = data
    split = lambda X, y: (X[:CUTOFF], y[:CUTOFF])  # noqa: E731
    report = tl.recipes.leakage_poison(
        [("scale", leaky_scaler), ("split", split)], torch.tensor(X), torch.tensor(y), CUTOFF
    )
    assert [s.past_rows for s in report.stages] == [CUTOFF, CUTOFF]
    assert [s.is_crossing for s in report.stages] == [True, False]


def test_unalignable_stage_is_reported_not_guessed(data: tuple) -> None:
    X, y = data
    drop_two = lambda X, y: (X[2:], y[2:])  # noqa: E731
    report = tl.recipes.leakage_poison([("drop", drop_two)], X, y, CUTOFF)
    assert report.verdict == "inconclusive" and report.stages[0].past_rows is None
    assert "cannot be aligned" in (report.stages[0].note or "")


def test_leakage_poison_validates_before_running(data: tuple) -> None:
    X, y = data
    with pytest.raises(DiagnosticArgumentError, match="cutoff"):
        tl.recipes.leakage_poison(leaky_scaler, X, y, 100)
    with pytest.raises(InputFormError, match="rows"):
        tl.recipes.leakage_poison(leaky_scaler, X, y[:5], CUTOFF)
    with pytest.raises(InputFormError, match="pipeline"):
        tl.recipes.leakage_poison("scale", X, y, CUTOFF)


def leaky_scaler_plus_row_mean(X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The leaky scaler, then a stage-added feature: each row's mean (column len(X[0]))."""
    scaled = (X - X.mean(axis=0)) / X.std(axis=0)
    return np.hstack([scaled, scaled.mean(axis=1, keepdims=True)]), y


@pytest.mark.parametrize(
    ("features", "named"),
    [(8, "['0', '1', '2', '3', '4', '5', '6', '7', '8']"), (13, "['0', '1', '2', ... (14 in all)")],
    ids=["8+1_columns", "13+1_columns"],
)
def test_the_leak_finding_names_every_column_of_its_table_row(features: int, named: str) -> None:
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(100, features)), rng.normal(size=100)
    report = tl.recipes.leakage_poison(leaky_scaler_plus_row_mean, X, y, CUTOFF)
    (stage,) = report.stages
    expected = tuple(str(i) for i in range(features + 1))  # numeric order: '10' after '9'
    assert stage.columns == expected
    assert report.table().dicts()[0]["columns"] == expected
    leak = report.findings[-1]
    assert leak.fields["columns"] == expected  # (fields freeze lists into tuples)
    assert f"in columns {named[:18]}" in leak.message
    assert named[-12:] in leak.message
