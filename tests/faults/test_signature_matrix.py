"""The bad-input matrix, generated from the public signatures: every parameter of every public
callable of ``tl``, ``tl.debug``, ``tl.recipes`` and ``tl.report.Report`` is attacked with values
its annotation rules out (``ATTACKS``) and with out-of-range, empty and huge values of its own
type (``RANGE_ATTACKS``: -1, 0 and 10**12 for an int, -1.0 and +/-inf for a float, "" and empty
containers), and each attack must be refused with a typed ``TorchlensNbError`` within
``TIME_LIMIT_S``: not accepted silently, not raised from deep inside torch or Python as an
untyped error, never hanging and never allocating what no machine holds.

How a parameter is attacked is read from its type hint (``typing.get_type_hints``), so a new
parameter is attacked the day it is added; a new public callable fails
``test_every_public_callable_has_a_baseline`` until it gets a baseline (a good call) in
``BASELINES``. The attacks per kind are the reviewed table ``ATTACKS``; a value is used only when
no member of the hint's union accepts it (``3`` never attacks an ``int | str``). A parameter
typed ``Any`` is not attacked (its good values are open-ended); ``ALLOWED`` lists the accepted
range attacks, each with its reason (a seed of -1, an axis 0, a cap of 10**12 that only caps).
"""

from __future__ import annotations

import collections.abc
import inspect
import math
import os
import signal
import types
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from torch import nn

import torchlens_nb as tl
from tests.faults import _tally
from torchlens_nb.errors import TorchlensNbError
from torchlens_nb.options import CaptureOptions

pytestmark = pytest.mark.fault("bad_input")

TIME_LIMIT_S = 20
"""A refusal is a check at the function head: anything slower is a hang (the matrix found one
at 60 s: weight_distribution(bins=10**9))."""

CE = nn.CrossEntropyLoss()


@dataclass
class Scene:
    """A tiny eval-mode MLP, its batch, an optimizer and a logged trace (one backward)."""

    model: nn.Module
    x: torch.Tensor
    y: torch.Tensor
    trace: tl.Trace
    optimizer: torch.optim.Optimizer

    @property
    def batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x, self.y


def scene() -> Scene:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 4), nn.ReLU(), nn.Linear(4, 3)).eval()
    x, y = torch.randn(4, 8), torch.tensor([0, 1, 2, 0])
    trace = tl.trace(model, x, capture=CaptureOptions(save_grads=True))
    trace.backward(trace.output.sum())
    return Scene(model, x, y, trace, torch.optim.SGD(model.parameters(), lr=0.1))


Call = tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]
D, R = tl.debug, tl.recipes

BASELINES: dict[str, Callable[[Scene], Call]] = {
    "tl.trace": lambda s: (tl.trace, (s.model, s.x), {}),
    "tl.dead": lambda s: (tl.dead, ([s.trace, s.trace],), {}),
    "tl.threshold": lambda s: (tl.threshold, (s.trace,), {"within": (-10.0, 10.0)}),
    "tl.debug.ChecksSession": lambda s: (D.ChecksSession, (s.model, s.optimizer), {"scaler": None}),
    "tl.debug.CompileCounts": lambda s: (D.CompileCounts, (), {}),
    "tl.debug.LivenessProbe": lambda s: (D.LivenessProbe, ([tl.func("relu")],), {}),
    "tl.debug.RangeProbe": lambda s: (D.RangeProbe, ({tl.func("relu"): (0.0, 1.0)},), {}),
    "tl.debug.SinkProbe": lambda s: (D.SinkProbe, (), {"attention": [tl.func("softmax")]}),
    "tl.debug.amp_scaled_grads_hint": lambda s: (D.amp_scaled_grads_hint, (), {}),
    "tl.debug.attention_sinks": lambda s: (D.attention_sinks, (s.model, s.x), {}),
    "tl.debug.bisect_nan": lambda s: (D.bisect_nan, (s.trace,), {}),
    "tl.debug.bisect_nan_backward": lambda s: (D.bisect_nan_backward, (s.trace,), {}),
    "tl.debug.bisect_precision": lambda s: (D.bisect_precision, (s.model, s.x), {}),
    "tl.debug.check_determinism": lambda s: (D.check_determinism, (s.model, s.x), {}),
    "tl.debug.clone_input_tree": lambda s: (D.clone_input_tree, (s.x,), {}),
    "tl.debug.compare": lambda s: (D.compare, (s.trace, s.trace), {}),
    "tl.debug.compare_params": lambda s: (D.compare_params, (s.model, s.model), {}),
    "tl.debug.compare_rows": lambda s: (D.compare_rows, (s.trace, s.trace), {}),
    "tl.debug.count_compiles": lambda s: (D.count_compiles, (), {}),
    "tl.debug.dead": lambda s: (D.dead, ([s.trace, s.trace],), {}),
    "tl.debug.dead_neurons": lambda s: (D.dead_neurons, (s.trace,), {}),
    "tl.debug.dead_neurons_rows": lambda s: (D.dead_neurons_rows, (s.trace,), {}),
    "tl.debug.dtype_range": lambda s: (D.dtype_range, (s.trace,), {}),
    "tl.debug.dtype_range_rows": lambda s: (D.dtype_range_rows, (s.trace,), {}),
    "tl.debug.find_nan": lambda s: (D.find_nan, (s.model, s.x), {}),
    "tl.debug.find_nan_in_trace": lambda s: (D.find_nan_in_trace, (s.trace,), {}),
    "tl.debug.first_divergence": lambda s: (D.first_divergence, (s.trace, s.trace), {}),
    "tl.debug.flops_vs_dispatch": lambda s: (D.flops_vs_dispatch, (s.model, s.x), {}),
    "tl.debug.grad_health": lambda s: (D.grad_health, (s.trace,), {}),
    "tl.debug.grad_health_rows": lambda s: (D.grad_health_rows, (s.trace,), {}),
    "tl.debug.graph_breaks": lambda s: (D.graph_breaks, (s.model, s.x), {}),
    "tl.debug.guess_input_shape": lambda s: (D.guess_input_shape, (s.model,), {"max_probes": 4}),
    "tl.debug.hot_path": lambda s: (D.hot_path, (s.trace,), {}),
    "tl.debug.hot_path_rows": lambda s: (D.hot_path_rows, (s.trace,), {}),
    "tl.debug.investigate": lambda s: (
        D.investigate,
        (s.model, s.x),
        {"loss_fn": lambda out: out.sum()},
    ),
    "tl.debug.isolated_capture": lambda s: (D.isolated_capture, (s.model, s.x), {"seed": 0}),
    "tl.debug.lineage": lambda s: (D.lineage, (s.trace, "linear_1"), {}),
    "tl.debug.nonfinite_origin": lambda s: (D.nonfinite_origin, (s.model, s.x), {}),
    "tl.debug.op_flops": lambda s: (D.op_flops, (s.trace["linear_1"],), {}),
    "tl.debug.param_health": lambda s: (D.param_health, (s.model,), {}),
    "tl.debug.param_health_rows": lambda s: (D.param_health_rows, (s.model,), {}),
    "tl.debug.preserved_rng_state": lambda s: (D.preserved_rng_state, (), {}),
    "tl.debug.recompute_candidates": lambda s: (D.recompute_candidates, (s.trace,), {}),
    "tl.debug.sketch_grad_fn": lambda s: (D.sketch_grad_fn, (s.model(s.x).sum(),), {}),
    "tl.debug.threshold": lambda s: (D.threshold, (s.trace,), {"within": (-10.0, 10.0)}),
    "tl.debug.walk_grad_fn": lambda s: (D.walk_grad_fn, (s.model(s.x).sum(),), {}),
    "tl.recipes.batch_independence": lambda s: (R.batch_independence, (s.model, s.x), {}),
    "tl.recipes.causal_dependency": lambda s: (
        R.causal_dependency,
        (s.model, torch.randn(2, 5, 8)),
        {},
    ),
    "tl.recipes.autocast_coverage": lambda s: (R.autocast_coverage, (s.model, s.x), {}),
    "tl.recipes.class_balance": lambda s: (R.class_balance, (s.y,), {}),
    "tl.recipes.confident_errors": lambda s: (R.confident_errors, (s.model, [s.batch]), {}),
    "tl.recipes.data_sanity": lambda s: (R.data_sanity, (s.batch,), {}),
    "tl.recipes.duplicate_samples": lambda s: (R.duplicate_samples, ([s.batch, s.batch],), {}),
    "tl.recipes.eval_determinism": lambda s: (R.eval_determinism, (s.model, s.x), {}),
    "tl.recipes.gradient_flow": lambda s: (R.gradient_flow, (s.model, s.batch, CE), {}),
    "tl.recipes.init_loss": lambda s: (R.init_loss, (s.model, s.batch, CE), {}),
    "tl.recipes.overfit_one_batch": lambda s: (
        R.overfit_one_batch,
        (s.model, s.batch, CE),
        {"steps": 2, "live": False},
    ),
    "tl.recipes.prime_dims": lambda s: (R.prime_dims, (s.model, lambda n: torch.ones(n, 8)), {}),
    "tl.recipes.random_input_test": lambda s: (
        R.random_input_test,
        (s.model, s.batch, CE),
        {"trials": 1},
    ),
    "tl.recipes.triage": lambda s: (R.triage, (s.model, s.batch, CE), {"steps": 2, "live": False}),
    "tl.recipes.update_ratio": lambda s: (R.update_ratio, (s.model, s.batch, CE), {"steps": 2}),
    "tl.recipes.weight_distribution": lambda s: (R.weight_distribution, (s.model,), {}),
    **{
        f"tl.report.Report.{name}": (
            lambda s, name=name: (getattr(D.param_health(s.model), name), (), {})
        )
        for name in ("card", "card_html", "table", "to_html", "to_pandas")
    },
}
"""A good call of every public callable (the matrix changes one argument at a time)."""

NOT_ATTACKED = {
    "tl.func": "takes *patterns only (no named parameter); tests/capture attacks the patterns",
    "tl.module": "takes *patterns only (no named parameter); tests/capture attacks the patterns",
    "tl.recipes.leakage_poison": "needs a scikit-learn pipeline and a feature frame; "
    "tests/recipes attacks its cutoff and sentinel",
    "tl.report.Report.run_action": "the action name is checked against the report's own "
    "actions (tests/test_report.py); its **kwargs are the action's",
    "tl.report.Report.to_dict": "no parameter",
    "tl.report.Report.to_json": "takes json.dumps' **kwargs only",
}
"""Public callables the matrix leaves out, each with its reason (kept short on purpose)."""

BIG = 10**12
AXIS = "an axis index: 0 is the first axis, -1 the last"
PASS = "an index into trace.backward_passes: 0 is the first pass, -1 the last"
OFF = "documented: an infinite threshold turns that flag off"
AT_MOST = "reads at most that many batches: the loader ends first, nothing is sized by it"
HEAD = "the finding init_loss exists for: 'the head does not match the labels'"
GUESS = "tl.debug.guess_input_shape"
_ALLOWED_ROWS: tuple[tuple[str, str, tuple[Any, ...], str], ...] = (
    ("*", "seed", (-1, 0, BIG), "any int torch.manual_seed takes (NumPy gets seed % 2**32)"),
    ("tl.dead", "unit_dim", (0,), AXIS),
    ("tl.debug.dead", "unit_dim", (0,), AXIS),
    ("tl.debug.LivenessProbe", "unit_dim", (0,), AXIS),
    (
        "tl.debug.LivenessProbe",
        "unit_dim",
        (BIG,),
        "ranks are known only when values arrive: "
        "a value without that axis gets no per-unit count (its units read 0)",
    ),
    ("tl.debug.dead_neurons", "dim", (-1, 0), AXIS),
    ("tl.debug.dead_neurons_rows", "dim", (-1, 0), AXIS),
    ("tl.recipes.batch_independence", "dim", (0,), "the batch dimension (the default)"),
    ("tl.recipes.causal_dependency", "dim", (0,), "the sequence axis of a (seq, batch, ...) input"),
    ("tl.debug.attention_sinks", "sample", (0,), "batch index 0, the default"),
    ("tl.debug.SinkProbe", "sink_uniform_ratio", (math.inf,), OFF),
    ("tl.debug.SinkProbe", "outlier_factor", (math.inf,), OFF),
    ("tl.debug.attention_sinks", "sink_uniform_ratio", (math.inf,), OFF),
    ("tl.debug.attention_sinks", "outlier_factor", (math.inf,), OFF),
    ("tl.debug.grad_health", "exploding_threshold", (math.inf,), OFF),
    ("tl.debug.grad_health_rows", "exploding_threshold", (math.inf,), OFF),
    ("tl.recipes.gradient_flow", "exploding_threshold", (math.inf,), OFF),
    (
        "tl.debug.SinkProbe",
        "residual",
        ([], (), {}),
        "attention= is given: no residual site is fine",
    ),
    ("tl.debug.attention_sinks", "residual", ([], ()), "no residual site is fine"),
    ("tl.debug.bisect_nan_backward", "bwd", (0,), PASS),
    ("tl.debug.grad_health", "bwd", (-1, 0), PASS),
    ("tl.debug.grad_health_rows", "bwd", (-1, 0), PASS),
    ("tl.debug.grad_health", "grad_scales", ({},), "no pass has a scale: as None, unscaled"),
    ("tl.debug.grad_health_rows", "grad_scales", ({},), "no pass has a scale: as None, unscaled"),
    (GUESS, "spatial_rank", (0,), "0 to 3 by design: rank 0 is (batch, features)"),
    (GUESS, "max_size", (BIG,), "filters the listed sizes, each <= MAX_PROBE_SIZE"),
    (GUESS, "max_probes", (BIG,), "the candidates run out first: a few dozen shapes"),
    (GUESS, "preferred_sizes", ([], ()), "empty: the built-in sizes alone"),
    (GUESS, "input_specs", ([], ()), "empty: the guesses alone"),
    (
        "tl.debug.investigate",
        "rng_state",
        ({},),
        "both keys are optional: {} replays under the current state, reported rng='current'",
    ),
    ("tl.debug.lineage", "max_depth", (0,), "the op alone: '0 ancestors within depth 0'"),
    ("tl.debug.lineage", "max_depth", (BIG,), "no limit: the walk ends at the trace's inputs"),
    ("tl.recipes.confident_errors", "k", (BIG,), "caps the list: every error found is shown"),
    ("tl.recipes.data_sanity", "num_batches", (BIG,), AT_MOST),
    ("tl.recipes.duplicate_samples", "batches", (BIG,), AT_MOST),
    (
        "tl.recipes.data_sanity",
        "num_classes",
        (BIG,),
        "a bound labels are checked against, "
        "nothing is sized by it (class_balance, which counts per class, caps it)",
    ),
    ("tl.recipes.init_loss", "num_classes", (BIG,), HEAD),
    ("tl.recipes.triage", "num_classes", (BIG,), HEAD),
    ("tl.report.Report.card", "max_findings", (BIG,), "a display cap: every finding is shown"),
)
ALLOWED: dict[tuple[str, str, str], str] = {
    (name, parameter, repr(value)): reason
    for name, parameter, values, reason in _ALLOWED_ROWS
    for value in values
}
"""(callable, parameter, attack repr) -> why accepting that value is right (``"*"``: every
callable). Only out-of-range attacks are here: every wrong-kind attack is refused."""


class _Timeout(BaseException):
    """Not an ``Exception``: a tool that wraps what its forward raised (``ForwardError``) must
    not turn a hang into a typed refusal."""


@dataclass(frozen=True)
class Kind:
    """One member of a parameter's type hint, with the values that member accepts."""

    name: str
    accepts: Callable[[Any], bool]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


ATTACKS: dict[str, tuple[Any, ...]] = {
    "bool": ("yes", 1),
    "int": ("3", 2.5, True),
    "float": ("0.5", True, math.nan),
    "literal": ("bogus-value", 3),
    "str": (3,),
    "dtype": ("float32",),
    "path": (3,),
    "callable": (3,),
    "container": (3,),
    "class": (3, "bogus"),
}
"""The reviewed table: per kind, values no caller means (wrong type, NaN, a bool for a number,
a string outside the vocabulary). A value attacks a parameter only when no member of its hint
accepts it."""

RANGE_ATTACKS: dict[str, tuple[Any, ...]] = {
    "int": (-1, 0, 10**12),
    "float": (-1.0, math.inf, -math.inf),
    "str": ("",),
    "container": ([], {}, ()),
}
"""Values of the right type that are out of range, empty or huge: a negative or zero count, a
size no machine holds (``10**12``: it must be refused at once, never looped over or
allocated), an infinity, an empty string or container. Each is tried on every parameter whose
hint has that kind (a container only with the empty value of its own type), whether or not
another member of the hint accepts it; the legitimate ones are listed in ``ALLOWED``."""


def _kinds(hint: Any) -> list[Kind] | None:
    """The members of ``hint`` (a union is split); None when a member is ``Any`` (open)."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        members: list[Kind] = []
        for arg in typing.get_args(hint):
            found = _kinds(arg)
            if found is None:
                return None
            members += found
        return members
    if hint is Any or hint is object:
        return None
    if hint is type(None):
        return [Kind("none", lambda v: v is None)]
    if origin is typing.Literal:
        values = typing.get_args(hint)
        return [Kind("literal", lambda v, values=values: any(v is x or v == x for x in values))]
    if hint is bool:
        return [Kind("bool", lambda v: isinstance(v, bool))]
    if hint is int:
        return [Kind("int", _is_int)]
    if hint is float:
        return [Kind("float", _is_number)]
    if hint is str:
        return [Kind("str", lambda v: isinstance(v, str))]
    if hint is torch.dtype:
        return [Kind("dtype", lambda v: isinstance(v, torch.dtype))]
    if hint is os.PathLike or origin is os.PathLike:
        return [Kind("path", lambda v: isinstance(v, os.PathLike))]
    base = origin or hint
    if base in (collections.abc.Callable, Callable):
        return [Kind("callable", callable)]
    if (
        isinstance(base, type)
        and issubclass(base, (collections.abc.Iterable, collections.abc.Mapping))
        and not issubclass(base, (str, torch.Tensor, nn.Module))
    ):
        return [Kind("container", lambda v, base=base: isinstance(v, base))]
    if isinstance(base, type):
        return [Kind("class", lambda v, base=base: isinstance(v, base))]
    return None  # a TypeVar or a form this table does not know: not attacked


def attacks_of(hint: Any) -> list[Any]:
    """The values that attack a parameter typed ``hint`` (none for an open hint): the wrong
    kinds no member accepts, then each member's out-of-range, empty and huge values."""
    kinds = _kinds(hint)
    if not kinds:
        return []
    found: list[Any] = []

    def add(value: Any) -> None:
        if not any(value is v or repr(value) == repr(v) for v in found):
            found.append(value)

    for kind in kinds:
        for value in ATTACKS.get(kind.name, ()):
            if not any(k.accepts(value) for k in kinds):
                add(value)
    for kind in kinds:
        for value in RANGE_ATTACKS.get(kind.name, ()):
            if kind.accepts(value):
                add(value)
    return found


def public_callables() -> Iterator[tuple[str, Any]]:
    """(qualified name, object) of every public function and class of the four namespaces,
    and every public method of ``tl.report.Report``."""
    spaces = {"tl": tl, "tl.debug": tl.debug, "tl.recipes": tl.recipes}
    for prefix, space in spaces.items():
        for name in space.__all__:
            obj = getattr(space, name)
            if inspect.isfunction(obj) or (
                inspect.isclass(obj)
                and not issubclass(obj, BaseException)
                and "__init__" in vars(obj)
                and not _is_plain_record(obj)
            ):
                yield f"{prefix}.{name}", obj
    for name, method in inspect.getmembers(tl.report.Report, inspect.isfunction):
        if not name.startswith("_"):
            yield f"tl.report.Report.{name}", method


def _is_plain_record(cls: type) -> bool:
    """A dataclass or a result type the tools build (Trace, reports): not an entry point."""
    return hasattr(cls, "__dataclass_fields__") or cls in (tl.Trace, tl.PartialTrace)


def _hints(obj: Any) -> dict[str, Any]:
    target = obj.__init__ if inspect.isclass(obj) else obj
    try:
        return typing.get_type_hints(target)
    except Exception:  # a name only imported under TYPE_CHECKING: that parameter stays open
        return {}


def _signature(obj: Any) -> inspect.Signature:
    return inspect.signature(obj)


def attacked_parameters(obj: Any) -> list[tuple[str, list[Any]]]:
    hints = _hints(obj)
    out = []
    for name, param in _signature(obj).parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD, param.POSITIONAL_ONLY):
            continue
        if name == "self":
            continue
        values = attacks_of(hints[name]) if name in hints else []
        if values:
            out.append((name, values))
    return out


def _alarm(signum: int, frame: Any) -> None:
    raise _Timeout


def outcome(function: Callable[..., Any], args: tuple, kwargs: dict) -> str:
    """``typed``, ``silent`` (returned), ``untyped: <Error>`` or ``hang`` (past the limit)."""
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(TIME_LIMIT_S)
    try:
        function(*args, **kwargs)
        return "silent"
    except _Timeout:
        return "hang"
    except TorchlensNbError:
        return "typed"
    except Exception as exc:  # the point of the matrix: anything else is a finding
        return f"untyped: {type(exc).__name__}: {str(exc)[:120]}"
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


NAMES = [name for name, _ in public_callables()]
OBJECTS = dict(public_callables())


def test_every_public_callable_has_a_baseline() -> None:
    missing = [n for n in NAMES if n not in BASELINES and n not in NOT_ATTACKED]
    assert missing == [], f"add a good call to BASELINES (or a reason to NOT_ATTACKED): {missing}"
    assert len(NOT_ATTACKED) <= 6  # the allow-list stays short: each entry is reviewed
    stale = [n for n in [*BASELINES, *NOT_ATTACKED] if n not in OBJECTS]
    stale += [f"ALLOWED {n}.{p}" for n, p, _ in ALLOWED if n != "*" and n not in OBJECTS]
    assert stale == []


@pytest.mark.parametrize("name", [n for n in NAMES if n in BASELINES])
def test_every_attack_on_every_parameter_is_refused_with_a_typed_error(name: str) -> None:
    obj = OBJECTS[name]
    first = scene()
    function, args, kwargs = BASELINES[name](first)
    assert outcome(function, args, kwargs) == "silent", "the baseline itself must succeed"
    findings = []
    used: set[tuple[str, str, str]] = set()
    tried = 0
    for parameter, values in attacked_parameters(obj):
        for value in values:
            fresh = scene()  # an attack that got through must not poison the next one
            function, args, kwargs = BASELINES[name](fresh)
            bound = _signature(function).bind(*args, **kwargs)
            bound.arguments[parameter] = value
            result = outcome(function, bound.args, bound.kwargs)
            tried += 1
            allowed = {
                (name, parameter, repr(value)),
                ("*", parameter, repr(value)),
            } & ALLOWED.keys()
            if result != "typed" and not allowed:
                findings.append(f"{parameter}={value!r}: {result}")
            elif result == "silent":
                used.add((name, parameter, repr(value)))
    _tally.examples["bad_input"] += tried
    assert findings == []
    stale = [key for key in ALLOWED if key[0] == name and key not in used]
    assert stale == [], "these values are refused now: take them out of ALLOWED"
