"""What the per-step invariants share: the user's declarations, version counters, and findings
that collapse.

The invariants (``_roster``, ``_fresh_grads``, ``_step_moves``, ``_writes``, ``_frozen``,
``_replicas``) run by default: each reads host metadata at the sites the session already has
(no tensor value, no device access, no host sync) except where its module says otherwise.

Version counters. Every in-place write through a tensor (an optimizer's foreach update, an
``nn.init`` call, ``with torch.no_grad(): p.copy_(...)``, ``grad += g`` in ``AccumulateGrad``)
bumps ``tensor._version``; reading it costs about 0.1 us per parameter. A write through
``.data`` does NOT bump it (``p.data.add_(1)`` leaves ``p._version`` as it was: measured on
torch 2.13). Each check states what that hides.

A check reports each invariant as one collapsed finding (:class:`~._tally.Tally`: the first
occurrence's fields, the count, the first and last attempt) and applies its action on the first
occurrence only, so a loop that breaks an invariant on every step warns once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from ...errors import DiagnosticArgumentError
from ...report import Finding, Where
from ...report._base import Severity
from ...report._checks import Action
from ..session._check import Check
from ..session._params import Roster
from ..session._tally import Tally


@dataclass
class Declared:
    """What the user declared legitimate (``session.expect_*``): the invariants skip it."""

    frozen: dict[int, tuple[str, torch.Tensor]] = field(default_factory=dict)
    """``id(param)`` -> (name, tensor): parameters that must not change."""
    unmoved: set[int] = field(default_factory=set)
    """``id(param)`` of parameters an accepted step may leave unchanged (masked updates)."""
    carries_grads: bool = False
    """The loop keeps gradients across optimizer steps on purpose (no fresh-gradients check)."""


def declared_params(params: Any, what: str) -> list[torch.Tensor]:
    """The tensors of ``params`` (a tensor, a module, or an iterable of tensors and modules,
    e.g. ``[m.base for m in lora_layers]``), checked."""
    if isinstance(params, torch.nn.Module):
        return list(params.parameters())
    if isinstance(params, torch.Tensor):
        return [params]
    items = list(params) if isinstance(params, Iterable) else [params]
    tensors: list[torch.Tensor] = []
    bad = []
    for item in items:
        if isinstance(item, torch.nn.Module):
            tensors.extend(item.parameters())
        elif isinstance(item, torch.Tensor):
            tensors.append(item)
        else:
            bad.append(type(item).__name__)
    if bad or not items:
        raise DiagnosticArgumentError(
            f"{what} takes parameters: a module, a tensor or an iterable of them, got "
            f"{bad[0] if bad else 'nothing'}; e.g. {what}(model.backbone)."
        )
    return tensors


def versions(tensors: list[torch.Tensor], indices: Iterable[int]) -> list[int]:
    """``_version`` of ``tensors[i]`` for each index (host metadata)."""
    return [tensors[i]._version for i in indices]


def names(roster: Roster, indices: Iterable[int]) -> list[str]:
    return [roster.infos[i].name for i in indices]


def listing(items: list[str], limit: int = 5) -> str:
    """``a, b, c`` with ``... (N in all)`` past ``limit``."""
    shown = ", ".join(items[:limit])
    return shown + (f" ... ({len(items)} in all)" if len(items) > limit else "")


class InvariantCheck(Check):
    """A check whose findings are :class:`Tally` s, each acted on at its first occurrence."""

    def __init__(
        self, roster: Roster, action: Action, options: Mapping[str, Any], declared: Declared
    ) -> None:
        super().__init__(roster, action, options)
        self.declared = declared
        self._tallies: list[Tally] = []

    def tally(
        self,
        code: str,
        severity: Severity,
        message: Callable[[Mapping[str, Any]], str],
        remedy: str,
    ) -> Tally:
        """A new collapsed finding of this check."""
        tally = Tally(code, severity, message, remedy=remedy)
        self._tallies.append(tally)
        return tally

    def occur(
        self,
        tally: Tally,
        attempt: int | None,
        global_step: int | None,
        fields: Mapping[str, Any],
        where: Where | None = None,
    ) -> Finding | None:
        """Record one occurrence; on the first, apply the action (return it to be raised)."""
        is_first = tally.count == 0
        tally.add(attempt, global_step, fields, where)
        finding = tally.finding()
        return self.act(finding) if is_first and finding is not None else None

    def findings(self) -> list[Finding]:
        found = (tally.finding() for tally in self._tallies)
        return [f for f in found if f is not None]
