"""bisect_precision: the first op whose native output leaves its dtype's tolerance vs fp64."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import torchlens_nb as tl


class Cancelling(nn.Module):
    """Model that destroys fp32 mantissa bits at a known op."""

    def __init__(self) -> None:
        super().__init__()
        self.pre = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (self.pre(x) + 1e7) - 1e7


def test_spec_example_names_the_cancelling_op() -> None:
    torch.manual_seed(0)
    result = tl.debug.bisect_precision(Cancelling().eval(), torch.randn(2, 8))
    # + 1e7 keeps ~7 digits (relative error 5e-8 < rtol 3.5e-4); - 1e7 exposes the lost bits
    assert (result.found, result.func_name) == (True, "sub")
    assert (result.op, result.module, result.is_stochastic) == ("sub_1", "", False)
    assert [(r.op, r.is_diverged) for r in result.rows] == [
        ("linear_1", False),
        ("add_1", False),
        ("sub_1", True),
    ]
    assert result.rows[2].max_abs_err > 0.01  # the ulp of 1e7 in fp32 is 1.0
    assert result.card().splitlines()[0] == (
        "bisect_precision [found] Cancelling (4 ops) vs float64 reference: sub_1 (sub) is the "
        "first op to lose precision"
    )


def test_tolerances_derive_from_the_native_dtype() -> None:
    torch.manual_seed(0)
    result = tl.debug.bisect_precision(nn.Linear(4, 4), torch.randn(2, 4))
    eps = torch.finfo(torch.float32).eps
    row = result.rows[0]
    assert (row.rtol, row.atol) == (math.sqrt(eps), eps * 10)
    assert not result.found and result.status == "clean"
    half = tl.debug.bisect_precision(
        nn.Linear(4, 4).to(torch.bfloat16), torch.randn(2, 4, dtype=torch.bfloat16)
    )
    assert half.rows[0].rtol == math.sqrt(torch.finfo(torch.bfloat16).eps)  # 0.0884


class RandomMask(nn.Module):
    """A random mask drawn in the input's dtype: the fp32 and fp64 runs draw different values."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * (torch.rand(x.shape, dtype=x.dtype) > 0.5)


def test_a_first_divergence_at_a_random_op_is_flagged() -> None:
    result = tl.debug.bisect_precision(RandomMask(), torch.ones(64))
    # rand in float32 and float64 draws different bits from one seed: a mask mismatch
    assert (result.found, result.func_name, result.is_stochastic) == (True, "rand", True)
    assert "precision_divergence_at_stochastic_op" in [f.code for f in result.findings]


def test_caller_model_inputs_and_rng_are_untouched_and_every_input_form_works() -> None:
    class TwoInputs(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(3, 3)

        def forward(self, x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
            return self.fc(x) * scale

    torch.manual_seed(0)
    model = TwoInputs()
    x, scale = torch.randn(2, 3), torch.tensor(2.0)
    weight = model.fc.weight.clone()
    rng = torch.get_rng_state()
    positional = tl.debug.bisect_precision(model, (x, scale))
    keywords = tl.debug.bisect_precision(model, {"x": x, "scale": scale})
    assert [r.op for r in positional.rows] == [r.op for r in keywords.rows] == ["linear_1", "mul_1"]
    assert torch.equal(model.fc.weight, weight) and model.fc.weight.dtype == torch.float32
    assert torch.equal(rng, torch.get_rng_state())
    assert x.dtype == torch.float32


def test_reference_dtype_must_be_floating() -> None:
    with pytest.raises(tl.errors.DiagnosticArgumentError, match="floating torch.dtype"):
        tl.debug.bisect_precision(nn.ReLU(), torch.ones(1), reference_dtype=torch.int64)
