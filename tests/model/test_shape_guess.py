"""guess_input_shape: a verified synthetic shape, or a diagnostic failure."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import torchlens_nb as tl


def test_spec_example_linear() -> None:
    result = tl.debug.guess_input_shape(nn.Linear(3, 2), max_probes=4)
    assert (result.found, result.shape) == (True, (1, 3))
    assert (result.dtype, result.output_shape, len(result.probes)) == ("float32", (1, 2), 1)
    assert result.first_layer == "Linear(in_features=3) at ''"


def test_conv_net_needing_one_spatial_size_is_found_by_probing(small_cnn) -> None:
    flat_head = nn.Sequential(nn.Conv2d(3, 8, 3), nn.Flatten(), nn.Linear(8 * 26 * 26, 2))
    result = tl.debug.guess_input_shape(flat_head, batch_size=2)
    # only 28x28 gives 26x26 after a 3x3 conv: preferred sizes 224 ... 32 fail first
    assert result.shape == (2, 3, 28, 28)
    assert [p.shape[-1] for p in result.probes] == [224, 256, 384, 299, 128, 96, 64, 32, 28]
    assert result.probes[0].error.startswith("RuntimeError: mat1 and mat2 shapes cannot be")
    assert tl.debug.guess_input_shape(small_cnn).shape == (1, 3, 224, 224)  # adaptive pool


def test_embedding_first_layer_gets_integer_ids(tiny_gpt2) -> None:
    result = tl.debug.guess_input_shape(tiny_gpt2, seq_len=5)
    assert (result.shape, result.dtype, result.output_shape) == ((1, 5), "int64", (1, 5, 64))


def test_rnn_and_explicit_specs() -> None:
    assert tl.debug.guess_input_shape(nn.GRU(5, 7, batch_first=True), seq_len=4).shape == (1, 4, 5)
    result = tl.debug.guess_input_shape(
        nn.Linear(3, 2), input_specs=[(2, 5), ((4, 3), torch.float64)]
    )
    # the specs come first; both fail (wrong width, float64 into fp32 weights), then the guess
    assert [(p.shape, p.dtype, p.is_ok) for p in result.probes] == [
        ((2, 5), "float32", False),
        ((4, 3), "float64", False),
        ((1, 3), "float32", True),
    ]
    assert "dtype" in result.probes[1].error


def test_failure_returns_a_diagnostic_or_raises() -> None:
    two_inputs = nn.Bilinear(3, 3, 2)
    result = tl.debug.guess_input_shape(two_inputs, max_probes=3)
    assert (result.found, result.status, len(result.probes)) == (False, "not_found", 3)
    assert result.findings[0].code == "input_shape_not_found"
    assert "missing 1 required positional argument" in result.lead
    with pytest.raises(tl.errors.UnavailableError, match="no input shape found") as info:
        tl.debug.guess_input_shape(two_inputs, max_probes=2, on_failure="raise")
    assert info.value.code == "input_shape_not_found"


def test_probes_leave_the_model_and_rng_untouched() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4), nn.Dropout(0.5)).train()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    rng = torch.get_rng_state()
    assert tl.debug.guess_input_shape(model, batch_size=1).shape == (1, 4)  # eval: BN takes 1 row
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())
    assert torch.equal(rng, torch.get_rng_state()) and model.training


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"max_probes": 0}, "max_probes must be an int >= 1"),
        ({"min_size": 64, "max_size": 32}, "min_size \\(64\\) must be <= max_size"),
        ({"spatial_rank": 4}, "spatial_rank must be"),
        ({"on_failure": "ignore"}, "on_failure must be"),
    ],
    ids=["probes", "sizes", "rank", "on_failure"],
)
def test_bad_arguments_are_refused(kwargs: dict, message: str) -> None:
    with pytest.raises(tl.errors.DiagnosticArgumentError, match=message):
        tl.debug.guess_input_shape(nn.Linear(3, 2), **kwargs)
