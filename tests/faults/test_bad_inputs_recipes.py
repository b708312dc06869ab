"""Bad inputs to every ``tl.recipes`` call: wrong types, empty loaders, meta / sparse /
quantized data, forwards that raise, counts and rates that are zero, negative or NaN.

Each is refused with a typed error naming the bad value, raised by torchlens_nb, with the
caller's model, optimizer, batch and RNG streams bitwise untouched.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from torch import nn

import torchlens_nb as tl
from tests.faults._guards import assert_refused, untouched
from tests.faults.fault_models import (
    NoParams,
    Owned,
    RaisingForward,
    quantized_tensor,
    sparse_tensor,
)
from torchlens_nb.errors import (
    DiagnosticArgumentError,
    ForwardError,
    InputFormError,
    ModelTypeError,
)

pytestmark = pytest.mark.fault("bad_input")

R = tl.recipes
NAN = math.nan
CE = nn.CrossEntropyLoss()


@dataclass
class Scene:
    user: Owned
    raising: RaisingForward
    """Its forward runs a train-mode BatchNorm and draws from the RNG, then raises."""
    meta_model: nn.Linear
    """A Linear(8, 4) on the meta device (no weights loaded yet)."""
    scripted: torch.jit.ScriptModule
    """``torch.jit.script`` of a Linear(8, 4) -> ReLU -> Linear(4, 4)."""


@pytest.fixture
def scene(user: Owned) -> Scene:
    torch.manual_seed(1)
    scripted = torch.jit.script(nn.Sequential(nn.Linear(8, 4), nn.ReLU(), nn.Linear(4, 4)))
    return Scene(user, RaisingForward().train(), nn.Linear(8, 4, device="meta"), scripted)


META = torch.empty(4, 8, device="meta")

Case = tuple[str, Callable[[Scene], Any], type[Exception], str]

CASES: list[Case] = [
    # wrong types
    (
        "gradient_flow-list",
        lambda s: R.gradient_flow([s.user.model], s.user.batch, CE),
        ModelTypeError,
        r"got list \(wrap a list of layers in nn\.Sequential",
    ),
    (
        "gradient_flow-bare-tensor-batch",
        lambda s: R.gradient_flow(s.user.model, s.user.x, CE),
        InputFormError,
        r"must be \(inputs, targets\) or a dict with a target key .* got a tensor "
        r"of shape \(4, 8\)",
    ),
    (
        "gradient_flow-loss-string",
        lambda s: R.gradient_flow(s.user.model, s.user.batch, "ce"),
        DiagnosticArgumentError,
        r"loss_fn must be callable as loss_fn\(outputs, targets\), got "
        r"str",
    ),
    (
        "init_loss-batch-none",
        lambda s: R.init_loss(s.user.model, None, CE),
        InputFormError,
        r"batch must be a batch .* got NoneType",
    ),
    (
        "update_ratio-string",
        lambda s: R.update_ratio("model"),
        ModelTypeError,
        r"reads an nn\.Module .* or a ChecksSession report, got str",
    ),
    (
        "class_balance-string",
        lambda s: R.class_balance("abc"),
        InputFormError,
        r"loader_or_labels must be a batch .* got str",
    ),
    ("data_sanity-none", lambda s: R.data_sanity(None), InputFormError, r"got NoneType"),
    (
        "prime_dims-tensor-not-callable",
        lambda s: R.prime_dims(s.user.model, s.user.x),
        DiagnosticArgumentError,
        r"make_input must be callable, got Tensor",
    ),
    (
        "weight_distribution-list",
        lambda s: R.weight_distribution([s.user.model]),
        ModelTypeError,
        r"got list",
    ),
    (
        "batch_independence-list",
        lambda s: R.batch_independence([s.user.model], s.user.x),
        ModelTypeError,
        r"got list",
    ),
    # empty loaders and empty label sets
    (
        "confident_errors-empty-loader",
        lambda s: R.confident_errors(s.user.model, []),
        DiagnosticArgumentError,
        r"loader yielded no example; pass a non-empty loader",
    ),
    (
        "data_sanity-empty-loader",
        lambda s: R.data_sanity([]),
        DiagnosticArgumentError,
        r"yielded no batch; pass a non-empty loader",
    ),
    (
        "class_balance-no-labels",
        lambda s: R.class_balance(torch.tensor([], dtype=torch.long)),
        DiagnosticArgumentError,
        r"no labels to count",
    ),
    (
        "class_balance-negative-label",
        lambda s: R.class_balance(torch.tensor([-1, 0, 1])),
        DiagnosticArgumentError,
        r"labels include -1; class indices start at 0",
    ),
    (
        "class_balance-continuous",
        lambda s: R.class_balance(torch.tensor([0.5, 1.5])),
        DiagnosticArgumentError,
        r"labels look continuous",
    ),
    (
        "class_balance-too-few-classes",
        lambda s: R.class_balance(s.user.y, num_classes=2),
        DiagnosticArgumentError,
        r"labels reach 3 but num_classes is 2",
    ),
    # meta tensors hold no values
    (
        "gradient_flow-meta-batch",
        lambda s: R.gradient_flow(s.user.model, (META, s.user.y), CE),
        InputFormError,
        r"meta tensor of shape \(4, 8\): it has no values",
    ),
    (
        "data_sanity-meta-batch",
        lambda s: R.data_sanity((META, s.user.y)),
        InputFormError,
        r"shape \(4, 8\) is on the meta device: it has no values",
    ),
    (
        "weight_distribution-meta-model",
        lambda s: R.weight_distribution(s.meta_model),
        InputFormError,
        r"on the meta device: it has no values .* load_state_dict",
    ),
    # a model on the meta device has no weights: every model recipe refuses it up front (the
    # same error as weight_distribution's, below)
    *[
        (
            f"{name}-meta-model",
            call,
            InputFormError,
            r"on the meta device: it has no values to run; materialise it first "
            r"\(model\.to_empty\(device='cpu'\), then load_state_dict\)",
        )
        for name, call in (
            ("init_loss", lambda s: R.init_loss(s.meta_model, s.user.batch, CE)),
            ("random_input_test", lambda s: R.random_input_test(s.meta_model, s.user.batch, CE)),
            (
                "overfit_one_batch",
                lambda s: R.overfit_one_batch(s.meta_model, s.user.batch, CE, live=False),
            ),
            ("gradient_flow", lambda s: R.gradient_flow(s.meta_model, s.user.batch, CE)),
            ("batch_independence", lambda s: R.batch_independence(s.meta_model, s.user.x)),
            ("causal_dependency", lambda s: R.causal_dependency(s.meta_model, s.user.x[:, None])),
            ("update_ratio", lambda s: R.update_ratio(s.meta_model, s.user.batch, CE)),
            ("confident_errors", lambda s: R.confident_errors(s.meta_model, [s.user.batch])),
        )
    ],
    # a TorchScript module deep-copies into non-leaf parameters: training recipes refuse it
    *[
        (
            f"{name}-torchscript",
            call,
            ModelTypeError,
            r"is a TorchScript module \(RecursiveScriptModule\).*pass the eager nn\.Module",
        )
        for name, call in (
            (
                "overfit_one_batch",
                lambda s: R.overfit_one_batch(s.scripted, s.user.batch, CE, live=False),
            ),
            ("update_ratio", lambda s: R.update_ratio(s.scripted, s.user.batch, CE, steps=2)),
        )
    ],
    (
        "data_sanity-list-of-ints",
        lambda s: R.data_sanity([1, 2, 3]),
        InputFormError,
        r"batch_or_loader is a list of 3 Python numbers, not a batch; pass a tensor "
        r"\(torch\.tensor\(values\)\)",
    ),
    # the model's own forward raises: ForwardError, the model restored
    (
        "init_loss-forward-raises",
        lambda s: R.init_loss(s.raising, s.user.batch, CE),
        ForwardError,
        r"forward raised ValueError: shape mismatch in user code",
    ),
    (
        "random_input_test-forward-raises",
        lambda s: R.random_input_test(s.raising, s.user.batch, CE),
        ForwardError,
        r"forward raised ValueError",
    ),
    (
        "confident_errors-forward-raises",
        lambda s: R.confident_errors(s.raising, [s.user.batch]),
        ForwardError,
        r"forward raised ValueError",
    ),
    (
        "batch_independence-forward-raises",
        lambda s: R.batch_independence(s.raising, s.user.x),
        ForwardError,
        r"forward raised ValueError",
    ),
    (
        "causal_dependency-forward-raises",
        lambda s: R.causal_dependency(s.raising, s.user.x[:, None]),
        ForwardError,
        r"forward raised RuntimeError: running_mean should contain 1 elements",
    ),
    (
        "overfit_one_batch-forward-raises",
        lambda s: R.overfit_one_batch(s.raising, s.user.batch, CE, steps=2, live=False),
        ForwardError,
        r"forward raised ValueError",
    ),
    (
        "update_ratio-forward-raises",
        lambda s: R.update_ratio(s.raising, s.user.batch, CE, steps=2),
        ForwardError,
        r"forward raised ValueError",
    ),
    (
        "gradient_flow-forward-raises",
        lambda s: R.gradient_flow(s.raising, s.user.batch, CE),
        ForwardError,
        r"forward raised ValueError",
    ),
    # models with nothing to train
    (
        "overfit_one_batch-no-params",
        lambda s: R.overfit_one_batch(NoParams(), s.user.batch, CE, steps=2, live=False),
        DiagnosticArgumentError,
        r"no parameter with requires_grad=True; there is nothing to train",
    ),
    (
        "update_ratio-no-weights",
        lambda s: R.update_ratio(NoParams(), s.user.batch, CE, steps=2),
        DiagnosticArgumentError,
        r"no trainable weight matrix",
    ),
    # counts, rates and thresholds: zero, negative, NaN
    (
        "gradient_flow-vanishing-nan",
        lambda s: R.gradient_flow(s.user.model, s.user.batch, CE, vanishing_threshold=NAN),
        DiagnosticArgumentError,
        r"vanishing_threshold must be a number >= 0, got nan",
    ),
    (
        "gradient_flow-exploding-negative",
        lambda s: R.gradient_flow(s.user.model, s.user.batch, CE, exploding_threshold=-1.0),
        DiagnosticArgumentError,
        r"exploding_threshold must be a number >= 0, got -1\.0",
    ),
    (
        "init_loss-num-classes-0",
        lambda s: R.init_loss(s.user.model, s.user.batch, CE, num_classes=0),
        DiagnosticArgumentError,
        r"num_classes must be an int >= 2, got 0",
    ),
    (
        "init_loss-loss-kind",
        lambda s: R.init_loss(s.user.model, s.user.batch, CE, loss_kind="hinge"),
        DiagnosticArgumentError,
        r"loss_kind must be one of \[.*\], got 'hinge'",
    ),
    (
        "random_input_test-trials-0",
        lambda s: R.random_input_test(s.user.model, s.user.batch, CE, trials=0),
        DiagnosticArgumentError,
        r"trials must be an int in \[1, 100000\], got 0",
    ),
    (
        "overfit_one_batch-steps-0",
        lambda s: R.overfit_one_batch(s.user.model, s.user.batch, CE, steps=0),
        DiagnosticArgumentError,
        r"steps must be an int in \[1, 100000\], got 0",
    ),
    (
        "overfit_one_batch-lr-nan",
        lambda s: R.overfit_one_batch(s.user.model, s.user.batch, CE, lr=NAN),
        DiagnosticArgumentError,
        r"lr must be a finite number > 0, got nan",
    ),
    (
        "overfit_one_batch-lr-negative",
        lambda s: R.overfit_one_batch(s.user.model, s.user.batch, CE, lr=-1.0),
        DiagnosticArgumentError,
        r"got -1\.0",
    ),
    (
        "update_ratio-steps-0",
        lambda s: R.update_ratio(s.user.model, s.user.batch, CE, steps=0),
        DiagnosticArgumentError,
        r"steps must be an int in \[1, 100000\], got 0",
    ),
    (
        "update_ratio-lr-nan",
        lambda s: R.update_ratio(s.user.model, s.user.batch, CE, lr=NAN),
        DiagnosticArgumentError,
        r"lr must be a finite number > 0, got nan",
    ),
    (
        "weight_distribution-bins-0",
        lambda s: R.weight_distribution(s.user.model, bins=0),
        DiagnosticArgumentError,
        r"bins must be an int in \[1, 10000\], got 0",
    ),
    (
        "weight_distribution-bins-nan",
        lambda s: R.weight_distribution(s.user.model, bins=NAN),
        DiagnosticArgumentError,
        r"got nan",
    ),
    (
        "confident_errors-k-0",
        lambda s: R.confident_errors(s.user.model, [s.user.batch], k=0),
        DiagnosticArgumentError,
        r"k must be an int >= 1, got 0",
    ),
    (
        "data_sanity-num-batches-0",
        lambda s: R.data_sanity(s.user.batch, num_batches=0),
        DiagnosticArgumentError,
        r"num_batches must be an int >= 1, got 0",
    ),
    (
        "batch_independence-dim-out-of-range",
        lambda s: R.batch_independence(s.user.model, s.user.x, dim=9),
        DiagnosticArgumentError,
        r"x has shape \(4, 8\); dimension 9 does not exist",
    ),
    (
        "batch_independence-rtol-nan",
        lambda s: R.batch_independence(s.user.model, s.user.x, rtol=NAN),
        DiagnosticArgumentError,
        r"rtol must be a number in \[0, 1\), got nan",
    ),
    (
        "prime_dims-baseline-0",
        lambda s: R.prime_dims(s.user.model, lambda n: torch.ones(n, 8), baseline=0),
        DiagnosticArgumentError,
        r"baseline must give an int in \[1, 65536\] for each of \['n'\], got "
        r"\{'n': 0\}",
    ),
    (
        "leakage_poison-cutoff-negative",
        lambda s: R.leakage_poison(lambda x: x, s.user.x, s.user.y, -1),
        DiagnosticArgumentError,
        r"cutoff must be an int in \[1, 3\] .* got -1",
    ),
    (
        "leakage_poison-sentinel-nan",
        lambda s: R.leakage_poison(lambda x: x, s.user.x, s.user.y, 2, sentinel=NAN),
        DiagnosticArgumentError,
        r"sentinel must be a finite number >= 1, got nan",
    ),
]


@pytest.mark.parametrize("call, error, match", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_recipes_refuse_bad_input(
    scene: Scene, call: Callable[[Scene], Any], error: type[Exception], match: str
) -> None:
    assert_refused(
        lambda: call(scene),
        error,
        match,
        models=[scene.user.model, scene.raising, scene.meta_model, scene.scripted],
        optimizers=[scene.user.optimizer],
        inputs=scene.user.batch,
    )


def test_a_raising_forward_is_the_cause_of_the_forward_error(scene: Scene) -> None:
    with pytest.raises(ForwardError) as info:
        R.init_loss(scene.raising, scene.user.batch, CE)
    assert type(info.value.__cause__) is ValueError
    assert info.value.partial_trace is None  # recipes run without capture


UNUSUAL_DATA = [("sparse", sparse_tensor), ("quantized", quantized_tensor)]


@pytest.mark.parametrize("make", [c[1] for c in UNUSUAL_DATA], ids=[c[0] for c in UNUSUAL_DATA])
def test_data_sanity_reads_sparse_and_quantized_batches(make: Callable[[], torch.Tensor]) -> None:
    x, y = make(), torch.tensor([0, 1, 0, 1])
    with untouched(inputs=(x, y)):
        report = R.data_sanity((x, y))
    inputs = report.fields[0]
    assert (inputs.shape, inputs.stats.numel, inputs.stats.nan_count) == ((4, 8), 32, 0)
