"""``gradient_flow``: which parameters a loss's gradient reaches, and where it stops.

One traced forward (``tl.trace`` with ``save_grads=True``), one ``trace.backward(loss)``, then two
views of the same backward: per-parameter statistics read from ``.grad`` (None = disconnected,
all-zero, huge) and ``tl.debug.grad_health``'s op rows, whose frontier names the op where a
flagged cone starts (a dead layer zeroes the gradient of everything upstream of it).

The caller's model keeps its ``.grad`` bitwise (saved, cleared for the run, restored), its
buffers (the train-mode forward updates BatchNorm statistics; they are restored) and its
train/eval flags; the run is in train mode (the gradients training sees) and the RNG streams
are restored after it (``recipes._model_state.preserved``), so dropout draws do not advance the
caller's RNG.
"""

from __future__ import annotations

import itertools
import math
from functools import partial
from typing import Any

import torch
from torch import nn

from ..._hooks import add_forward_hooks
from ..._undo import Undo, undoing
from ...capture import iter_tensors, trace
from ...capture._installs import without_grad
from ...debug import grad_health
from ...debug._isolation import keeps_torch_switches
from ...options import CaptureOptions
from ...report import Exit, Finding, Table, Where
from ...report._base import Severity
from ...report._recipes_data import recipe_status, worst_finding
from ...report._recipes_training import FrontierOp, GradientFlowReport, ParamGrad, ParamGradVerdict
from .._batches import (
    call_model,
    check_loss_fn,
    check_loss_follows_outputs,
    check_model,
    first_batch,
    loss_input,
    loss_value,
    model_device,
    primary_output,
    split_batch,
    to_device,
)
from .._model_state import preserved
from .._stats import tensor_stats

SPREAD_DECADES_MAX = 4.0
"""Parameters whose gradient RMS differ by more than 10^4 may train at incompatible speeds
under one learning rate (measured: default-initialised MLPs and small CNNs span under 2
decades, tests/recipes/test_gradients.py). A hint (info): a healthy BERT built from config
spans 4.9 decades at init (its query/key weights get ~2e-6, attention being near uniform);
the shape that is a fault, shrinking with depth, is ``grad_vanishing``."""


BATCH_STAT_NORMS = (nn.modules.batchnorm._BatchNorm, nn.modules.instancenorm._InstanceNorm)
"""Normalisations that subtract a per-channel mean over the batch (and space): a per-channel
bias added just before them cancels out, so its gradient is ~0 by construction."""


def _biases_into_norms(model: nn.Module, inputs: Any) -> frozenset[str]:
    """Names of biases whose module's output feeds a batch-statistics norm directly (one
    forward in eval mode under no_grad, none when the model holds no such norm; the caller
    restores modes and buffers)."""
    if not any(isinstance(module, BATCH_STAT_NORMS) for module in model.modules()):
        return frozenset()
    produced: dict[int, str] = {}
    fed: set[int] = set()

    def record(name: str, module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
        if isinstance(module, BATCH_STAT_NORMS):
            fed.update(id(a) for a in args if isinstance(a, torch.Tensor))
        elif isinstance(output, torch.Tensor) and isinstance(
            getattr(module, "bias", None), nn.Parameter
        ):
            produced[id(output)] = f"{name}.bias" if name else "bias"

    def run(undo: Undo) -> frozenset[str]:
        for name, module in model.named_modules():
            add_forward_hooks(undo, module, post=partial(record, name))
        model.eval()
        outputs = without_grad(call_model, model, inputs)  # kept alive: ids stay unique
        names = frozenset(name for key, name in produced.items() if key in fed)
        del outputs
        return names

    return undoing(run)


BY_CONSTRUCTION_RATIO = 1e-5
"""A bias whose gradient norm is below 1e-5 of its own module's weight gradient is ~0 by
construction, not by fault: an attention key bias adds the same score to every key of a query,
which the softmax cancels (BERT's key biases: ~1e-9 of the key weights' gradient)."""
VANISHING_DEPTH_DECADES = 3.0
"""Weight-gradient RMS falling 3+ decades from the last weight matrix to the first, and
shrinking layer by layer, is a vanishing gradient (a 5-hidden-layer sigmoid MLP: ~3.5
decades; the same MLP with ReLU: under 1)."""


def _unused_outputs(model: nn.Module, inputs: Any, targets: Any, loss_fn: Any) -> frozenset[str]:
    """Names of parameters whose module's output never reaches the loss: not in the loss's
    graph, and not read by a module whose output is (a Hugging Face pooler whose pooled
    output the head ignores is unused by design; ``fc2(fc1(x).detach())`` is a cut). One
    forward and loss with hooks, no backward; :func:`gradient_flow` runs it only when the
    backward left a parameter disconnected."""
    outputs: dict[str, list[torch.Tensor]] = {}
    reads: dict[str, set[int]] = {}

    def pre(name: str, args: tuple[Any, ...]) -> None:
        reads.setdefault(name, set()).update(
            a.data_ptr() for a in args if isinstance(a, torch.Tensor)
        )

    def post(name: str, output: Any) -> None:
        outputs.setdefault(name, []).extend(
            t for t in iter_tensors(output) if t.is_floating_point()
        )

    def run(undo: Undo) -> Any:
        for name, module in model.named_modules():
            add_forward_hooks(
                undo,
                module,
                pre=lambda m, a, name=name: pre(name, a),
                post=lambda m, a, o, name=name: post(name, o),
            )
        return loss_fn(loss_input(call_model(model, inputs)), targets)

    loss = undoing(run)
    reached: set[Any] = set()
    stack: list[Any] = [loss.grad_fn] if isinstance(loss, torch.Tensor) and loss.grad_fn else []
    while stack:
        node = stack.pop()
        if node is None or node in reached:
            continue
        reached.add(node)
        stack.extend(next_node for next_node, _ in node.next_functions)
    live = {n for n, ts in outputs.items() if any(t.grad_fn in reached for t in ts)}
    read_by_live = set().union(*(reads.get(n, set()) for n in live)) if live else set()
    named = dict(model.named_modules())
    unused = {
        name
        for name, tensors in outputs.items()
        if name not in live
        and any(True for _ in named[name].parameters(recurse=False))
        and all(t.data_ptr() not in read_by_live for t in tensors)
    }
    return frozenset(
        f"{module}.{param}" if module else param
        for module in unused
        for param, _ in named[module].named_parameters(recurse=False)
    )


def _zero_by_construction(params: list[ParamGrad]) -> frozenset[str]:
    """Biases whose gradient is ``BY_CONSTRUCTION_RATIO`` below their module's weight's."""
    by_name = {p.name: p for p in params}
    found = set()
    for p in params:
        if not p.name.endswith("bias") or p.norm is None:
            continue
        weight = by_name.get(p.name[: -len("bias")] + "weight")
        if weight is not None and weight.norm and p.norm < BY_CONSTRUCTION_RATIO * weight.norm:
            found.add(p.name)
    return frozenset(found)


def _vanishing_with_depth(params: list[ParamGrad]) -> tuple[str, ...]:
    """Weight matrices (in forward order) whose gradient RMS shrinks layer by layer toward
    the input by ``VANISHING_DEPTH_DECADES`` or more; empty when it does not."""
    weights = [p for p in params if len(p.shape) >= 2 and p.rms and math.isfinite(p.rms)]
    if len(weights) < 3:
        return ()
    logs = [math.log10(p.rms) for p in weights if p.rms]
    if logs[-1] - logs[0] < VANISHING_DEPTH_DECADES:
        return ()
    rising = sum(b > a for a, b in itertools.pairwise(logs))
    if rising < 0.75 * (len(logs) - 1):
        return ()
    return tuple(p.name for p, v in zip(weights, logs, strict=True) if logs[-1] - v >= 1.0)


def _param_grad(name: str, param: nn.Parameter, vanishing: float, exploding: float) -> ParamGrad:
    module = name.rsplit(".", 1)[0] if "." in name else ""
    shape = tuple(param.shape)
    if not param.requires_grad:
        return ParamGrad(name, module, shape, "frozen", None, None, None, None, None, None)
    grad = param.grad
    if grad is None:
        return ParamGrad(name, module, shape, "disconnected", None, None, None, None, None, None)
    norm, mean, std, max_abs, zero_fraction = _grad_moments(grad)
    rms = norm / math.sqrt(grad.numel()) if grad.numel() else 0.0
    verdict: ParamGradVerdict
    if not math.isfinite(norm):
        verdict = "nonfinite"
    elif zero_fraction == 1.0:
        verdict = "zero"
    elif norm > exploding:
        verdict = "exploding"
    elif norm < vanishing:
        verdict = "vanishing"
    else:
        verdict = "ok"
    return ParamGrad(
        name,
        module,
        shape,
        verdict,
        norm,
        rms,
        mean,
        std,
        max_abs,
        zero_fraction,
    )


def _grad_moments(grad: torch.Tensor) -> tuple[float, float, float, float, float]:
    """(norm, mean, std, max |g|, zero fraction) of a gradient. A finite one of two or more
    elements comes from ``tensor_stats``' fused passes (aminmax, var_mean, count_nonzero;
    norm^2 = (n - 1) var + n mean^2, both terms non-negative); any other is read in float64,
    where a NaN or Inf makes the norm non-finite."""
    stats = tensor_stats(grad)
    n = stats.numel
    if n > 1 and not (stats.nan_count or stats.inf_count):
        norm = math.sqrt((n - 1) * stats.std**2 + n * stats.mean**2)
        return norm, stats.mean, stats.std, stats.abs_max, stats.zero_fraction
    values = grad.detach().to(torch.float64).reshape(-1)
    return (
        float(values.norm()),
        float(values.mean()),
        float(values.std()) if n > 1 else 0.0,
        float(values.abs().max()) if n else math.nan,
        float((values == 0).sum()) / max(n, 1),
    )


@keeps_torch_switches
def gradient_flow(
    model: nn.Module,
    batch: Any,
    loss_fn: Any,
    *,
    vanishing_threshold: float | None = None,
    exploding_threshold: float | None = None,
) -> GradientFlowReport:
    """Per-parameter gradient statistics of one backward, with grad_health's frontier.

    Verdicts per parameter: ``disconnected`` (requires grad, got None: not in the graph of the
    loss; warning), ``zero`` (every element 0: a dead layer or downstream of one; warning, with
    the frontier op naming where the zero cone starts), ``vanishing`` / ``exploding`` (norm
    outside grad_health's thresholds; warning / critical), ``nonfinite`` (critical), ``frozen``
    (requires_grad=False; not a finding). Gradient RMS spanning more than ``SPREAD_DECADES_MAX``
    decades across parameters is a warning.

    Args:
        model: traced once in train mode; ``.grad``, flags and the global RNG are restored.
        batch: ``(inputs, targets)``, a dict batch, or a loader (its first batch).
        loss_fn: ``loss_fn(outputs, targets)``.
        vanishing_threshold, exploding_threshold: passed to ``tl.debug.grad_health`` (its
            defaults when None), and used for the parameter verdicts too.

    Returns:
        A :class:`GradientFlowReport` with tables ``parameters`` and ``frontier``, a bar-chart
        ``figure()`` and the op-level ``grad_health`` report as the action ``grad_health``.

    Cost: one forward with every op output's gradient kept, one backward; one more forward
    (no backward) when a parameter is disconnected, and one under no_grad when the model holds
    a BatchNorm or InstanceNorm.
    """
    check_model(model)
    check_loss_fn(loss_fn)
    thresholds: dict[str, Any] = {
        k: v
        for k, v in (
            ("vanishing_threshold", vanishing_threshold),
            ("exploding_threshold", exploding_threshold),
        )
        if v is not None
    }
    inputs, targets = split_batch(first_batch(batch))
    device = model_device(model)
    inputs, targets = to_device(inputs, device), to_device(targets, device)
    with preserved(model):
        absorbed = _biases_into_norms(model, inputs)
    with preserved(model, mode="train"):
        recorded = trace(model, inputs, capture=CaptureOptions(save_grads=True))
        output = primary_output(recorded.output)
        loss = loss_fn(loss_input(recorded.output), targets)
        value = loss_value(loss)
        check_loss_follows_outputs(loss, output)
        recorded.backward(loss)
        health = grad_health(recorded, **thresholds)
        params = [
            _param_grad(name, p, health.vanishing_threshold, health.exploding_threshold)
            for name, p in model.named_parameters()
        ]
    rows = {r["op"]: r for r in health.table("grad_health").dicts()}
    frontier = tuple(
        FrontierOp(
            op,
            rows[op]["module"],
            rows[op]["verdict"],
            rows[op]["grad_norm"],
            recorded[op].param_names,
        )
        for op in health.frontier
    )
    wheres = {
        f.op: Where(
            op=f.op,
            module=f.module,
            file=recorded[f.op].file,
            line=recorded[f.op].line,
            code=recorded[f.op].code,
        )
        for f in frontier
    }
    del recorded  # releases the autograd graph the trace kept for backward
    absorbed = absorbed | _zero_by_construction(params)
    disconnected = frozenset(p.name for p in params if p.verdict == "disconnected")
    unused: frozenset[str] = frozenset()
    if disconnected:  # which of them no module output the loss reads: by design, not a cut
        with preserved(model, mode="train"):
            unused = disconnected & _unused_outputs(model, inputs, targets, loss_fn)
    vanishing = _vanishing_with_depth(params)
    rms = [p.rms for p in params if p.rms and math.isfinite(p.rms) and p.name not in absorbed]
    spread = math.log10(max(rms) / min(rms)) if len(rms) > 1 else None
    findings = _findings(params, frontier, wheres, spread, absorbed, unused, vanishing)
    table = Table.from_dicts(
        "parameters",
        [
            {
                "name": p.name,
                "shape": p.shape,
                "verdict": p.verdict,
                "norm": p.norm,
                "rms": p.rms,
                "mean": p.mean,
                "std": p.std,
                "max_abs": p.max_abs,
                "zero_fraction": p.zero_fraction,
            }
            for p in params
        ],
        ("name", "shape", "verdict", "norm", "rms", "mean", "std", "max_abs", "zero_fraction"),
        {
            "vanishing_threshold": health.vanishing_threshold,
            "exploding_threshold": health.exploding_threshold,
            "loss": value,
        },
    )
    frontier_table = Table.from_dicts(
        "frontier",
        [
            {
                "op": f.op,
                "module": f.module,
                "verdict": f.verdict,
                "grad_norm": f.grad_norm,
                "params": f.params,
            }
            for f in frontier
        ],
        ("op", "module", "verdict", "grad_norm", "params"),
    )
    flagged = sum(
        p.verdict not in ("ok", "frozen") and p.name not in absorbed | unused for p in params
    )
    status = recipe_status(findings)
    if status == "pass":
        lead = f"no parameter flagged: all {len(params)} receive a gradient within the thresholds."
    elif flagged:
        lead = f"{flagged} of {len(params)} parameters flagged" + (
            f"; frontier: {', '.join(f.op for f in frontier)}." if frontier else "."
        )
    else:
        lead = worst_finding(findings).message
    return GradientFlowReport(
        subject=f"{type(model).__name__}, {len(params)} parameters",
        status=status,
        lead=lead,
        findings=tuple(findings),
        tables=(table, frontier_table),
        loss=value,
        params=tuple(params),
        frontier=frontier,
        vanishing_threshold=health.vanishing_threshold,
        exploding_threshold=health.exploding_threshold,
        spread_decades=spread,
        exits=(Exit("Op-level gradient health", "tl.debug.grad_health(trace)", "grad_health"),),
        actions={"grad_health": lambda: health},
        disclosures=(
            "one backward on one batch, in train mode (dropout active, BatchNorm batch statistics)",
        ),
    )


def _findings(
    params: list[ParamGrad],
    frontier: tuple[FrontierOp, ...],
    wheres: dict[str, Where],
    spread: float | None,
    absorbed: frozenset[str] = frozenset(),
    unused: frozenset[str] = frozenset(),
    vanishing: tuple[str, ...] = (),
) -> list[Finding]:
    findings = []
    if unused:
        findings.append(
            Finding(
                "grad_unused",
                "info",
                f"{len(unused)} parameter(s) belong to modules whose output the loss never "
                f"reads (e.g. a pooler the head ignores), so they get no gradient by design "
                f"({', '.join(sorted(unused)[:6])}{' ...' if len(unused) > 6 else ''}).",
                remedy="nothing to fix if unused on purpose; leave them out of the optimizer "
                "to save memory.",
                fields={"params": sorted(unused)},
            )
        )
    if vanishing:
        findings.append(
            Finding(
                "grad_vanishing",
                "warning",
                f"the gradient shrinks layer by layer toward the input: "
                f"{', '.join(vanishing[:6])} get 10x or less of the last layer's gradient RMS, "
                f"{VANISHING_DEPTH_DECADES:g}+ decades at the first: the early layers barely "
                "train.",
                remedy="use ReLU/GELU instead of sigmoid/tanh between layers, add "
                "normalisation or residual connections, or a better-scaled init.",
                fields={"params": list(vanishing)},
            )
        )
    params = [p for p in params if p.name not in unused]
    expected = [p.name for p in params if p.name in absorbed and p.verdict in ("vanishing", "zero")]
    if expected:
        findings.append(
            Finding(
                "grad_expected_small",
                "info",
                f"{len(expected)} bias(es) get a ~0 gradient by construction: they feed a "
                "BatchNorm / InstanceNorm that subtracts them again, or shift every attention "
                "score of a query alike (a key bias), which the softmax cancels; expected, not a "
                f"fault ({', '.join(expected[:6])}{' ...' if len(expected) > 6 else ''}).",
                remedy="nothing to fix; bias=False on these layers saves the parameters.",
                fields={"params": expected},
            )
        )
    params = [p for p in params if p.name not in expected]
    culprit = next((f for f in frontier if f.verdict == "zero"), None)
    groups: dict[str, tuple[Severity, str, str]] = {
        "disconnected": (
            "warning",
            "receive no gradient (None): they are not in the graph of the loss",
            "check that forward uses these layers and that nothing "
            "detaches or casts their output to an integer type.",
        ),
        "zero": (
            "warning",
            "receive an all-zero gradient (a dead layer or its upstream cone)",
            "start at the frontier op: a ReLU whose inputs are all negative, a mask or a "
            "multiply by zero.",
        ),
        "vanishing": (
            "warning",
            "receive a vanishing gradient",
            "check initialisation and normalisation between these layers and the loss.",
        ),
        "exploding": (
            "critical",
            "receive an exploding gradient",
            "lower the learning rate, "
            "check the inputs' scale, clip with clip_grad_norm_(..., "
            "error_if_nonfinite=True).",
        ),
        "nonfinite": (
            "critical",
            "receive NaN/Inf gradients",
            "run tl.debug.nonfinite_origin to find where the non-finite value is born.",
        ),
    }
    for verdict, (severity, what, remedy) in groups.items():
        names = [p.name for p in params if p.verdict == verdict]
        if not names:
            continue
        where = wheres[culprit.op] if verdict == "zero" and culprit is not None else None
        tip = (
            f" The cone starts at {culprit.op} in {culprit.module or 'the root module'}."
            if where is not None and culprit is not None
            else ""
        )
        findings.append(
            Finding(
                f"grad_{verdict}",
                severity,
                f"{len(names)} parameter(s) {what}: {', '.join(names[:6])}"
                f"{' ...' if len(names) > 6 else ''}.{tip}",
                where=where,
                remedy=remedy,
                fields={"params": names},
            )
        )
    if spread is not None and spread > SPREAD_DECADES_MAX:
        findings.append(
            Finding(
                "grad_spread",
                "info",
                f"gradient RMS spans {spread:.1f} decades across parameters (more than "
                f"{SPREAD_DECADES_MAX:g}): one learning rate cannot suit them all.",
                remedy="check initialisation and normalisation; per-layer learning rates or Adam "
                "hide, not fix, this.",
                fields={"spread_decades": spread},
            )
        )
    return findings
