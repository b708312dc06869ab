"""The doctor's ``mechanical_belt`` row: which of the torch callables a capture is meant to see
actually reach its recorder, measured in this process.

:data:`BELT` is a fixed list of torch functions, ``Tensor`` methods, operators and
``nn.functional`` calls, each run once on tiny tensors inside its own submodule of one small
model, under one ``tl.trace``. A callable *reaches the recorder* when the trace holds an op of its
expected name in its submodule. Each entry looks its callable up when it runs (``torch.tanh``,
not a reference taken at import), so a library that replaced one (a wrapper that calls the
original with torch-function handling off) is measured as it is now: that entry does not reach
the recorder, and the row names it. Cost: one capture of 62 ops (the 44 entries and the indexing
some of them need) on ``(2, 4)`` tensors: 0.18-0.31 s per doctor call on the loaded 2-core
development machine.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn

from ...capture import trace

Tensors = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]
"""``(x, y, w, ids)``: ``(2, 4)`` floats, ``(2, 4)`` floats, ``(4, 4)`` floats, ``(2, 3)`` ids."""


@dataclass(frozen=True)
class BeltEntry:
    """One probed callable."""

    spelling: str
    """How user code writes it, e.g. ``"torch.tanh"``, ``"Tensor.relu"``, ``"x + y"``."""
    op: str
    """The op name the trace records for it (the capture's normalised name)."""
    call: Callable[[Tensors], Any]


def _f(spelling: str, op: str, call: Callable[[Tensors], Any]) -> BeltEntry:
    return BeltEntry(spelling, op, call)


BELT: tuple[BeltEntry, ...] = (
    # torch functions
    _f("torch.add", "add", lambda t: torch.add(t[0], t[1])),
    _f("torch.matmul", "matmul", lambda t: torch.matmul(t[0], t[2])),
    _f("torch.cat", "cat", lambda t: torch.cat([t[0], t[1]])),
    _f("torch.stack", "stack", lambda t: torch.stack([t[0], t[1]])),
    _f("torch.tanh", "tanh", lambda t: torch.tanh(t[0])),
    _f("torch.exp", "exp", lambda t: torch.exp(t[0])),
    _f("torch.where", "where", lambda t: torch.where(t[2] > 0, t[2], 0.0)),
    _f("torch.softmax", "softmax", lambda t: torch.softmax(t[0], dim=-1)),
    _f("torch.einsum", "einsum", lambda t: torch.einsum("ij,jk->ik", t[0], t[2])),
    _f("torch.zeros_like", "zeros_like", lambda t: torch.zeros_like(t[0])),
    _f("torch.arange", "arange", lambda t: torch.arange(4)),
    _f("torch.bmm", "bmm", lambda t: torch.bmm(t[2][None], t[2][None])),
    # Tensor methods
    _f("Tensor.relu", "relu", lambda t: t[0].relu()),
    _f("Tensor.sum", "sum", lambda t: t[0].sum(-1)),
    _f("Tensor.mean", "mean", lambda t: t[0].mean()),
    _f("Tensor.view", "view", lambda t: t[0].view(-1)),
    _f("Tensor.reshape", "reshape", lambda t: t[0].reshape(4, 2)),
    _f("Tensor.transpose", "transpose", lambda t: t[0].transpose(0, 1)),
    _f("Tensor.unsqueeze", "unsqueeze", lambda t: t[0].unsqueeze(0)),
    _f("Tensor.masked_fill", "masked_fill", lambda t: t[0].masked_fill(t[1] > 0, 0.0)),
    _f("Tensor.to", "to", lambda t: t[0].to(torch.float64)),
    _f("Tensor.clone", "clone", lambda t: t[0].clone()),
    _f("Tensor.add_", "add_", lambda t: t[0].clone().add_(1.0)),
    _f("Tensor.T", "T", lambda t: t[2].T),
    # operators
    _f("x + y", "add", lambda t: t[0] + t[1]),
    _f("x - y", "sub", lambda t: t[0] - t[1]),
    _f("x * y", "mul", lambda t: t[0] * t[1]),
    _f("x / y", "div", lambda t: t[0] / (t[1].abs() + 1)),
    _f("x @ w", "matmul", lambda t: t[0] @ t[2]),
    _f("x ** 2", "pow", lambda t: t[0] ** 2),
    _f("-x", "neg", lambda t: -t[0]),
    _f("x > y", "gt", lambda t: t[0] > t[1]),
    _f("x[0]", "getitem", lambda t: t[0][0]),
    # nn.functional
    _f("F.linear", "linear", lambda t: F.linear(t[0], t[2])),
    _f("F.relu", "relu", lambda t: F.relu(t[0])),
    _f("F.gelu", "gelu", lambda t: F.gelu(t[0])),
    _f("F.silu", "silu", lambda t: F.silu(t[0])),
    _f("F.softmax", "softmax", lambda t: F.softmax(t[0], dim=-1)),
    _f("F.layer_norm", "layer_norm", lambda t: F.layer_norm(t[0], (4,))),
    _f("F.dropout", "dropout", lambda t: F.dropout(t[0], 0.5, training=False)),
    _f("F.embedding", "embedding", lambda t: F.embedding(t[3], t[2])),
    _f("F.conv1d", "conv1d", lambda t: F.conv1d(t[0].T[None], t[2][:, :, None])),
    _f("F.cross_entropy", "cross_entropy", lambda t: F.cross_entropy(t[0], t[3][:, 0])),
    _f(
        "F.scaled_dot_product_attention",
        "scaled_dot_product_attention",
        lambda t: F.scaled_dot_product_attention(t[0][None], t[1][None], t[1][None]),
    ),
)
"""The probed callables, in run order (44: 12 torch functions, 12 Tensor methods, 9 operators,
11 nn.functional calls)."""


class _Probe(nn.Module):
    def __init__(self, entry: BeltEntry) -> None:
        super().__init__()
        self.entry = entry
        self.error: str | None = None

    def forward(self, tensors: Tensors) -> Any:
        try:
            return self.entry.call(tensors)
        except Exception as error:  # a replaced callable that raises is unreached, not fatal
            self.error = type(error).__name__
            return None


class _Belt(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.probes = nn.ModuleList(_Probe(entry) for entry in BELT)

    def forward(self, x: torch.Tensor, y: torch.Tensor, w: torch.Tensor, ids: torch.Tensor) -> Any:
        return [probe((x, y, w, ids)) for probe in self.probes]


def unreached() -> tuple[str, ...]:
    """The spellings of :data:`BELT` entries whose op the capture did not record, in order;
    an entry that raised says so (``"torch.tanh (raised TypeError)"``)."""
    generator = torch.Generator().manual_seed(0)
    x, y, w = (torch.randn(shape, generator=generator) for shape in ((2, 4), (2, 4), (4, 4)))
    ids = torch.tensor([[0, 1, 2], [3, 2, 1]])
    belt = _Belt()
    with torch.no_grad():
        run = trace(belt, (x, y, w, ids), save=False)
    seen = {(op.module, op.func) for op in run}
    probes = [cast(_Probe, probe) for probe in belt.probes]
    return tuple(
        probe.entry.spelling + (f" (raised {probe.error})" if probe.error else "")
        for index, probe in enumerate(probes)
        if (f"probes.{index}", probe.entry.op) not in seen
    )


__all__ = ["BELT", "BeltEntry", "unreached"]
