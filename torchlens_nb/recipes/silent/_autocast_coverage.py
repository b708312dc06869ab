"""``autocast_coverage``: ops that escape autocast and run in float32 inside its region.

One forward of the caller's model under ``torch.autocast(device_type, dtype)`` and
``torch.no_grad()``, watched by a ``TorchDispatchMode``: the mode sits below autocast, so it
sees each op with the dtypes autocast gave its inputs. An op of autocast's lower-precision list
(:data:`ELIGIBLE`: matmuls, linear, convolutions, attention) whose floating inputs are float32
ran outside autocast's cast: a layer under ``autocast(enabled=False)``, a ``custom_fwd``
with ``cast_inputs=torch.float32``, or a kernel called in a way autocast does not see. Each is
named by the innermost module running it (forward pre-hooks). The finding
``ops_escaped_autocast`` is a warning: some escapes are on purpose (a float32 loss head).

Cost: one forward with a Python dispatch mode (a few microseconds per op). Cannot see: ops
outside :data:`ELIGIBLE` (autocast keeps or widens those), and code paths the batch does not
take.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from ..._hooks import add_forward_hooks
from ..._undo import Undo, undoing
from ...debug._isolation import keeps_torch_switches
from ...errors import DiagnosticArgumentError
from ...report import Finding, Table, Where
from ...report._recipes_data import recipe_status, worst_finding
from ...report._recipes_silent import AutocastCoverageReport
from .._batches import call_model, check_model, first_batch, model_device, to_device
from .._model_state import preserved

ELIGIBLE = frozenset(
    {
        "mm",
        "addmm",
        "bmm",
        "baddbmm",
        "addbmm",
        "matmul",
        "linear",
        "convolution",
        "_convolution",
        "conv1d",
        "conv2d",
        "conv3d",
        "_scaled_dot_product_flash_attention_for_cpu",
        "_scaled_dot_product_efficient_attention",
        "_scaled_dot_product_flash_attention",
    }
)
"""aten ops (overload packet names) that CPU and CUDA autocast run in the lower precision."""


class _Watch(TorchDispatchMode):
    """Counts eligible ops per module and dtype of their floating inputs."""

    def __init__(self, stack: list[str]) -> None:
        super().__init__()
        self.stack = stack
        self.eligible = 0
        self.escaped: Counter[tuple[str, str]] = Counter()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = func.overloadpacket.__name__
        if name in ELIGIBLE:
            self.eligible += 1
            floats = [a for a in args if isinstance(a, torch.Tensor) and a.is_floating_point()]
            if floats and all(a.dtype == torch.float32 for a in floats):
                self.escaped[(self.stack[-1], name)] += 1
        return func(*args, **(kwargs or {}))


@keeps_torch_switches
def autocast_coverage(
    model: nn.Module,
    inputs: Any,
    *,
    device_type: str | None = None,
    dtype: torch.dtype = torch.bfloat16,
) -> AutocastCoverageReport:
    """Run one forward under autocast and name the eligible ops that ran in float32.

    Args:
        model: the caller's model (eval mode for the pass; flags, buffers and RNG restored).
        inputs: what ``model(inputs)`` takes (a loader: its first batch).
        device_type: autocast's device type; default: the model's device.
        dtype: the autocast dtype (``torch.bfloat16`` or ``torch.float16``).

    Returns:
        ``warn`` with ``ops_escaped_autocast`` naming each module and op, else ``pass``.
    """
    model = check_model(model)
    if device_type is not None and not isinstance(device_type, str):
        raise DiagnosticArgumentError(
            f"device_type must be autocast's device type as a string ('cpu', 'cuda') or None for "
            f"the model's device, got {type(device_type).__name__} {device_type!r}."
        )
    if device_type is not None and not _autocast_knows(device_type):
        raise DiagnosticArgumentError(
            f"device_type={device_type!r} is not a device type torch.autocast runs on; pass "
            "'cpu' or 'cuda' (the type alone, no index), or None for the model's device."
        )
    if dtype not in (torch.bfloat16, torch.float16):
        raise DiagnosticArgumentError(
            f"dtype must be torch.bfloat16 or torch.float16 (the autocast dtype), got {dtype!r}."
        )
    device = model_device(model)
    device_type = device_type or (device.type if device is not None else "cpu")
    inputs = to_device(first_batch(inputs, what="inputs"), device)
    stack = ["(root)"]
    watch = _Watch(stack)

    def run(undo: Undo) -> None:
        for name, module in model.named_modules():
            if name:
                add_forward_hooks(undo, module, pre=_enter(stack, name), post=_leave(stack))
        with preserved(model, mode="eval"), torch.no_grad():
            with torch.autocast(device_type, dtype=dtype), watch:
                call_model(model, inputs)

    undoing(run)
    escaped = sorted(watch.escaped.items())
    findings = [_finding(escaped, dtype)] if escaped else []
    dtype_name = str(dtype).removeprefix("torch.")
    status = recipe_status(findings)
    if not watch.eligible:
        lead = (
            "no op of autocast's lower-precision list ran (no matmul, linear, convolution or "
            "attention): there was nothing to judge."
        )
        status = "inconclusive"
    elif findings:
        lead = worst_finding(findings).message
    else:
        lead = f"all {watch.eligible} eligible op(s) ran in {dtype_name} under autocast."
    return AutocastCoverageReport(
        subject=f"{type(model).__name__} under autocast({device_type}, {dtype_name})",
        status=status,
        lead=lead,
        findings=tuple(findings),
        tables=(
            Table(
                "float32_ops",
                ("module", "op", "count"),
                tuple((module, op, count) for (module, op), count in escaped),
            ),
        ),
        disclosures=(
            "One forward in eval mode; ops outside autocast's lower-precision list (matmuls, "
            "linear, convolutions, attention) are not judged.",
        ),
        dtype=dtype_name,
        eligible_ops=watch.eligible,
        float32_ops=sum(count for _, count in escaped),
    )


def _enter(stack: list[str], name: str) -> Any:
    def enter(_module: nn.Module, _args: Any) -> None:
        stack.append(name)

    return enter


def _leave(stack: list[str]) -> Any:
    def leave(_module: nn.Module, _args: Any, _output: Any) -> None:
        if len(stack) > 1:
            stack.pop()

    return leave


def _finding(escaped: list[tuple[tuple[str, str], int]], dtype: torch.dtype) -> Finding:
    modules = sorted({module for (module, _), _ in escaped})
    dtype_name = str(dtype).removeprefix("torch.")
    return Finding(
        "ops_escaped_autocast",
        "warning",
        f"{sum(c for _, c in escaped)} op(s) that autocast runs in {dtype_name} ran in float32 "
        f"inside the autocast region, in {len(modules)} module(s): {', '.join(modules[:5])}"
        + (" ..." if len(modules) > 5 else "")
        + ". They cost float32 speed and memory and see different numerics than the rest.",
        where=Where(module=modules[0]),
        remedy="Remove the autocast(enabled=False) block or the explicit .float() casts in "
        "those modules, or keep them if float32 is intended there (a loss head).",
        fields={"modules": modules[:20], "ops": [[m, op, c] for (m, op), c in escaped[:50]]},
    )


def _autocast_knows(device_type: str) -> bool:
    """Whether ``torch.autocast(device_type)`` has a backend (torch raises for an unknown or
    empty device string)."""
    try:
        return bool(torch.amp.is_autocast_available(device_type))
    except RuntimeError:
        return False
