"""The bad inputs a 1,110-call matrix found accepted silently, raised from deep inside torch or
Python, or never returning: each is now refused by torchlens_nb's own check with a typed error
that names the value and the fix, and leaves the user's model, optimizer and data bitwise as they
were. ``update_ratio(optimizer=<an SGD instance>)`` is accepted (a twin trains the copy).
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Callable
from functools import partial
from typing import Any

import pytest
import torch
from torch import nn

import torchlens_nb as tl
from tests.faults._guards import assert_refused, untouched
from tests.faults.fault_models import Owned
from torchlens_nb.errors import DiagnosticArgumentError, InputFormError, ReportOptionError

pytestmark = pytest.mark.fault("bad_input")

D, R = tl.debug, tl.recipes
CE = nn.CrossEntropyLoss()


def loss(u: Owned) -> torch.Tensor:
    """A loss with its autograd graph, built outside the guard (a train-mode forward moves the
    BatchNorm statistics and the RNG)."""
    return u.model(u.x).sum()


def empty(u: Owned) -> tuple[torch.Tensor, torch.Tensor]:
    return u.x[:0], u.y[:0]


Case = tuple[str, Callable[[Owned, pathlib.Path], Callable[[], Any]], type[Exception], str]
"""(id, build, error, match): ``build(user, tmp_dir)`` prepares outside the guard and returns
the call the guard watches."""

CASES: list[Case] = [
    # item 8
    ("to_html-int", lambda u, d: lambda: D.param_health(u.model).to_html(4), ReportOptionError,
     r"must be a file path .* got int 4"),
    ("to_html-directory", lambda u, d: lambda: D.param_health(u.model).to_html(d), ReportOptionError,
     r"is a directory; pass a file name"),
    ("weight_distribution-huge-bins", lambda u, d: lambda: R.weight_distribution(u.model, bins=10**9),
     DiagnosticArgumentError, r"bins must be an int in \[1, 10000\], got 1000000000"),
    ("class_balance-huge-label", lambda u, d: lambda: R.class_balance([0, 10**12]),
     DiagnosticArgumentError, r"labels reach 1000000000000: class indices must be below"),
    ("class_balance-huge-num_classes",
     lambda u, d: lambda: R.class_balance([0, 1], num_classes=10**12), DiagnosticArgumentError,
     r"num_classes must be an int in \[1, 16777216\]"),
    ("data_sanity-empty", lambda u, d: lambda: R.data_sanity(torch.empty(0)), DiagnosticArgumentError,
     r"'input' holds no values \(0 elements\)"),
    ("dead_neurons-dim-99",
     lambda u, d: partial(D.dead_neurons, tl.trace(u.model, u.x, save=True), dim=99),
     DiagnosticArgumentError, r"dim=99 is out of range for every layer output .* \[-2, 1\]"),
    ("overfit-loss-ignores-the-model",
     lambda u, d: lambda: R.overfit_one_batch(
         u.model, u.batch, lambda out, y: torch.tensor(1.0, requires_grad=True), steps=2,
         live=False),
     DiagnosticArgumentError, r"the loss does not depend on the model's parameters"),
    # item 9: untyped before
    ("bisect_precision-seed-str", lambda u, d: lambda: D.bisect_precision(u.model, u.x, seed="0"),
     DiagnosticArgumentError, r"seed must be an int, got '0'"),
    ("isolated_capture-seed-str", lambda u, d: lambda: D.isolated_capture(u.model, u.x, seed="0"),
     DiagnosticArgumentError, r"seed must be an int, got '0'"),
    ("attention_sinks-mask-str", lambda u, d: lambda: D.attention_sinks(u.model, u.x, attention_mask="m"),
     DiagnosticArgumentError, r"attention_mask must be a \(batch, keys\) tensor.* got str"),
    ("sketch_grad_fn-path-int", lambda u, d: partial(D.sketch_grad_fn, loss(u), path=3),
     DiagnosticArgumentError, r"path must be a file path .* got int"),
    ("guess_input_shape-device", lambda u, d: lambda: D.guess_input_shape(u.model, device="bogus"),
     DiagnosticArgumentError, r"device='bogus' is not a torch device"),
    ("guess_input_shape-sizes-str",
     lambda u, d: lambda: D.guess_input_shape(u.model, preferred_sizes="224"),
     DiagnosticArgumentError, r"preferred_sizes must be a list of ints in \[1, 65536\]"),
    ("guess_input_shape-specs-int", lambda u, d: lambda: D.guess_input_shape(u.model, input_specs=3),
     DiagnosticArgumentError, r"input_specs must be a list of shape tuples"),
    ("LivenessProbe-None", lambda u, d: lambda: D.LivenessProbe(None), DiagnosticArgumentError,
     r"LivenessProbe takes a selector or a list of them.* got NoneType"),
    ("SinkProbe-attention-int", lambda u, d: lambda: D.SinkProbe(attention=3), DiagnosticArgumentError,
     r"SinkProbe\(attention=\.\.\.\) takes a selector or a list of them.* got int 3"),
    ("prime_dims-baseline-str",
     lambda u, d: lambda: R.prime_dims(u.model, lambda n: torch.ones(n, 8), baseline="8"),
     DiagnosticArgumentError, r"baseline must be an int or a mapping .* got '8'"),
    ("init_loss-loss-of-three-args", lambda u, d: lambda: R.init_loss(u.model, u.batch, lambda a, b, c: a),
     DiagnosticArgumentError, r"loss_fn must be callable as loss_fn\(outputs, targets\), but "
     r"its signature is \(a, b, c\)"),
    ("overfit-loss-of-one-arg",
     lambda u, d: lambda: R.overfit_one_batch(u.model, u.batch, lambda out: out.sum(), steps=2),
     DiagnosticArgumentError, r"its signature is \(out\)"),
    ("init_loss-loss-returns-float",
     lambda u, d: lambda: R.init_loss(u.model, u.batch, lambda out, y: float(CE(out, y))),
     DiagnosticArgumentError, r"loss_fn returned the float .* must return a scalar tensor"),
    ("update_ratio-integer-loss",
     lambda u, d: lambda: R.update_ratio(u.model, u.batch, lambda out, y: torch.tensor(1), steps=2),
     DiagnosticArgumentError, r"does not depend on the model's parameters \(a torch\.int64"),
    ("update_ratio-detached-loss",
     lambda u, d: lambda: R.update_ratio(u.model, u.batch, lambda out, y: CE(out, y).detach(), steps=2),
     DiagnosticArgumentError, r"does not depend on the model's parameters"),
    ("gradient_flow-detached-loss",
     lambda u, d: lambda: R.gradient_flow(u.model, u.batch, lambda out, y: CE(out, y).detach()),
     DiagnosticArgumentError, r"does not depend on the model's parameters"),
    ("random_input_test-empty-batch", lambda u, d: lambda: R.random_input_test(u.model, empty(u), CE),
     DiagnosticArgumentError, r"the batch holds no sample \(an input of shape \(0, 8\)\)"),
    ("triage-empty-batch", lambda u, d: lambda: R.triage(u.model, empty(u), CE, steps=2),
     DiagnosticArgumentError, r"the batch holds no sample"),
    ("batch_independence-empty", lambda u, d: lambda: R.batch_independence(u.model, u.x[:0]),
     DiagnosticArgumentError, r"dimension 0 holds no item to compare"),
    ("overhead-repeats-str",
     lambda u, d: lambda: D.ChecksSession(u.model, u.optimizer, scaler=None).overhead(repeats="3"),
     DiagnosticArgumentError, r"repeats must be an int >= 1, got '3'"),
    # item 9: silently accepted before
    ("overhead-repeats-0",
     lambda u, d: lambda: D.ChecksSession(u.model, u.optimizer, scaler=None).overhead(repeats=0),
     DiagnosticArgumentError, r"repeats must be an int >= 1, got 0"),
    ("attention_sinks-sink_mass-2", lambda u, d: lambda: D.attention_sinks(u.model, u.x, sink_mass=2.0),
     DiagnosticArgumentError, r"sink_mass must be a finite number in \(0, 1\], got 2\.0"),
    ("init_loss-one-class", lambda u, d: lambda: R.init_loss(u.model, u.batch, CE, num_classes=1),
     DiagnosticArgumentError, r"num_classes must be an int >= 2, got 1"),
    ("sketch_grad_fn-format",
     lambda u, d: partial(D.sketch_grad_fn, loss(u), file_format="bogus"),
     DiagnosticArgumentError, r"file_format must be a graphviz output format .* got 'bogus'"),
    ("sketch_grad_fn-view-str", lambda u, d: partial(D.sketch_grad_fn, loss(u), view="y"),
     DiagnosticArgumentError, r"view must be True or False, got 'y'"),
    ("sketch_grad_fn-path-directory",
     lambda u, d: partial(D.sketch_grad_fn, loss(u), path=d), DiagnosticArgumentError,
     r"is a directory; pass a file stem inside it"),
    ("amp_scaled_grads_hint-str", lambda u, d: lambda: D.amp_scaled_grads_hint("yes"),
     DiagnosticArgumentError, r"all_nonfinite must be True or False, got 'yes'"),
    ("clone_input_tree-generator", lambda u, d: lambda: D.clone_input_tree(t for t in [u.x]),
     InputFormError, r"inputs is a generator, which can be read only once"),
]  # fmt: skip


@pytest.mark.parametrize(("call", "error", "match"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])  # fmt: skip
def test_refused_with_a_typed_error_and_nothing_changed(
    user: Owned, tmp_path: pathlib.Path, call, error, match
) -> None:
    before = sorted(os.listdir(tmp_path))
    assert_refused(
        call(user, tmp_path),
        error,
        match,
        models=[user.model],
        optimizers=[user.optimizer],
        inputs=user.batch,
    )
    assert sorted(os.listdir(tmp_path)) == before  # nothing written into the directory


def test_update_ratio_accepts_an_optimizer_instance_and_leaves_it_alone(user: Owned) -> None:
    sgd = torch.optim.SGD(user.model.parameters(), lr=0.05, momentum=0.9)
    with untouched([user.model], [sgd, user.optimizer], user.batch):
        report = R.update_ratio(user.model, user.batch, CE, steps=3, optimizer=sgd)
    by_class = R.update_ratio(
        user.model, user.batch, CE, steps=3, optimizer=lambda g: torch.optim.SGD(
            g, lr=0.05, momentum=0.9)
    )  # fmt: skip
    # the instance's class and settings train the copy: the same ratios as the factory
    assert [layer.log10_ratios for layer in report.layers] == [
        layer.log10_ratios for layer in by_class.layers
    ]
