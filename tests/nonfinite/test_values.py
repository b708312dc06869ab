"""The value facts behind every NaN tool: the aminmax finiteness check and the statistics."""

from __future__ import annotations

import pytest
import torch

from torchlens_nb.debug._values import (
    finite_flags,
    is_all_finite,
    nonfinite_kinds,
    value_classes,
    value_stats,
)

INF, NAN = float("inf"), float("nan")

CASES = [
    pytest.param(torch.ones(4), True, id="finite"),
    pytest.param(torch.cat([torch.randn(5000), torch.tensor([NAN])]), False, id="nan-at-the-end"),
    pytest.param(torch.tensor([1.0, NAN], dtype=torch.bfloat16), False, id="bf16-nan"),
    pytest.param(torch.tensor([1.0, NAN, 2.0]), False, id="one-nan"),
    pytest.param(torch.tensor([INF, -INF]), False, id="inf-minus-inf"),
    pytest.param(torch.tensor([1.0, -INF]), False, id="neg-inf"),
    # 2 * 60000 = 120000 overflows float16 when summed, yet every element is finite
    pytest.param(
        torch.tensor([60000.0, 60000.0], dtype=torch.float16), True, id="fp16-sum-overflow"
    ),
    pytest.param(torch.full((3,), 3e38), True, id="fp32-sum-overflow"),
    pytest.param(torch.tensor([1 + 1j, complex(NAN, 0)]), False, id="complex-nan"),
    pytest.param(torch.empty(0), True, id="empty"),
]


@pytest.mark.parametrize(("tensor", "expected"), CASES)
def test_is_all_finite_is_exact_where_a_sum_would_overflow(tensor, expected) -> None:
    assert is_all_finite(tensor) is expected


def test_finite_flags_batches_every_case_exactly() -> None:
    values = [[case.values[0]] for case in CASES]
    assert finite_flags(values) == [case.values[1] for case in CASES]
    # a group is finite only when all its tensors are
    assert finite_flags([[torch.ones(2), torch.tensor([NAN])], []]) == [False, True]


def test_value_classes_tell_a_nan_from_an_inf_and_a_nan_beats_an_inf() -> None:
    strided = torch.tensor([[1.0, -INF], [2.0, 3.0]])[:, 1]  # a non-contiguous view: [-inf, 3]
    groups = [
        [torch.ones(3)],
        [strided],
        [torch.tensor([NAN, INF], dtype=torch.float16)],
        [torch.tensor([INF]), torch.tensor([NAN])],  # a multi-output op: nan beats inf
        [torch.empty(0), torch.tensor([1 + 1j, complex(0, INF)])],
        [],
    ]
    assert value_classes(groups) == ["finite", "inf", "nan", "nan", "inf", "finite"]


def test_kinds_and_stats_of_a_mixed_tensor() -> None:
    value = torch.tensor([NAN, INF, -2.0, 4.0])
    assert nonfinite_kinds([[value], [torch.tensor([-INF])], [torch.ones(1)]]) == [
        "mixed",
        "-inf",
        None,
    ]
    stats = value_stats([[value]])[0]
    assert (stats.numel, stats.nan_count, stats.posinf_count, stats.neginf_count) == (4, 1, 1, 0)
    assert (stats.finite_min, stats.finite_max, stats.finite_mean) == (-2.0, 4.0, 1.0)
    assert stats.kind == "mixed"
    assert value_stats([[torch.tensor([NAN])]])[0].finite_mean is None
