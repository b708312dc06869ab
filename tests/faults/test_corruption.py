"""Nothing the user owns is corrupted: every entry point that runs or reads the caller's model,
called on a train-mode model mid-training (BatchNorm buffers, Dropout drawing from the RNG, an
AdamW state, populated ``.grad``), leaves parameters, buffers, gradients, train/eval flags, the
optimizer state, the batch and the python / numpy / torch RNG streams bitwise as they were:
when it succeeds, and when the model's forward raises half-way (after its BatchNorm updated and
it drew from the RNG).

``tl.trace`` is the one documented exception: it runs the forward exactly as ``model(x)``
would, so its effect must equal a plain call's, bit for bit, and nothing more.
"""

from __future__ import annotations

import contextlib
import copy
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

import torchlens_nb as tl
from tests.faults._guards import differences, take_snapshot, untouched
from tests.faults.fault_models import Owned, RaisingForward, owned
from torchlens_nb.errors import CheckViolationError, TorchlensNbError
from torchlens_nb.options import CaptureOptions

pytestmark = pytest.mark.fault("no_corruption")

D, R = tl.debug, tl.recipes
CE = nn.CrossEntropyLoss()

ENTRY_POINTS: list[tuple[str, Callable[[nn.Module, Owned], Any]]] = [
    ("find_nan", lambda m, u: D.find_nan(m, u.x)),
    ("investigate", lambda m, u: D.investigate(m, u.x, loss_fn=lambda out: out.sum())),
    ("nonfinite_origin", lambda m, u: D.nonfinite_origin(m, u.x)),
    ("attention_sinks", lambda m, u: D.attention_sinks(m, u.x)),
    ("check_determinism", lambda m, u: D.check_determinism(m, u.x)),
    (
        "check_determinism-seed-sensitivity",
        lambda m, u: D.check_determinism(m, u.x, seed_sensitivity=True),
    ),
    ("bisect_precision", lambda m, u: D.bisect_precision(m, u.x)),
    ("guess_input_shape", lambda m, u: D.guess_input_shape(m)),
    ("isolated_capture", lambda m, u: D.isolated_capture(m, u.x, seed=0)),
    ("flops_vs_dispatch", lambda m, u: D.flops_vs_dispatch(m, u.x)),
    ("graph_breaks", lambda m, u: D.graph_breaks(m, u.x)),
    ("compare_params", lambda m, u: D.compare_params(m, m)),
    ("param_health", lambda m, u: D.param_health(m)),
    ("checks-session-report", lambda m, u: D.ChecksSession(m, u.optimizer, scaler=None).report()),
    ("gradient_flow", lambda m, u: R.gradient_flow(m, u.batch, CE)),
    ("triage", lambda m, u: R.triage(m, u.batch, CE, steps=3)),
    ("init_loss", lambda m, u: R.init_loss(m, u.batch, CE)),
    ("random_input_test", lambda m, u: R.random_input_test(m, u.batch, CE)),
    ("overfit_one_batch", lambda m, u: R.overfit_one_batch(m, u.batch, CE, steps=3, live=False)),
    ("update_ratio", lambda m, u: R.update_ratio(m, u.batch, CE, steps=3)),
    ("weight_distribution", lambda m, u: R.weight_distribution(m)),
    ("confident_errors", lambda m, u: R.confident_errors(m, [u.batch])),
    ("batch_independence", lambda m, u: R.batch_independence(m, u.x)),
    ("causal_dependency", lambda m, u: R.causal_dependency(m, u.x[:, None])),
    ("prime_dims", lambda m, u: R.prime_dims(m, lambda n: torch.ones(n, 8))),
    ("data_sanity", lambda m, u: R.data_sanity(u.batch)),
    ("class_balance", lambda m, u: R.class_balance(u.y)),
]

MODELS: dict[str, Callable[[Owned], nn.Module]] = {
    "healthy": lambda u: u.model,
    "forward-raises": lambda u: RaisingForward().train(),
}


@pytest.mark.parametrize("model_kind", list(MODELS))
@pytest.mark.parametrize("call", [c[1] for c in ENTRY_POINTS], ids=[c[0] for c in ENTRY_POINTS])
def test_entry_point_leaves_the_users_objects_bitwise_intact(
    user: Owned, call: Callable[[nn.Module, Owned], Any], model_kind: str
) -> None:
    torch.manual_seed(1)
    model = MODELS[model_kind](user)
    with untouched([model, user.model], [user.optimizer], user.batch):
        try:
            call(model, user)
        except TorchlensNbError:
            pass  # a typed refusal or ForwardError is fine; the guard still checks state


@pytest.mark.parametrize("model_kind", list(MODELS))
def test_trace_changes_exactly_what_a_plain_call_changes(user: Owned, model_kind: str) -> None:
    model = MODELS[model_kind](user)
    twin = copy.deepcopy(model)
    rng = torch.get_rng_state()
    with contextlib.suppress(ValueError):
        twin(user.x)
    plain = take_snapshot([twin], [], [user.x], grads=False)  # deepcopy drops .grad
    torch.set_rng_state(rng)
    with contextlib.suppress(tl.errors.ForwardError):
        tl.trace(model, user.x, capture=CaptureOptions(save_grads=True))
    assert differences(plain, take_snapshot([model], [], [user.x], grads=False)) == []


def test_a_nonfinite_step_check_raises_before_the_weights_are_written() -> None:
    user = owned()
    user.model.eval()  # so the loop's own forward moves no BatchNorm buffer and draws nothing
    checks = D.ChecksSession(user.model, user.optimizer, scaler=None)
    checks.register_nonfinite_grad_check()
    user.optimizer.zero_grad()
    with untouched([user.model], [user.optimizer], user.batch, grads=False):
        with pytest.raises(CheckViolationError) as info:
            with checks:
                loss = CE(user.model(user.x), user.y) * float("nan")
                user.model.zero_grad()
                loss.backward()
                user.optimizer.step()  # S-B raises here, before AdamW writes
    assert info.value.code == "nonfinite_grad"
    assert checks.report().status != "clean"


def test_refusing_to_trace_leaves_a_frozen_model_frozen() -> None:
    model = nn.Linear(8, 4).requires_grad_(False).eval()
    with untouched([model]):
        with pytest.raises(tl.errors.ForwardError):
            tl.trace(model, torch.ones(2, 3))
    assert not model.training
    assert not any(p.requires_grad for p in model.parameters())


def test_find_nan_on_a_nan_input_stops_before_the_forward(user: Owned) -> None:
    x = user.x.clone()
    x[0, 0] = float("nan")
    with untouched([user.model], [user.optimizer], (x,)):
        report = D.find_nan(user.model, x)
    assert (report.status, report.op, report.kind) == ("found", "input_1", "nan")
    assert "the run stopped there, after 1 ops" in report.lead


CUDA_FIRST_TOUCH = """
import torch, torchlens_nb as tl
from torch import nn

class DrawsOnCudaThenRaises(nn.Module):
    def forward(self, x):
        torch.rand(4, device="cuda")  # the first CUDA use of the process: it initialises CUDA
        raise ValueError("boom")

fresh = torch.Generator("cuda").manual_seed(torch.cuda.initial_seed()).get_state()
for name, call in {
    "investigate": lambda m, x: tl.debug.investigate(m, x, loss_fn=lambda out: out.sum()),
    "check_determinism": lambda m, x: tl.debug.check_determinism(m, x),
    "triage": lambda m, x: tl.recipes.triage(m, (x, x), lambda out, y: out.sum(), steps=2),
}.items():
    try:
        call(DrawsOnCudaThenRaises(), torch.ones(2, 8))
    except tl.errors.TorchlensNbError:
        pass
    assert torch.equal(torch.cuda.get_rng_state(), fresh), name
print("ok")
"""


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_forward_that_initialises_cuda_and_raises_leaves_the_cuda_stream_fresh() -> None:
    # a fresh process: CUDA must be uninitialised when the forward first touches it
    done = subprocess.run(
        [sys.executable, "-c", CUDA_FIRST_TOUCH], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
