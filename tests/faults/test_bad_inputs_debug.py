"""Bad inputs to every ``tl.debug`` helper, ``tl.dead`` and ``tl.threshold``: wrong types, labels
that do not exist, ``bwd=`` out of range, ``max_nodes=0``, thresholds that are negative or NaN.

Each row is refused with a typed error (ours AND the built-in a caller catches) whose message
names the bad value, raised by torchlens_nb's own checks, and leaves the model, optimizer, inputs,
RNG, hooks and global flags bitwise as they were.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from torch import nn

import torchlens_nb as tl
from tests.faults._guards import assert_refused
from tests.faults.fault_models import Owned
from torchlens_nb.errors import (
    DiagnosticArgumentError,
    GradFnWalkError,
    InputFormError,
    ModelTypeError,
    OpNotFoundError,
    UnavailableError,
)
from torchlens_nb.options import CaptureOptions

pytestmark = pytest.mark.fault("bad_input")

D = tl.debug
NAN = math.nan


@dataclass
class Scene:
    user: Owned
    trace: tl.Trace
    """save_grads=True, one backward logged (bwd=0 exists, bwd=1 does not)."""
    no_backward: tl.Trace
    """save_grads=True, no backward yet."""
    loss: torch.Tensor
    """A fresh loss with its autograd graph (for walk_grad_fn / sketch_grad_fn)."""


@pytest.fixture
def scene(user: Owned) -> Scene:
    traced = tl.trace(user.model, user.x, capture=CaptureOptions(save_grads=True))
    traced.backward(traced.output.sum())
    pending = tl.trace(user.model, user.x, capture=CaptureOptions(save_grads=True))
    loss = user.model(user.x).sum()
    user.optimizer.zero_grad()
    return Scene(user, traced, pending, loss)


Case = tuple[str, Callable[[Scene], Any], type[Exception], str]

TRACE_READERS: list[Case] = [
    # a model (or a list) where a trace belongs
    (
        "find_nan_in_trace-model",
        lambda s: D.find_nan_in_trace(s.user.model),
        DiagnosticArgumentError,
        r"needs a Trace .* got Sequential; for a model, run "
        r"tl\.debug\.find_nan\(model, inputs\)",
    ),
    (
        "bisect_nan-model",
        lambda s: D.bisect_nan(s.user.model),
        DiagnosticArgumentError,
        r"bisect_nan needs a Trace .* got Sequential",
    ),
    (
        "nonfinite_origin-list",
        lambda s: D.nonfinite_origin([s.trace]),
        DiagnosticArgumentError,
        r"takes a Trace, or a model and its inputs; got list",
    ),
    (
        "lineage-model",
        lambda s: D.lineage(s.user.model, "relu_1"),
        DiagnosticArgumentError,
        r"lineage needs a Trace .* got Sequential",
    ),
    (
        "grad_health-model",
        lambda s: D.grad_health(s.user.model),
        DiagnosticArgumentError,
        r"grad_health reads a tl\.trace\(\.\.\.\) result, got Sequential",
    ),
    (
        "dead_neurons-model",
        lambda s: D.dead_neurons(s.user.model),
        DiagnosticArgumentError,
        r"dead_neurons reads a tl\.trace\(\.\.\.\) result, got Sequential",
    ),
    (
        "dtype_range-model",
        lambda s: D.dtype_range(s.user.model),
        DiagnosticArgumentError,
        r"dtype_range reads a tl\.trace\(\.\.\.\) result, got Sequential",
    ),
    (
        "hot_path-model",
        lambda s: D.hot_path(s.user.model),
        DiagnosticArgumentError,
        r"trace must be a tl\.trace\(\.\.\.\) result, got Sequential",
    ),
    (
        "compare-model",
        lambda s: D.compare(s.user.model, s.trace),
        DiagnosticArgumentError,
        r"trace_a must be a tl\.trace\(\.\.\.\) result, got Sequential",
    ),
    (
        "first_divergence-none",
        lambda s: D.first_divergence(s.trace, None),
        DiagnosticArgumentError,
        r"trace_b must be a tl\.trace\(\.\.\.\) result, got NoneType",
    ),
    (
        "bisect_nan_backward-model",
        lambda s: D.bisect_nan_backward(s.user.model),
        DiagnosticArgumentError,
        r"needs a Trace with a logged backward, got Sequential",
    ),
    (
        "op_flops-label",
        lambda s: D.op_flops("linear_1"),
        DiagnosticArgumentError,
        r"op_flops takes an Op of a trace, got str .* trace\[label\]",
    ),
    (
        "threshold-model",
        lambda s: tl.threshold(s.user.model, within=(0, 1)),
        DiagnosticArgumentError,
        r"takes a trace from tl\.trace\(\.\.\.\), got Sequential",
    ),
    (
        "dead-one-trace",
        lambda s: tl.dead(s.trace),
        DiagnosticArgumentError,
        r"takes a list of traces, got Trace; e\.g\. tl\.dead\(\[t1, t2\]\)",
    ),
    (
        "dead-single-sample",
        lambda s: tl.dead([s.trace]),
        DiagnosticArgumentError,
        r"needs at least 2 traces .* got 1: one batch can never prove",
    ),
    (
        "dead-model-in-list",
        lambda s: tl.dead([s.trace, s.user.model]),
        DiagnosticArgumentError,
        r"got a Sequential in the list",
    ),
    # labels that do not exist
    (
        "lineage-missing-label",
        lambda s: D.lineage(s.trace, "attention_1"),
        OpNotFoundError,
        r"no op labelled 'attention_1' in this trace",
    ),
    (
        "lineage-index-out-of-range",
        lambda s: D.lineage(s.trace, 99),
        OpNotFoundError,
        r"op index 99 is out of range for 7 ops",
    ),
    ("lineage-none", lambda s: D.lineage(s.trace, None), OpNotFoundError, r"got NoneType"),
    # bwd= out of range, no backward yet
    (
        "grad_health-bwd-1",
        lambda s: D.grad_health(s.trace, bwd=1),
        DiagnosticArgumentError,
        r"bwd must be an int in 0\.\.0 .* got 1",
    ),
    (
        "grad_health-bwd-minus-2",
        lambda s: D.grad_health(s.trace, bwd=-2),
        DiagnosticArgumentError,
        r"bwd must be an int in 0\.\.0 .* got -2",
    ),
    (
        "grad_health-bwd-float",
        lambda s: D.grad_health(s.trace, bwd=0.0),
        DiagnosticArgumentError,
        r"got 0\.0",
    ),
    (
        "grad_health-bwd-bool",
        lambda s: D.grad_health(s.trace, bwd=True),
        DiagnosticArgumentError,
        r"got True",
    ),
    (
        "grad_health-no-backward",
        lambda s: D.grad_health(s.no_backward),
        UnavailableError,
        r"no backward pass yet; call trace\.backward\(loss\) first",
    ),
    (
        "bisect_nan_backward-bwd-5",
        lambda s: D.bisect_nan_backward(s.trace, bwd=5),
        DiagnosticArgumentError,
        r"bwd must be an int in 0\.\.0 \(this trace logged 1 backward "
        r"pass\), got 5",
    ),
    (
        "bisect_nan_backward-no-backward",
        lambda s: D.bisect_nan_backward(s.no_backward),
        UnavailableError,
        r"no logged backward pass: .* then call trace\.backward\(loss\)",
    ),
    # thresholds negative or NaN
    (
        "grad_health-vanishing-negative",
        lambda s: D.grad_health(s.trace, vanishing_threshold=-1.0),
        DiagnosticArgumentError,
        r"vanishing_threshold must be a number >= 0, got -1\.0; the "
        r"defaults are",
    ),
    (
        "grad_health-exploding-nan",
        lambda s: D.grad_health(s.trace, exploding_threshold=NAN),
        DiagnosticArgumentError,
        r"exploding_threshold must be a number >= 0, got nan",
    ),
    (
        "grad_health-thresholds-crossed",
        lambda s: D.grad_health(s.trace, vanishing_threshold=10.0, exploding_threshold=1.0),
        DiagnosticArgumentError,
        r"vanishing_threshold \(10\.0\) must be finite and below "
        r"exploding_threshold \(1\.0\)",
    ),
    (
        "grad_health-grad-scale-nan",
        lambda s: D.grad_health(s.trace, grad_scale=NAN),
        DiagnosticArgumentError,
        r"grad_scale must be finite and > 0, got nan",
    ),
    (
        "grad_health-grad-scale-string",
        lambda s: D.grad_health(s.trace, grad_scale="65536"),
        DiagnosticArgumentError,
        r"grad_scale must be a number or a GradScaler, got str",
    ),
    (
        "grad_health-basis",
        lambda s: D.grad_health(s.trace, basis="l1"),
        DiagnosticArgumentError,
        r"basis must be 'total_norm' or 'rms', got 'l1'",
    ),
    (
        "bisect_nan_backward-scale-negative",
        lambda s: D.bisect_nan_backward(s.trace, grad_scale=-1.0),
        DiagnosticArgumentError,
        r"grad_scale must be a positive finite number .* got -1\.0",
    ),
    (
        "dead_neurons-max-nan",
        lambda s: D.dead_neurons(s.trace, max_activation=NAN),
        DiagnosticArgumentError,
        r"max_activation must be a finite number >= 0 .* got nan",
    ),
    (
        "dead_neurons-max-negative",
        lambda s: D.dead_neurons(s.trace, max_activation=-1.0),
        DiagnosticArgumentError,
        r"got -1\.0",
    ),
    (
        "dead_neurons-dim-string",
        lambda s: D.dead_neurons(s.trace, dim="units"),
        DiagnosticArgumentError,
        r"dim must be an int axis or None, got 'units'",
    ),
    (
        "dtype_range-fraction-nan",
        lambda s: D.dtype_range(s.trace, max_fraction=NAN),
        DiagnosticArgumentError,
        r"max_fraction must be in \(0, 1\], got nan",
    ),
    (
        "dtype_range-subnormal-negative",
        lambda s: D.dtype_range(s.trace, subnormal_fraction_threshold=-0.5),
        DiagnosticArgumentError,
        r"subnormal_fraction_threshold must be in \(0, 1\], got -0\.5",
    ),
    (
        "recompute-budget-negative",
        lambda s: D.recompute_candidates(s.trace, budget_gb=-1.0),
        DiagnosticArgumentError,
        r"budget_gb must be None or a finite number of gigabytes >= 0, "
        r"got -1\.0",
    ),
    (
        "recompute-budget-nan",
        lambda s: D.recompute_candidates(s.trace, budget_gb=NAN),
        DiagnosticArgumentError,
        r"got nan",
    ),
    (
        "compare-rtol-nan",
        lambda s: D.compare(s.trace, s.trace, rtol=NAN),
        DiagnosticArgumentError,
        r"rtol must be a finite number >= 0, got nan; e\.g\. rtol=1e-5",
    ),
    (
        "compare-atol-negative",
        lambda s: D.compare(s.trace, s.trace, atol=-1e-8),
        DiagnosticArgumentError,
        r"atol must be a finite number >= 0, got -1e-08",
    ),
    (
        "compare-rtol-inf",
        lambda s: D.compare(s.trace, s.trace, rtol=math.inf),
        DiagnosticArgumentError,
        r"got inf",
    ),
    (
        "threshold-within-nan",
        lambda s: tl.threshold(s.trace, within=(NAN, 1.0)),
        DiagnosticArgumentError,
        r"within needs low <= high .* got \(nan, 1\.0\)",
    ),
    (
        "threshold-within-reversed",
        lambda s: tl.threshold(s.trace, within=(1.0, 0.0)),
        DiagnosticArgumentError,
        r"use math\.inf for an open side\), got \(1\.0, 0\.0\)",
    ),
    (
        "threshold-within-string",
        lambda s: tl.threshold(s.trace, within="0..1"),
        DiagnosticArgumentError,
        r"within must be a \(low, high\) pair of numbers, got '0\.\.1'",
    ),
    (
        "threshold-selector-string",
        lambda s: tl.threshold(s.trace, within=(0, 1), selector="relu"),
        DiagnosticArgumentError,
        r"takes selectors such as tl\.func\('relu'\) .* got 'relu'",
    ),
    (
        "dead-atol-nan",
        lambda s: tl.dead([s.trace, s.trace], atol=NAN),
        DiagnosticArgumentError,
        r"atol must be a finite number >= 0, got nan",
    ),
    (
        "dead-unit-dim-negative",
        lambda s: tl.dead([s.trace, s.trace], unit_dim=-1),
        DiagnosticArgumentError,
        r"unit_dim must be a non-negative int or None, got -1",
    ),
    # other option values
    (
        "lineage-depth-negative",
        lambda s: D.lineage(s.trace, "relu_1", max_depth=-1),
        DiagnosticArgumentError,
        r"max_depth must be a non-negative int or None .* got -1",
    ),
    (
        "lineage-depth-nan",
        lambda s: D.lineage(s.trace, "relu_1", max_depth=NAN),
        DiagnosticArgumentError,
        r"got nan",
    ),
    (
        "lineage-direction",
        lambda s: D.lineage(s.trace, "relu_1", direction="up"),
        DiagnosticArgumentError,
        r"direction must be one of \['ancestors', 'descendants', 'both'\], "
        r"got 'up'",
    ),
    (
        "hot_path-metric",
        lambda s: D.hot_path(s.trace, by="latency"),
        DiagnosticArgumentError,
        r"by must be 'flops', 'memory', 'duration' or 'device_time', got "
        r"'latency'",
    ),
]

MODEL_RUNNERS: list[Case] = [
    (
        "find_nan-list",
        lambda s: D.find_nan([s.user.model], s.user.x),
        ModelTypeError,
        r"got list \(wrap a list of layers in nn\.Sequential",
    ),
    (
        "find_nan-no-inputs",
        lambda s: D.find_nan(s.user.model),
        DiagnosticArgumentError,
        r"find_nan needs inputs for Sequential: find_nan\(model, inputs\)",
    ),
    (
        "find_nan-save-true",
        lambda s: D.find_nan(s.user.model, s.user.x, save=True),
        DiagnosticArgumentError,
        r"save=True: the live check keeps no activation",
    ),
    (
        "find_nan-unknown-keyword",
        lambda s: D.find_nan(s.user.model, s.user.x, max_ops=3),
        DiagnosticArgumentError,
        r"unexpected keyword\(s\) \['max_ops'\]",
    ),
    (
        "find_nan-text-input",
        lambda s: D.find_nan(s.user.model, "text"),
        InputFormError,
        r"tokenize it first",
    ),
    (
        "nonfinite_origin-trace-with-inputs",
        lambda s: D.nonfinite_origin(s.trace, s.user.x),
        DiagnosticArgumentError,
        r"nonfinite_origin\(trace\) reads the saved values and takes no "
        r"inputs",
    ),
    (
        "check_determinism-runs-1",
        lambda s: D.check_determinism(s.user.model, s.user.x, runs=1),
        DiagnosticArgumentError,
        r"runs must be an int in \[2, 100000\] \(run 0 is the reference\), got 1",
    ),
    (
        "check_determinism-seed-string",
        lambda s: D.check_determinism(s.user.model, s.user.x, seed="0"),
        DiagnosticArgumentError,
        r"seed must be an int, got '0'",
    ),
    (
        "check_determinism-no-model",
        lambda s: D.check_determinism(None, s.user.x),
        ModelTypeError,
        r"got NoneType",
    ),
    (
        "bisect_precision-dtype-string",
        lambda s: D.bisect_precision(s.user.model, s.user.x, "float64"),
        DiagnosticArgumentError,
        r"reference_dtype must be a floating torch\.dtype .* got "
        r"'float64'",
    ),
    (
        "bisect_precision-int-dtype",
        lambda s: D.bisect_precision(s.user.model, s.user.x, torch.int64),
        DiagnosticArgumentError,
        r"got torch\.int64",
    ),
    (
        "bisect_precision-rtol-nan",
        lambda s: D.bisect_precision(s.user.model, s.user.x, rtol=NAN),
        DiagnosticArgumentError,
        r"rtol must be None or a finite number >= 0, got nan",
    ),
    (
        "guess_input_shape-list",
        lambda s: D.guess_input_shape([s.user.model]),
        ModelTypeError,
        r"got list",
    ),
    (
        "guess_input_shape-batch-0",
        lambda s: D.guess_input_shape(s.user.model, batch_size=0),
        DiagnosticArgumentError,
        r"batch_size must be an int in \[1, 65536\], got 0",
    ),
    (
        "guess_input_shape-max-probes-0",
        lambda s: D.guess_input_shape(s.user.model, max_probes=0),
        DiagnosticArgumentError,
        r"max_probes must be an int >= 1, got 0",
    ),
    (
        "guess_input_shape-sizes-crossed",
        lambda s: D.guess_input_shape(s.user.model, min_size=10, max_size=5),
        DiagnosticArgumentError,
        r"min_size \(10\) must be <= max_size \(5\)",
    ),
    (
        "isolated_capture-unknown-keyword",
        lambda s: D.isolated_capture(s.user.model, s.user.x, seed=0, device="cuda"),
        DiagnosticArgumentError,
        r"passes only save= and capture= to tl\.trace; got \['device'\]",
    ),
    (
        "isolated_capture-prepare-int",
        lambda s: D.isolated_capture(s.user.model, s.user.x, seed=0, prepare=3),
        DiagnosticArgumentError,
        r"prepare must be a callable .* got int",
    ),
    (
        "flops_vs_dispatch-list",
        lambda s: D.flops_vs_dispatch([s.user.model], s.user.x),
        ModelTypeError,
        r"got list",
    ),
    (
        "graph_breaks-no-inputs",
        lambda s: D.graph_breaks(s.user.model, None),
        InputFormError,
        r"inputs is None",
    ),
    (
        "compare_params-list",
        lambda s: D.compare_params([s.user.model], s.user.model),
        ModelTypeError,
        r"model_a must be a torch\.nn\.Module, got list",
    ),
    (
        "compare_params-atol-nan",
        lambda s: D.compare_params(s.user.model, s.user.model, atol=NAN),
        DiagnosticArgumentError,
        r"atol must be a finite number >= 0, got nan",
    ),
    (
        "attention_sinks-list",
        lambda s: D.attention_sinks([s.user.model], s.user.x),
        ModelTypeError,
        r"got list",
    ),
    (
        "attention_sinks-mass-nan",
        lambda s: D.attention_sinks(s.user.model, s.user.x, sink_mass=NAN),
        DiagnosticArgumentError,
        r"sink_mass must be a finite number in \(0, 1\], got nan",
    ),
    (
        "attention_sinks-sample-out-of-range",
        lambda s: D.attention_sinks(s.user.model, s.user.x, sample=99),
        DiagnosticArgumentError,
        r"sample must be a batch index in \[0, 4\), got 99",
    ),
    (
        "attention_sinks-selector-string",
        lambda s: D.attention_sinks(s.user.model, s.user.x, attention=["softmax"]),
        DiagnosticArgumentError,
        r"takes selectors such as .* got 'softmax'",
    ),
    (
        "attention_sinks-pattern-bytes",
        lambda s: D.attention_sinks(s.user.model, s.user.x, max_pattern_bytes=-1),
        DiagnosticArgumentError,
        r"max_pattern_bytes must be an int in \[1, \d+\], got -1",
    ),
    # the autograd-graph walkers
    (
        "walk_grad_fn-none",
        lambda s: D.walk_grad_fn(None),
        GradFnWalkError,
        r"outputs must be a tensor or a sequence of tensors, got NoneType",
    ),
    ("walk_grad_fn-empty", lambda s: D.walk_grad_fn([]), GradFnWalkError, r"outputs is empty"),
    (
        "walk_grad_fn-no-graph",
        lambda s: D.walk_grad_fn(s.user.x),
        GradFnWalkError,
        r"no autograd graph: requires_grad is False",
    ),
    (
        "walk_grad_fn-max-nodes-0",
        lambda s: D.walk_grad_fn(s.loss, max_nodes=0),
        DiagnosticArgumentError,
        r"max_nodes must be an int >= 1, got 0; the default is 20000",
    ),
    (
        "walk_grad_fn-max-nodes-float",
        lambda s: D.walk_grad_fn(s.loss, max_nodes=1.5),
        DiagnosticArgumentError,
        r"got 1\.5",
    ),
    (
        "walk_grad_fn-model-list",
        lambda s: D.walk_grad_fn(s.loss, model=[s.user.model]),
        ModelTypeError,
        r"got list",
    ),
    (
        "walk_grad_fn-params-list",
        lambda s: D.walk_grad_fn(s.loss, params=[1]),
        DiagnosticArgumentError,
        r"params must map names to tensors .* got list",
    ),
    (
        "sketch_grad_fn-max-nodes-0",
        lambda s: D.sketch_grad_fn(s.loss, max_nodes=0),
        DiagnosticArgumentError,
        r"max_nodes must be an int >= 1, got 0",
    ),
    (
        "sketch_grad_fn-timeout-negative",
        lambda s: D.sketch_grad_fn(s.loss, timeout_s=-1.0),
        DiagnosticArgumentError,
        r"timeout_s must be > 0 seconds, got -1\.0",
    ),
    (
        "sketch_grad_fn-timeout-nan",
        lambda s: D.sketch_grad_fn(s.loss, timeout_s=NAN),
        DiagnosticArgumentError,
        r"got nan",
    ),
    (
        "sketch_grad_fn-timeout-string",
        lambda s: D.sketch_grad_fn(s.loss, timeout_s="5"),
        DiagnosticArgumentError,
        r"got '5'",
    ),
    (
        "sketch_grad_fn-format",
        lambda s: D.sketch_grad_fn(s.loss, file_format="p n g"),
        DiagnosticArgumentError,
        r"file_format must be a graphviz output format .* got 'p n g'",
    ),
]


@pytest.mark.parametrize(
    "call, error, match",
    [c[1:] for c in TRACE_READERS + MODEL_RUNNERS],
    ids=[c[0] for c in TRACE_READERS + MODEL_RUNNERS],
)
def test_debug_refuses_bad_input(
    scene: Scene, call: Callable[[Scene], Any], error: type[Exception], match: str
) -> None:
    assert_refused(
        lambda: call(scene),
        error,
        match,
        models=[scene.user.model],
        optimizers=[scene.user.optimizer],
        inputs=(*scene.user.batch, scene.loss),
    )


def test_typed_errors_are_caught_by_the_builtin_a_caller_writes(scene: Scene) -> None:
    with pytest.raises(KeyError):  # a missing label is a KeyError to `except KeyError`
        D.lineage(scene.trace, "attention_1")
    with pytest.raises(ValueError):
        D.grad_health(scene.trace, bwd=1)
    with pytest.raises(TypeError):
        D.find_nan([scene.user.model], scene.user.x)
    with pytest.raises(RuntimeError):
        D.grad_health(scene.no_backward)


def test_model_free_and_parameter_free_inputs_give_reports_not_crashes() -> None:
    class Constant(nn.Module):
        def forward(self, n: int) -> int:
            return n + 1

    empty = tl.trace(Constant(), 3)  # zero ops: nothing to scan anywhere
    assert D.dead_neurons(empty).status == "unknown"
    assert D.dtype_range(empty).status == "unknown"
    assert D.hot_path(empty).status == "empty"
    assert tl.threshold(empty, within=(0, 1)).status == "unavailable"
    assert tl.dead([empty, empty]).status == "unavailable"
    assert D.param_health(nn.ReLU()).rows == ()
    assert D.guess_input_shape(nn.Identity()).status == "found"


UNREADABLE_INPUTS = {
    "sparse-coo": lambda: torch.randn(4, 8).to_sparse(),
    "sparse-csr": lambda: torch.randn(4, 8).to_sparse_csr(),
    "quantized": lambda: torch.quantize_per_tensor(torch.randn(4, 8), 0.1, 0, torch.qint8),
    "meta": lambda: torch.empty(4, 8, device="meta"),
}
READERS = {
    "find_nan": lambda t, u: t.find_nan(),
    "nonfinite_origin": lambda t, u: D.nonfinite_origin(t),
    "bisect_nan": lambda t, u: D.bisect_nan(t),
    "dtype_range": lambda t, u: D.dtype_range(t),
    "dead_neurons": lambda t, u: D.dead_neurons(t),
    "hot_path": lambda t, u: D.hot_path(t, by="memory"),
    "recompute_candidates": lambda t, u: D.recompute_candidates(t),
    "threshold": lambda t, u: tl.threshold(t, within=(0, 1)),
    "dead": lambda t, u: tl.dead([t, t]),
    "compare": lambda t, u: D.compare(t, t),
    "lineage": lambda t, u: D.lineage(t, "input_1"),
    "audit": lambda t, u: t.audit(),
    "find_nan-live": lambda t, u: D.find_nan(nn.Identity(), u),
    "flops_vs_dispatch": lambda t, u: D.flops_vs_dispatch(nn.Identity(), u),
    "check_determinism": lambda t, u: D.check_determinism(nn.Identity(), u),
    "param_health": lambda t, u: D.param_health({"value": u}),
    "data_sanity": lambda t, u: tl.recipes.data_sanity((u, torch.zeros(4, dtype=torch.long))),
}


@pytest.mark.parametrize("reader", list(READERS.values()), ids=list(READERS))
@pytest.mark.parametrize("make", list(UNREADABLE_INPUTS.values()), ids=list(UNREADABLE_INPUTS))
def test_sparse_quantized_and_meta_values_give_reports_or_typed_errors(
    make: Callable[[], torch.Tensor], reader: Callable[[tl.Trace, torch.Tensor], Any]
) -> None:
    torch.manual_seed(0)
    value = make()
    traced = tl.trace(nn.Identity(), value)
    try:
        report = reader(traced, value)
    except tl.errors.TorchlensNbError as err:  # e.g. data_sanity on a meta batch
        assert "meta" in str(err)
        return
    json.dumps(report.to_dict(), allow_nan=False)


def test_a_model_without_source_text_gets_a_lead_without_a_code_quote() -> None:
    namespace: dict[str, Any] = {"nn": nn, "torch": torch}
    exec(
        compile(
            "class Generated(nn.Module):\n"
            "    def forward(self, x):\n"
            "        return torch.log(x - 2)\n",
            "<generated>",
            "exec",
        ),
        namespace,
    )
    report = D.nonfinite_origin(namespace["Generated"](), torch.ones(2))
    assert report.lead.startswith("nan born at log_1 (line 3); its inputs were checked finite")
    assert "None" not in report.card()
