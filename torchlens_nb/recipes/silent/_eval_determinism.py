"""``eval_determinism``: the model in ``eval()`` gives the same output twice on one batch.

Two forward passes in eval mode under ``torch.no_grad()``, on the caller's model, with the RNG
left to run between them (restored afterwards): randomness still active in eval (a dropout
called as ``F.dropout(x, p)``, whose ``training`` argument defaults to True; a sampling layer
that ignores ``self.training``) makes them differ. A forward hook on every module records
float64 sums of its input and output in each pass: the first module (in completion order)
whose output differs is named, or its parent when its input already differed (the randomness
ran in the parent's own ``forward``). Cost: two forwards. Cannot see: randomness that does not change the output's sum in
the named module (the outputs themselves are compared exactly), and nondeterministic kernels
are reported the same way (on CUDA, atomics can differ in the last bits: a ``warning`` below
:data:`SMALL_DIFF` relative, ``critical`` above).
"""

from __future__ import annotations

from functools import partial
from typing import Any

import torch
from torch import nn

from ..._hooks import add_forward_hooks
from ..._undo import Undo, undoing
from ..._validate import MAX_REPEATS, check_int
from ...capture import iter_tensors
from ...debug._isolation import keeps_torch_switches
from ...report import Finding, Table, Where
from ...report._recipes_data import recipe_status, worst_finding
from ...report._recipes_silent import EvalDeterminismReport
from .._batches import call_model, check_model, first_batch, model_device, to_device
from .._model_state import preserved

SMALL_DIFF = 1e-5
"""Differences below this fraction of the output's largest magnitude read as kernel noise."""


@keeps_torch_switches
def eval_determinism(model: nn.Module, inputs: Any, *, passes: int = 2) -> EvalDeterminismReport:
    """Run ``model`` in eval mode ``passes`` times on ``inputs`` and compare the outputs bitwise.

    Args:
        model: the caller's model; its train/eval flags, buffers, gradients and the global RNG
            are restored afterwards.
        inputs: what ``model(inputs)`` takes (a loader: its first batch, used whole).
        passes: forward passes to compare (>= 2).

    Returns:
        ``fail`` with ``eval_not_deterministic`` (critical) when outputs differ by more than
        :data:`SMALL_DIFF` of their magnitude, ``warn`` below it, else ``pass``.
    """
    model = check_model(model)
    check_int(
        "passes",
        passes,
        low=2,
        high=MAX_REPEATS,
        expect=f"in [2, {MAX_REPEATS}]",
        hint="two passes are enough",
    )
    inputs = to_device(first_batch(inputs, what="inputs"), model_device(model))
    sums: list[dict[str, tuple[float, float]]] = []
    order: list[str] = []
    outputs: list[list[torch.Tensor]] = []
    with preserved(model, mode="eval"), torch.no_grad():
        for _ in range(passes):
            seen: dict[str, tuple[float, float]] = {}
            outputs.append(
                undoing(partial(_pass, model, inputs, seen, order if not sums else None))
            )
            sums.append(seen)
    diff, scale = _largest_difference(outputs)
    first = _origin(order, sums)
    findings = [] if diff == 0.0 else [_finding(diff, scale, first, passes)]
    rows = [(n, sums[0][n][1], *(s.get(n, (None, None))[1] for s in sums[1:])) for n in order]
    return EvalDeterminismReport(
        subject=f"{type(model).__name__} in eval(), {passes} passes",
        status=recipe_status(findings),
        lead=worst_finding(findings).message
        if findings
        else f"{passes} eval passes gave bitwise the same output.",
        findings=tuple(findings),
        tables=(
            Table(
                "module_output_sums",
                ("module", *(f"pass_{k}" for k in range(passes))),
                tuple(rows),
                attrs={"sum": "float64 sum of each module's output"},
            ),
        ),
        disclosures=(
            "Compared: the model's outputs, exactly, and each module's output sum; the RNG ran "
            "freely between the passes and was restored afterwards.",
        ),
        passes=passes,
        max_abs_diff=diff,
        first_module=first,
    )


def _pass(
    model: nn.Module,
    inputs: Any,
    seen: dict[str, tuple[float, float]],
    order: list[str] | None,
    undo: Undo,
) -> list[torch.Tensor]:
    """One forward with every module's output recorded into ``seen`` (and its order into
    ``order``), the hooks' removal registered in ``undo`` before each hook."""
    for name, module in model.named_modules():
        add_forward_hooks(undo, module, post=_recorder(name, seen, order))
    return [t.detach().clone() for t in iter_tensors(call_model(model, inputs))]


def _recorder(name: str, seen: dict[str, tuple[float, float]], order: list[str] | None) -> Any:
    def record(_module: nn.Module, args: Any, output: Any) -> None:
        if name in seen:
            return
        seen[name] = (_sum(args), _sum(output))
        if order is not None:
            order.append(name)

    return record


def _sum(value: Any) -> float:
    """float64 sum of the floating tensors in ``value`` (0.0 when none)."""
    return float(
        sum(t.detach().double().sum() for t in iter_tensors(value) if t.is_floating_point())
    )


def _origin(order: list[str], sums: list[dict[str, tuple[float, float]]]) -> str | None:
    """Where the passes first part: the first module (in completion order) whose output
    differs; when its input already differed, the randomness ran in its parent's own code
    (e.g. ``F.dropout`` in the parent's ``forward``)."""
    first = next(
        (n for n in order if any(s.get(n, (0, 0))[1] != sums[0][n][1] for s in sums[1:])), None
    )
    if first is None:
        return None
    if any(s.get(first, (0, 0))[0] != sums[0][first][0] for s in sums[1:]):
        return first.rpartition(".")[0]
    return first


def _largest_difference(outputs: list[list[torch.Tensor]]) -> tuple[float, float]:
    """(largest |a - b| between the first pass and any other, largest |a| of the first)."""
    diff, scale = 0.0, 0.0
    for first in outputs[0]:
        if first.is_floating_point() and first.numel():
            scale = max(scale, float(first.abs().max()))
    for other in outputs[1:]:
        for a, b in zip(outputs[0], other):
            if a.shape != b.shape:
                return float("inf"), scale
            if not torch.equal(a, b):
                delta = (a.double() - b.double()).abs()
                diff = max(diff, float(delta.nan_to_num(float("inf")).max()))
    return diff, scale


def _finding(diff: float, scale: float, first: str | None, passes: int) -> Finding:
    is_small = scale > 0 and diff <= SMALL_DIFF * scale
    where = f" The passes part in module {first or '(the root)'}." if first is not None else ""
    return Finding(
        "eval_not_deterministic",
        "warning" if is_small else "critical",
        f"{passes} passes in eval() on the same batch differ by up to {diff:.3g} "
        f"(output magnitude {scale:.3g}): randomness is still active in eval.{where}",
        where=Where(module=first) if first is not None else None,
        remedy="Pass training=self.training to F.dropout (its default is True), use "
        "nn.Dropout modules, and make sampling layers read self.training; a difference in the "
        "last bits only can be a nondeterministic kernel (torch.use_deterministic_algorithms).",
        fields={"max_abs_diff": diff, "output_scale": scale, "first_module": first},
    )
