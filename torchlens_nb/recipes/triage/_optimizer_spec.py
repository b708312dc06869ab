"""What ``tl.recipes.triage`` reads from the optimizer it is handed, and how it rebuilds one.

Triage never steps the caller's optimizer: it trains copies of the model, so it needs a fresh
optimizer of the same kind over the copy's parameters. An instance is rebuilt from its class,
its param groups (per-group lr, weight decay, betas ...) and the constructor's signature: only
keys the constructor accepts are passed (torch 2.13's ``AdamW.defaults`` carries
``decoupled_weight_decay``, which ``AdamW.__init__`` rejects, so ``cls(groups, **defaults)``
raised). Wrappers that hold the real optimizer (accelerate's ``AcceleratedOptimizer.optimizer``,
Lightning's ``LightningOptimizer._optimizer``) are unwrapped first. The rebuild is tried once on
a scratch parameter; one that fails is :attr:`OptimizerSpec.unbuildable` (the step-size check is
then a skipped row with that reason, never a crash).

:meth:`OptimizerSpec.build` makes the optimizer for a copy whose parameters come one per group
(update_ratio's layout) in ``named_parameters`` order, each with the hyperparameters of the
caller's group that held it, and scales every group's lr (the step-size probe's smaller lr).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from ..._validate import check_number
from ...errors import DiagnosticArgumentError

Factory = Callable[[list[dict[str, Any]]], torch.optim.Optimizer]
_WRAPPED = ("optimizer", "_optimizer")
"""Attributes under which wrappers (accelerate, Lightning) keep the optimizer they wrap."""


@dataclass(frozen=True)
class OptimizerSpec:
    """The optimizer the step-size check trains with, read from what the caller handed over."""

    label: str
    """E.g. ``"AdamW lr=0.0005"``."""
    lr: float | None
    """The learning rate judged (None: a factory sets its own)."""
    family: str
    """The optimizer class name (``"AdamW"``, ``"SGD"``; ``"factory"``)."""
    make: Factory | None = None
    """``groups -> Optimizer`` for a copy's parameters, one per group in named order."""
    unbuildable: str | None = None
    """Why the optimizer could not be rebuilt (then ``make`` is None)."""
    instance: torch.optim.Optimizer | None = field(default=None, compare=False, repr=False)
    """The caller's optimizer (unwrapped), read by the setup check; never stepped."""

    def build(self, groups: list[dict[str, Any]], lr_scale: float = 1.0) -> torch.optim.Optimizer:
        """A fresh optimizer over ``groups`` with every group's lr times ``lr_scale``."""
        if self.make is None:
            raise DiagnosticArgumentError(self.unbuildable or "the optimizer cannot be rebuilt")
        optimizer = self.make(groups)
        for group in optimizer.param_groups:
            group["lr"] = group["lr"] * lr_scale
        return optimizer


def unwrap(optimizer: Any) -> Any:
    """The innermost ``torch.optim.Optimizer`` a wrapper holds (the object itself otherwise)."""
    for _ in range(8):  # wrappers nest a few deep at most
        inner = next(
            (
                getattr(optimizer, name)
                for name in _WRAPPED
                if isinstance(getattr(optimizer, name, None), torch.optim.Optimizer)
            ),
            None,
        )
        if inner is None or inner is optimizer:
            return optimizer
        optimizer = inner
    return optimizer


def _accepted(cls: type) -> tuple[set[str], bool]:
    """The keyword names ``cls.__init__`` takes besides ``params``, and whether it has **kwargs."""
    parameters = list(inspect.signature(cls).parameters.values())  # bound: no self
    names = {
        p.name
        for p in parameters[1:]  # drop params
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    }
    return names, any(p.kind is p.VAR_KEYWORD for p in parameters)


def _hyper(group: Mapping[str, Any], accepted: set[str]) -> dict[str, Any]:
    return {k: v for k, v in group.items() if k != "params" and k in accepted}


def scheduled_lr(group: dict[str, Any]) -> float:
    """The lr a group trains at once its schedule's warmup is over: its scheduler's base lr
    (``initial_lr``, which every ``torch.optim.lr_scheduler`` writes) when above the current
    one. A warmup's first step runs at a fraction of it (LambdaLR at step 0 of a 100-step
    warmup: 1/100), and judging that fraction passes an lr that diverges at its peak."""
    current = float(group["lr"])
    base = group.get("initial_lr")
    return float(base) if isinstance(base, (int, float)) and float(base) > current else current


def _from_instance(optimizer: torch.optim.Optimizer, model: nn.Module, lr: float | None) -> Factory:
    cls: Any = type(optimizer)  # a subclass: its constructor's signature is read, not assumed
    accepted, _ = _accepted(cls)
    by_param = {
        id(p): {**_hyper(group, accepted), "lr": scheduled_lr(group)}
        for group in optimizer.param_groups
        for p in group["params"]
    }
    fallback = _hyper(optimizer.defaults, accepted)
    trainable = [p for p in model.parameters() if p.requires_grad]
    per_param = [dict(by_param.get(id(p), fallback)) for p in trainable]
    if lr is not None:  # lr= overrides every group's
        for hyper in per_param:
            hyper["lr"] = lr

    def make(groups: list[dict[str, Any]]) -> torch.optim.Optimizer:
        if len(groups) != len(per_param):  # not update_ratio's one-per-parameter layout
            return cls([{**g, **per_param[0]} for g in groups])
        return cls([{**per_param[i], **g} for i, g in enumerate(groups)])

    return make


def _try_build(make: Factory, reference: dict[str, Any]) -> str | None:
    """Why ``make`` cannot serve triage's copies (None: it can): the checks build one group
    per parameter and call ``step()`` without a closure, which LBFGS refuses both."""
    scratch = [torch.zeros(2, requires_grad=True) for _ in range(2)]
    try:
        built = make([{"params": [p], **reference} for p in scratch])
    except Exception as exc:  # any constructor failure is a reason to skip, not to crash
        return f"{type(exc).__name__}: {exc}"
    closure = inspect.signature(built.step).parameters.get("closure")
    if closure is not None and closure.default is inspect.Parameter.empty:
        return f"{type(built).__name__}.step needs a closure"
    return None


def _check_holds(optimizer: torch.optim.Optimizer, model: nn.Module) -> None:
    held = {id(p) for group in optimizer.param_groups for p in group["params"]}
    if held and not held & {id(p) for p in model.parameters()}:
        raise DiagnosticArgumentError(
            f"optimizer holds {len(held)} tensors and none is a parameter of this model: pass "
            "the optimizer built over this model's parameters (model.parameters()), or its "
            "class (optimizer=torch.optim.AdamW, lr=...)."
        )


def read_optimizer(optimizer: Any, lr: Any, model: nn.Module) -> OptimizerSpec | None:
    """What the step-size check trains with, from ``triage``'s ``optimizer=`` and ``lr=``.

    An instance (or a wrapper of one) is rebuilt from its param groups and constructor; a
    class gets ``lr`` or its own default lr; a factory ``groups -> Optimizer`` sets its own lr;
    no optimizer but an ``lr`` means Adam. None when neither is given.

    Raises:
        DiagnosticArgumentError: an ``optimizer`` of another kind, an instance over another
            model's parameters, ``lr`` with a factory, a class with no default lr and no
            ``lr``, or an ``lr`` that is not > 0.
    """
    if lr is not None:
        lr = check_number("lr", lr, low=0, low_open=True)
    if optimizer is None:
        if lr is None:
            return None
        rate = lr
        return OptimizerSpec(
            f"Adam lr={rate:g}", rate, "Adam", lambda g: torch.optim.Adam(g, lr=rate)
        )
    optimizer = unwrap(optimizer)
    if isinstance(optimizer, torch.optim.Optimizer):
        _check_holds(optimizer, model)
        cls: Any = type(optimizer)
        first = optimizer.param_groups[0]
        rate = lr if lr is not None else scheduled_lr(first)
        make = _from_instance(optimizer, model, lr)
        label = f"{cls.__name__} lr={rate:g}"
        if lr is None and rate != float(first["lr"]):
            label += f" (its schedule's base lr; the first step runs at {float(first['lr']):g})"
        if len({float(g["lr"]) for g in optimizer.param_groups}) > 1 and lr is None:
            label += " (first group; each group keeps its own)"
        reason = _try_build(
            lambda groups: cls(groups), _hyper(optimizer.param_groups[0], _accepted(cls)[0])
        )
        if reason is not None:
            return OptimizerSpec(
                label,
                rate,
                cls.__name__,
                unbuildable=f"{cls.__name__} could not be rebuilt from its param groups and "
                f"constructor ({reason}); pass optimizer= a factory groups -> Optimizer",
                instance=optimizer,
            )
        return OptimizerSpec(label, rate, cls.__name__, make, instance=optimizer)
    if isinstance(optimizer, type) and issubclass(optimizer, torch.optim.Optimizer):
        cls = optimizer
        if lr is None:
            default = inspect.signature(cls).parameters.get("lr")
            if default is None or not isinstance(default.default, (int, float)):
                raise DiagnosticArgumentError(
                    f"{cls.__name__} has no default lr; pass lr= with it."
                )
            lr = float(default.default)
        rate = lr
        return OptimizerSpec(
            f"{cls.__name__} lr={rate:g}", rate, cls.__name__, lambda g: cls(g, lr=rate)
        )
    if callable(optimizer):
        if lr is not None:
            raise DiagnosticArgumentError(
                "lr= goes with an optimizer class or instance; a factory sets its own lr "
                "(e.g. lambda groups: torch.optim.SGD(groups, lr=0.1))."
            )
        name = getattr(optimizer, "__name__", "")
        return OptimizerSpec(f"factory {name}", None, "factory", optimizer)
    raise DiagnosticArgumentError(
        f"optimizer must be your optimizer, its class or a factory groups -> Optimizer, got "
        f"{type(optimizer).__name__}."
    )
