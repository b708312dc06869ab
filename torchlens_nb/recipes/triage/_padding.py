"""``padding_dependency``: does the output change when more padding is appended?

A model that reads padded sequences correctly (packs them by length, masks the pad keys, or
pools with the mask) gives every sequence the same output whatever padding follows its last
real token. A classifier that reads the RNN state at the last position of the padded tensor
(``states[:, -1]``) reads the state after the padding instead, and its output changes when the
padding grows. The test: find the token-id tensor of the input (integer, 2-D, rows of real ids
then a run of one pad id), append ``EXTRA_PADS`` pad columns to it (and 0 columns to every
input of the same (batch, length) shape: attention masks, token types), run the model on both
in eval mode under no_grad, and compare the outputs of each sequence.

Runs only when the batch holds right-padded ids (triage adds the row then); a model that
cannot take the longer input (fixed position tables) gives a skipped row, never a finding.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ...errors import DiagnosticArgumentError
from ...report import Finding
from ...report._recipes_data import RecipeReport, recipe_status
from .._batches import call_model, primary_output, split_batch
from .._model_state import preserved

EXTRA_PADS = 3
"""Pad columns appended: enough to move a state read at the last position."""
CHANGE_TOLERANCE = 1e-4
"""Outputs that move by more than 1e-4 of their scale depend on the padding (float32 packed
and masked models agree to ~1e-6)."""


def padded_ids(inputs: Any) -> tuple[str | int, int] | None:
    """Where the right-padded token ids are in ``inputs`` and their pad id: an integer 2-D
    tensor (a dict entry or the input itself) whose rows end in a run of one value that
    some rows have and others lack or have shorter (None when there is none)."""
    candidates: list[tuple[str | int, torch.Tensor]]
    if isinstance(inputs, torch.Tensor):
        candidates = [(0, inputs)]
    elif isinstance(inputs, dict):
        candidates = [(k, v) for k, v in inputs.items() if isinstance(v, torch.Tensor)]
    else:
        return None
    for key, ids in candidates:
        if ids.dim() != 2 or ids.is_floating_point() or ids.dtype == torch.bool:
            continue
        if ids.shape[1] < 2 or int(ids.max()) <= 1:
            continue  # a mask, not ids
        pad = int(ids[:, -1].min())
        runs = _trailing_runs(ids, pad)
        inside = (ids == pad).sum(dim=1) - runs  # pad ids before the trailing run
        if (
            int((runs >= 2).sum()) * 4 >= ids.shape[0]  # a quarter of the rows padded by 2+
            and int(runs.min()) != int(runs.max())
            and not bool(inside.any())  # the pad id never occurs inside a sequence
        ):
            return key, pad
    return None


def _trailing_runs(ids: torch.Tensor, pad: int) -> torch.Tensor:
    is_pad = (ids == pad).flip(1).int()
    return is_pad.cumprod(dim=1).sum(dim=1)


def _extended(inputs: Any, key: str | int, pad: int) -> Any:
    if isinstance(inputs, torch.Tensor):
        return torch.cat([inputs, inputs.new_full((inputs.shape[0], EXTRA_PADS), pad)], 1)
    ids = inputs[key]
    out = {}
    for k, v in inputs.items():
        if k == key:
            out[k] = torch.cat([v, v.new_full((v.shape[0], EXTRA_PADS), pad)], 1)
        elif isinstance(v, torch.Tensor) and v.dim() == 2 and v.shape == ids.shape:
            out[k] = torch.cat([v, v.new_zeros((v.shape[0], EXTRA_PADS))], 1)
        else:
            out[k] = v
    return out


def padding_dependency(model: nn.Module, batch: Any) -> RecipeReport:
    """The ``padding_dependency`` row: a critical ``reads_padding`` finding when the output of
    a padded sequence changes with ``EXTRA_PADS`` more pad tokens.

    Raises:
        DiagnosticArgumentError: no right-padded ids in the batch, or the model cannot take the
            longer input (triage shows either as a skipped row).
    """
    inputs, _ = split_batch(batch)
    found = padded_ids(inputs)
    if found is None:
        raise DiagnosticArgumentError("the batch holds no right-padded token ids")
    key, pad = found
    longer = _extended(inputs, key, pad)
    with preserved(model, mode="eval"), torch.no_grad():
        base = primary_output(call_model(model, inputs)).detach().double()
        try:
            more = primary_output(call_model(model, longer)).detach().double()
        except Exception as exc:  # e.g. a fixed position table: this check cannot apply
            raise DiagnosticArgumentError(
                f"the model does not take {EXTRA_PADS} more pad positions ({type(exc).__name__})"
            ) from exc
    if more.shape != base.shape:
        raise DiagnosticArgumentError(
            "the output's shape follows the sequence length; only per-sequence outputs are compared"
        )
    scale = float(base.abs().max()) or 1.0
    moved = (more - base).abs().reshape(base.shape[0], -1).amax(dim=1) / scale
    changed = int((moved > CHANGE_TOLERANCE).sum())
    findings = []
    if changed:
        findings.append(
            Finding(
                "reads_padding",
                "critical",
                f"{changed} of {base.shape[0]} sequences change their output when "
                f"{EXTRA_PADS} more pad tokens (id {pad}) follow them: the model reads what "
                "comes after each sequence's last real token (e.g. the RNN state at the last "
                "padded position), not the sequence.",
                remedy="pack the sequences (nn.utils.rnn.pack_padded_sequence with their "
                "lengths) or gather the state at each sequence's length - 1; mask pads in "
                "attention and pooling.",
                fields={"changed": changed, "pad_id": pad, "max_change": float(moved.max())},
            )
        )
    status = recipe_status(findings)
    lead = (
        findings[0].message
        if findings
        else f"every sequence keeps its output with {EXTRA_PADS} more pad tokens (id {pad})."
    )
    return RecipeReport(
        subject=f"{type(model).__name__} on padded ids",
        status=status,
        lead=lead,
        findings=tuple(findings),
    )
