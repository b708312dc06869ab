"""Bad inputs to the checks kit (``ChecksSession``, its ``register_*`` calls, ``param_health``)
and the probes (``RangeProbe``, ``LivenessProbe``, ``SinkProbe``): typed errors naming the bad
value, raised before any hook is installed, with the model and optimizer untouched.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

import torchlens_nb as tl
from tests.faults._guards import assert_refused, untouched
from tests.faults.fault_models import NoParams, Owned, quantized_tensor, sparse_tensor
from torchlens_nb.errors import DiagnosticArgumentError, ModelTypeError

pytestmark = pytest.mark.fault("bad_input")

D = tl.debug
NAN = math.nan


def session(user: Owned, **kwargs: Any) -> tl.debug.ChecksSession:
    return D.ChecksSession(user.model, user.optimizer, scaler=None, **kwargs)


Case = tuple[str, Callable[[Owned], Any], type[Exception], str]

CHECKS: list[Case] = [
    (
        "session-list-model",
        lambda u: D.ChecksSession([u.model], u.optimizer),
        ModelTypeError,
        r"needs an nn\.Module as model, got list",
    ),
    (
        "session-no-optimizer",
        lambda u: D.ChecksSession(u.model, None),
        DiagnosticArgumentError,
        r"needs a torch\.optim\.Optimizer, got NoneType",
    ),
    (
        "session-scaler-int",
        lambda u: D.ChecksSession(u.model, u.optimizer, scaler=3),
        DiagnosticArgumentError,
        r"scaler must be a torch\.amp\.GradScaler or None, got int",
    ),
    (
        "session-loss-scale-nan",
        lambda u: session(u, loss_scale=NAN),
        DiagnosticArgumentError,
        r"loss_scale must be a positive finite number .* got "
        r"loss_scale=nan",
    ),
    (
        "session-loss-scale-inf",
        lambda u: session(u, loss_scale=math.inf),
        DiagnosticArgumentError,
        r"got loss_scale=inf",
    ),
    (
        "session-loss-scale-negative",
        lambda u: session(u, loss_scale=-2.0),
        DiagnosticArgumentError,
        r"got loss_scale=-2\.0",
    ),
    (
        "session-loss-scale-string",
        lambda u: session(u, loss_scale="1024"),
        DiagnosticArgumentError,
        r"got loss_scale='1024'",
    ),
    (
        "change-window-0",
        lambda u: session(u).register_change_check(window=0),
        DiagnosticArgumentError,
        r"need window >= 1 and 1 <= min_hits <= window, got window=0",
    ),
    (
        "change-min-hits-above-window",
        lambda u: session(u).register_change_check(window=2, min_hits=5),
        DiagnosticArgumentError,
        r"got window=2, min_hits=5; e\.g\. window=8, min_hits=6",
    ),
    (
        "change-window-string",
        lambda u: session(u).register_change_check(window="8"),
        DiagnosticArgumentError,
        r"window='8'",
    ),
    (
        "change-action",
        lambda u: session(u).register_change_check(action="explode"),
        DiagnosticArgumentError,
        r"action must be one of \['raise', 'warn', 'collect'\], got "
        r"'explode'",
    ),
    (
        "change-movement-every-0",
        lambda u: session(u).register_change_check(movement_every=0),
        DiagnosticArgumentError,
        r"every must be >= 1 accepted steps, got 0",
    ),
    (
        "nonfinite-smear-0",
        lambda u: session(u).register_nonfinite_grad_check(smear_min_params=0),
        DiagnosticArgumentError,
        r"smear_min_params must be >= 2 .* got 0",
    ),
    (
        "ratio-every-negative",
        lambda u: session(u).register_update_ratio_check(every=-1),
        DiagnosticArgumentError,
        r"every must be >= 1 accepted steps, got -1",
    ),
    (
        "ratio-band-reversed",
        lambda u: session(u).register_update_ratio_check(band=(1.0, 0.1)),
        DiagnosticArgumentError,
        r"band must be \(low, high\) with 0 <= low < high, got "
        r"\(1\.0, 0\.1\)",
    ),
    (
        "ratio-band-nan",
        lambda u: session(u).register_update_ratio_check(band=(NAN, 0.1)),
        DiagnosticArgumentError,
        r"got \(nan, 0\.1\)",
    ),
    (
        "ratio-band-string",
        lambda u: session(u).register_update_ratio_check(band="1e-3"),
        DiagnosticArgumentError,
        r"band must be \(low, high\) .* got '1e-3'",
    ),
    (
        "magnitude-high-nan",
        lambda u: session(u).register_magnitude_check(high=NAN),
        DiagnosticArgumentError,
        r"need 0 < low < high, got low=1e-07, high=nan",
    ),
    (
        "magnitude-low-negative",
        lambda u: session(u).register_magnitude_check(low=-1.0),
        DiagnosticArgumentError,
        r"got low=-1\.0",
    ),
    (
        "magnitude-site",
        lambda u: session(u).register_magnitude_check(site="S-Z"),
        DiagnosticArgumentError,
        r"site must be 'S-A' .* or 'S-B', got 'S-Z'",
    ),
    (
        "watchdog-threshold-0",
        lambda u: session(u).register_no_accepted_steps_check(threshold_attempts=0),
        DiagnosticArgumentError,
        r"threshold_attempts must be >= 1, got 0",
    ),
    (
        "watchdog-threshold-nan",
        lambda u: session(u).register_no_accepted_steps_check(threshold_attempts=NAN),
        DiagnosticArgumentError,
        r"threshold_attempts must be .* got nan",
    ),
    (
        "param-scan-every-0",
        lambda u: session(u).register_param_scan(every=0),
        DiagnosticArgumentError,
        r"every must be >= 1 accepted steps, got 0",
    ),
    (
        "param-scan-every-string",
        lambda u: session(u).register_param_scan(every="100"),
        DiagnosticArgumentError,
        r"every must be .* got '100'",
    ),
    (
        "param-scan-fraction-nan",
        lambda u: session(u).register_param_scan(max_fraction=NAN),
        DiagnosticArgumentError,
        r"max_fraction must be in \(0, 1\], got nan",
    ),
    (
        "param-scan-fraction-negative",
        lambda u: session(u).register_param_scan(max_fraction=-1.0),
        DiagnosticArgumentError,
        r"max_fraction must be in \(0, 1\], got -1\.0",
    ),
    (
        "param-scan-subnormal-nan",
        lambda u: session(u).register_param_scan(subnormal_fraction_threshold=NAN),
        DiagnosticArgumentError,
        r"subnormal_fraction_threshold must be in .0, 1\], got nan",
    ),
    (
        "step-outside-scope",
        lambda u: session(u).step().__enter__(),
        DiagnosticArgumentError,
        r"session\.step\(\) needs an attached session: use it inside "
        r"`with session:`",
    ),
    (
        "param_health-list",
        lambda u: D.param_health([u.model]),
        DiagnosticArgumentError,
        r"takes an nn\.Module or a mapping of names to tensors, got list; "
        r"for a list of tensors pass dict\(enumerate\(tensors\)\)",
    ),
    (
        "param_health-fraction-nan",
        lambda u: D.param_health(u.model, max_fraction=NAN),
        DiagnosticArgumentError,
        r"max_fraction must be in \(0, 1\], got nan",
    ),
    (
        "param_health-fraction-string",
        lambda u: D.param_health(u.model, max_fraction="0.9"),
        DiagnosticArgumentError,
        r"max_fraction must be in \(0, 1\], got '0\.9'",
    ),
    (
        "param_health-bounds-reversed",
        lambda u: D.param_health(u.model, bounds={"*": (1, 0)}),
        DiagnosticArgumentError,
        r"bounds must be \(low, high\) with low < high",
    ),
    (
        "param_health-within-nan",
        lambda u: D.param_health(u.model, within=(NAN, 1.0)),
        DiagnosticArgumentError,
        r"within must be a non-empty glob or module prefix",
    ),
]

PROBES: list[Case] = [
    (
        "range-bounds-nan",
        lambda u: D.RangeProbe({tl.func("relu"): (NAN, 1.0)}),
        DiagnosticArgumentError,
        r"needs low <= high .* got \(nan, 1\.0\)",
    ),
    (
        "range-bounds-reversed",
        lambda u: D.RangeProbe({tl.func("relu"): (6.0, 0.0)}),
        DiagnosticArgumentError,
        r"got \(6\.0, 0\.0\)",
    ),
    (
        "range-string-key",
        lambda u: D.RangeProbe({"relu": (0.0, 6.0)}),
        DiagnosticArgumentError,
        r"takes selectors such as tl\.func\('relu'\) .* got 'relu'",
    ),
    (
        "range-list",
        lambda u: D.RangeProbe([tl.func("relu")]),
        DiagnosticArgumentError,
        r"takes a non-empty dict \{selector: \(low, high\)\}",
    ),
    ("range-empty", lambda u: D.RangeProbe({}), DiagnosticArgumentError, r"got \{\}"),
    (
        "liveness-string",
        lambda u: D.LivenessProbe("relu"),
        DiagnosticArgumentError,
        r"LivenessProbe takes selectors .* got the string 'relu'; write "
        r"\[tl\.func\('relu'\)\]",
    ),
    (
        "sink-string",
        lambda u: D.SinkProbe(attention="softmax"),
        DiagnosticArgumentError,
        r"SinkProbe\(attention=\.\.\.\) takes selectors .* got the "
        r"string 'softmax'",
    ),
    (
        "liveness-empty",
        lambda u: D.LivenessProbe([]),
        DiagnosticArgumentError,
        r"needs at least one selector, e\.g\. \[tl\.func\('relu'\)\]",
    ),
    (
        "liveness-unit-dim-string",
        lambda u: D.LivenessProbe([tl.func("relu")], unit_dim="a"),
        DiagnosticArgumentError,
        r"unit_dim must be a non-negative axis index or None, got 'a'",
    ),
    (
        "sink-no-sites",
        lambda u: D.SinkProbe(),
        DiagnosticArgumentError,
        r"needs attention=\[\.\.\.\] and/or residual=\[\.\.\.\]",
    ),
    (
        "sink-mass-nan",
        lambda u: D.SinkProbe([tl.func("softmax")], sink_mass=NAN),
        DiagnosticArgumentError,
        r"sink_mass must be a finite number in \(0, 1\], got nan",
    ),
    (
        "sink-mass-negative",
        lambda u: D.SinkProbe([tl.func("softmax")], sink_mass=-1.0),
        DiagnosticArgumentError,
        r"got -1\.0",
    ),
    (
        "sink-outlier-nan",
        lambda u: D.SinkProbe([tl.func("softmax")], outlier_factor=NAN),
        DiagnosticArgumentError,
        r"outlier_factor must be a number > 1, got nan",
    ),
    (
        "sink-uniform-ratio-nan",
        lambda u: D.SinkProbe([tl.func("softmax")], sink_uniform_ratio=NAN),
        DiagnosticArgumentError,
        r"sink_uniform_ratio must be a number > 1, got nan",
    ),
    (
        "sink-mask-string",
        lambda u: D.SinkProbe([tl.func("softmax")], attention_mask="ones"),
        DiagnosticArgumentError,
        r"attention_mask must be a \(batch, keys\) tensor.* got str",
    ),
]


@pytest.mark.parametrize(
    "call, error, match", [c[1:] for c in CHECKS + PROBES], ids=[c[0] for c in CHECKS + PROBES]
)
def test_checks_and_probes_refuse_bad_input(
    user: Owned, call: Callable[[Owned], Any], error: type[Exception], match: str
) -> None:
    assert_refused(
        lambda: call(user),
        error,
        match,
        models=[user.model],
        optimizers=[user.optimizer],
        inputs=user.batch,
    )


def test_a_finalized_session_refuses_reuse(user: Owned) -> None:
    checks = session(user)
    with checks:
        with pytest.raises(DiagnosticArgumentError, match="already attached"):
            checks.attach()
    assert_refused(
        checks.attach,
        DiagnosticArgumentError,
        r"finalized .* create a new "
        r"ChecksSession",
        models=[user.model],
        optimizers=[user.optimizer],
    )
    assert_refused(
        checks.register_change_check,
        DiagnosticArgumentError,
        r"finalized",
        models=[user.model],
        optimizers=[user.optimizer],
    )


def test_session_step_blocks_refuse_nesting_and_bad_micro_batches(user: Owned) -> None:
    checks = session(user)
    with checks:
        for micro_batches, match in [
            (0, r"micro_batches must be >= 1, got 0"),
            ("2", r"micro_batches must be .* got '2'"),
        ]:
            with pytest.raises(DiagnosticArgumentError, match=match):
                with checks.step(micro_batches=micro_batches):
                    pass
        for kept, match in [
            ({"loss_fn": torch.sum}, r"loss_fn=\.\.\.\) needs inputs= .* got builtin"),
            ({"loss_fn": "mse", "inputs": user.batch}, r"a callable loss_fn.* got str"),
        ]:
            with pytest.raises(DiagnosticArgumentError, match=match):
                with checks.step(**kept):
                    pass
        with checks.step(global_step=0):
            with pytest.raises(DiagnosticArgumentError, match="blocks do not nest"):
                with checks.step(global_step=1):
                    pass
    assert checks.report().counters["attempts"] == 0


UNREADABLE = [
    ("meta", lambda: torch.empty(4, 8, device="meta"), "meta"),
    ("sparse", sparse_tensor, "sparse"),
    ("quantized", quantized_tensor, "quantized"),
]


@pytest.mark.parametrize(
    "make, reason", [c[1:] for c in UNREADABLE], ids=[c[0] for c in UNREADABLE]
)
def test_param_health_skips_unreadable_tensors_with_a_reason(
    make: Callable[[], torch.Tensor], reason: str
) -> None:
    tensor = make()
    with untouched(inputs=(tensor,)):
        report = D.param_health({"t": tensor, "ok": torch.ones(3)})
    rows = {row.name: row for row in report.rows}
    assert rows["ok"].skip_reason is None
    assert reason in rows["t"].skip_reason


def test_sessions_on_parameter_free_models_report_no_attempts() -> None:
    model = NoParams()
    optimizer = torch.optim.SGD(nn.Linear(2, 2).parameters(), lr=0.1)
    with untouched([model], [optimizer]):
        checks = D.ChecksSession(model, optimizer, scaler=None)
        checks.register_change_check()
        with checks:
            model(torch.ones(2, 8))
    assert checks.report().counters["attempts"] == 0
