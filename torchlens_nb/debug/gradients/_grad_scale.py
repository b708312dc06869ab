"""Loss scaling of a logged backward: the scale the caller declares, or the evidence of one.

A GradScaler multiplies the loss before backward, so every recorded gradient is scaled. The
scale comes from the caller (``grad_scale=`` / ``grad_scales={bwd: scale}``: provenance
``explicit``, or ``gradscaler`` when the scaler object itself is passed) or, with no
declaration, the backward's own evidence decides: when it was seeded with ``gradient=`` values
other than 1, or its root node (the last op applied to the loss, outside the trace) multiplies
or divides by a constant (what ``scaler.scale(loss)``, ``loss * w`` and ``loss / k`` build), the
gradients carry a factor nobody declared and the provenance is ``unknown``. Without that
evidence they are the gradients of the loss given to ``trace.backward`` (``unscaled``). Scaling
applied INSIDE the captured forward is an op of the model, not loss scaling, and is not seen.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch

from ..._validate import check_number, is_int, is_number
from ...errors import DiagnosticArgumentError
from ...report._gradients import ScaleProvenance

if TYPE_CHECKING:
    from ...capture import BackwardPass, GradFnFire

_SCALING_NODES = frozenset({"MulBackward0", "MulBackward1", "DivBackward0", "DivBackward1"})
"""Root nodes that multiply the loss by a constant (GradScaler.scale builds MulBackward0)."""


def _scale_value(name: str, value: Any) -> tuple[float, ScaleProvenance]:
    provenance: ScaleProvenance
    if callable(getattr(value, "get_scale", None)):
        scale, provenance = value.get_scale(), "gradscaler"
    elif is_number(value):
        scale, provenance = value, "explicit"
    else:
        raise DiagnosticArgumentError(
            f"{name} must be a number or a GradScaler, got {type(value).__name__}; pass "
            "scaler.get_scale() (read before scaler.update())."
        )
    return check_number(
        name, float(scale), low=0, low_open=True, expect="finite and > 0"
    ), provenance


def declared_scale(
    grad_scale: Any, grad_scales: Any, bwd: int, num_passes: int
) -> tuple[float, ScaleProvenance] | None:
    """The caller's scale for pass ``bwd`` and its provenance, or None when none was declared.

    Raises:
        DiagnosticArgumentError: both arguments given, a key that is not a pass index, or a
            scale that is not a finite positive number (or a GradScaler).
    """
    if grad_scale is not None and grad_scales is not None:
        raise DiagnosticArgumentError(
            "pass grad_scale= (one factor for every pass) or grad_scales={bwd: scale}, not both."
        )
    if grad_scale is not None:
        return _scale_value("grad_scale", grad_scale)
    if grad_scales is None:
        return None
    if not isinstance(grad_scales, Mapping):
        raise DiagnosticArgumentError(
            f"grad_scales must be a mapping {{bwd: scale}}, got {type(grad_scales).__name__}."
        )
    for key in grad_scales:
        if not is_int(key) or not 0 <= key < num_passes:
            raise DiagnosticArgumentError(
                f"grad_scales keys are backward indices 0..{num_passes - 1}, got {key!r}."
            )
    if bwd not in grad_scales:
        return None
    return _scale_value(f"grad_scales[{bwd}]", grad_scales[bwd])


def seed_probe(root: GradFnFire | None) -> list[torch.Tensor]:
    """Device tensors for the one batched host read: ``[any seed element != 1]``, plus the
    factor ``sum(grad sent to the loss) / sum(seed)`` when the root (a node outside the trace)
    multiplies or divides the loss by a constant. Empty when the root saved no gradient."""
    if root is None or not root.grad_outputs or not isinstance(root.grad_outputs[0], torch.Tensor):
        return []
    seed = root.grad_outputs[0]
    probe = [(seed != 1).any()]
    sent = [g for g in root.grad_inputs or () if isinstance(g, torch.Tensor)]
    if not root.labels and root.node in _SCALING_NODES and len(sent) == 1:
        probe.append(sent[0].float().sum() / seed.float().sum())
    return probe


def scaling_evidence(record: BackwardPass, probe: list[float]) -> str | None:
    """The evidence of loss scaling in words (the host values of :func:`seed_probe`), or None."""
    notes = []
    if probe and probe[0]:
        notes.append("trace.backward was seeded with gradient= values other than 1")
    if len(probe) == 2:
        notes.append(
            f"the loss was multiplied by {probe[1]:.6g} ({record.fires[0].node}) "
            "right before backward"
        )
    return "; ".join(notes) or None
