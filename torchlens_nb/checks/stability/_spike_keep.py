"""What spike forensics keeps: one step's batch and weights, and the step's before them.

The stability check owns a :class:`SpikeKeeper`. A forward pre-hook on the root module (one
Python call per forward, about 1 us) holds each tensor input of every forward that runs with
grad enabled until the step's site (an input made for the call, ``model(x[:, :-1])`` or
``model(x.to(device))``, lives through the backward instead of being freed after the forward),
then only by weak reference: the session keeps no batch alive past its attempt
(``tests/checks/test_replay.py``), so a previous batch the loop has released is gone unless it
was copied while armed, and the kept step says so.

At the step site (S-B: after the backward, before the optimizer writes, so the parameters are
still the ones the forward used) the keeper takes a :class:`KeptStep` when that attempt's loss
spiked (``keep="spikes"``, the default) or on every attempt (``keep="every_step"``): a host
copy of every parameter and buffer, of the step's batch and the previous one (when still
alive, or copied at the previous step site while armed), and of what the
optimizer's next update reads (each gradient, its state, its group's hyperparameters), from
which the update it is about to take and the one it took before are computed when asked
(``_adam.py``'s formula; Adam/AdamW and SGD with momentum). The first spike of an episode is
kept: a later one replaces it only :data:`EPISODE_GAP` attempts after the last spike.

The weights of the step *before* a spike are only there if the keeper was armed at that step:
armed while the stability check sees a precursor (the loss EMA rising, a block's gradient norm
surging; a model of at most :data:`ARM_MAX_BYTES`) or always under ``keep="every_step"``, it
keeps a host copy of the weights and of the batch at every step site, replacing the last one. That copy costs one host copy of the model per step while
armed and the model's bytes of host memory (the 2-block GPT of ``tests/stability``: 0.44 MB;
``benchmarks/bench_stability.py`` measures the cost per step). Unarmed, nothing is copied, and
a spike is explained with the previous batch run on the spike's own weights (said in the report).

Not seen: a spike whose loss the engine reads after the step site (an accelerator run whose
losses are queued, ``_engine.LOSS_READ_EVERY``): the weights have moved by then, so that spike
is recorded as missed (:attr:`SpikeKeeper.missed`) rather than explained with the wrong
weights; a loop that refills one input tensor in place (the previous batch is then the current
one: detected by the tensor's version counter, and said); inputs other than tensors and plain
values (an object the pytree does not open).
"""

from __future__ import annotations

import contextlib
import math
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal

import torch
from torch.utils._pytree import tree_flatten, tree_unflatten

from ..._hooks import remove_hook
from ..._interrupts import shielded
from ..._undo import Undo
from ._adam import ADAM_KEYS, _update, adam_step
from ._probe import ForwardProbe

Keep = Literal["spikes", "every_step"]

ARM_MAX_BYTES = 16 * 2**20
"""Largest model (parameter and buffer bytes) the keeper copies at every step while armed by a
precursor: a host copy costs about 36 ms of CPU per 64 MiB here (one thread), so a bigger model
is armed only under ``keep="every_step"``, and its spikes are explained without the previous
step's weights (said in the report)."""
EPISODE_GAP = 20
"""Attempts without a spike after which a new spike replaces the kept one."""
MAX_FORWARDS = 64
"""Forwards per step whose inputs are held (gradient accumulation's micro-batches); later ones
of the same step are not kept, and the kept step says so."""

Forward = tuple[tuple[Any, ...], dict[str, Any]]
"""One forward's positional and keyword inputs."""


@dataclass
class KeptStep:
    """One step's evidence, on the host."""

    attempt: int
    trigger: Literal["spike", "every_step"]
    loss: float | None
    loss_median: float | None
    forwards: list[Forward]
    """This step's forward inputs (host copies); empty when ``forwards_missing`` says why."""
    forwards_missing: str | None
    previous: list[Forward] | None
    """The previous step's forward inputs (host copies), None when not available."""
    previous_missing: str | None
    """Why ``previous`` is None."""
    weights: dict[str, torch.Tensor]
    """Every parameter and buffer of the model by name, as the forward saw them (host copies)."""
    previous_weights: dict[str, torch.Tensor] | None
    """The same at the previous step's site (kept while armed), None when not kept."""
    device: torch.device
    """Where the model's parameters live (the re-run forward runs there)."""
    grads: dict[str, torch.Tensor] = field(default_factory=dict)
    """Parameter name -> its gradient at the step site (host copy), for the optimizer's
    parameters that had one."""
    states: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Parameter name -> the optimizer's state for it before the step (tensors as host copies)."""
    groups: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Parameter name -> its param group's hyperparameters (lr, betas, eps, momentum, ...)."""
    optimizer_name: str = ""
    forwards_dropped: int = 0
    """Forwards of this step beyond :data:`MAX_FORWARDS`, not kept."""

    @property
    def kept_bytes(self) -> int:
        tensors = [*self.weights.values(), *(self.previous_weights or {}).values()]
        tensors += [*self.grads.values()]
        tensors += [v for state in self.states.values() for v in state.values()]
        tensors = [t for t in tensors if isinstance(t, torch.Tensor)]
        for batch in (self.forwards, self.previous or []):
            for args, kwargs in batch:
                leaves, _ = tree_flatten((args, kwargs))
                tensors.extend(t for t in leaves if isinstance(t, torch.Tensor))
        return sum(t.numel() * t.element_size() for t in tensors)


class SpikeKeeper:
    """Holds the inputs of the step running now and of the one before; keeps a step on demand."""

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        probe: ForwardProbe | None,
        keep: Keep,
    ) -> None:
        self._model = weakref.ref(model)
        self._optimizer = weakref.ref(optimizer)
        self.probe = probe
        self.keep = keep
        self._current: list[_Seen] = []
        self._previous: list[_Seen] = []
        self._previous_host: tuple[int, list[Forward]] | None = None
        """(attempt, host copies) of the previous step's inputs, taken while armed."""
        self._dropped = 0
        self._spike: tuple[int, float, float] | None = None
        self._last_spike = -EPISODE_GAP - 1
        self._last: tuple[int, dict[str, torch.Tensor]] | None = None
        """(attempt, host weights) of the last step site while armed."""
        self.kept: KeptStep | None = None
        """The last kept step (only one is held)."""
        self.missed: list[int] = []
        """Attempts whose spike was read after their step site (not kept)."""
        self.is_explaining = False
        """True while the analysis re-runs the forward (its inputs are not the loop's)."""
        self._on_forward_hook = self._on_forward
        self._model_bytes: int | None = None

    @property
    def model(self) -> torch.nn.Module | None:
        """The watched model, None once released (held by weak reference)."""
        return self._model()

    def install(self, stack: contextlib.ExitStack) -> None:
        model = self._model()
        if model is None:
            return
        stack.callback(self._forget)
        stack.callback(
            remove_hook,
            model._forward_pre_hooks,
            self._on_forward_hook,
            model._forward_pre_hooks_with_kwargs,
        )
        model.register_forward_pre_hook(self._on_forward_hook, with_kwargs=True)

    def _forget(self) -> None:
        self._current, self._previous, self._previous_host = [], [], None

    @shielded()
    def _on_forward(
        self, _module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        if self.is_explaining or not torch.is_grad_enabled():
            return
        if len(self._current) >= MAX_FORWARDS:
            self._dropped += 1
            return
        self._current.append(_Seen(args, kwargs))

    def mark_spike(self, attempt: int, loss: float, median: float) -> None:
        """The stability check saw ``attempt``'s loss spike (called from its ``on_loss``)."""
        self._spike = (attempt, loss, median)

    def on_step_site(self, attempt: int, loss: float | None, *, is_armed: bool) -> None:
        """S-B of ``attempt``: keep it if due, copy its weights while armed, then make its
        inputs the previous step's."""
        spike, self._spike = self._spike, None
        if spike is not None and spike[0] != attempt:
            self.missed.append(spike[0])
            spike = None
        taken = None
        if spike is not None:
            if self.kept is None or attempt - self._last_spike > EPISODE_GAP:
                taken = self.kept = self._take(attempt, "spike", spike[1], spike[2])
            self._last_spike = attempt
        elif self.keep == "every_step":
            taken = self.kept = self._take(attempt, "every_step", loss, None)
        if (is_armed and self._fits()) or self.keep == "every_step":
            weights = taken.weights if taken is not None else self._host_weights()
            self._last = (attempt, weights) if weights is not None else None
            inputs = (taken.forwards, None) if taken is not None else _copy(self._current)
            self._previous_host = (attempt, inputs[0]) if inputs[1] is None else None
        else:
            self._last = self._previous_host = None
        for seen in self._current:
            seen.weaken()
        self._previous, self._current, self._dropped = self._current, [], 0

    def _fits(self) -> bool:
        if self._model_bytes is None:
            model = self._model()
            tensors = [*model.parameters(), *model.buffers()] if model is not None else []
            self._model_bytes = sum(t.numel() * t.element_size() for t in tensors)
        return self._model_bytes <= ARM_MAX_BYTES

    def _host_weights(self) -> dict[str, torch.Tensor] | None:
        model = self._model()
        if model is None:
            return None
        with torch.no_grad():
            weights = {n: _host(t) for n, t in model.named_parameters()}
            weights.update({n: _host(t) for n, t in model.named_buffers()})
        return weights

    def _take(
        self, attempt: int, trigger: Literal["spike", "every_step"], loss: Any, median: Any
    ) -> KeptStep | None:
        model = self._model()
        if model is None:
            return None
        params = dict(model.named_parameters())
        device = next(iter(params.values())).device if params else torch.device("cpu")
        weights = self._host_weights() or {}
        last = self._last
        previous, missing = self._previous_inputs(attempt)
        forwards, forwards_missing = _copy(self._current)
        if not self._current:
            forwards_missing = "no forward ran with grad in this step"
        kept = KeptStep(
            attempt,
            trigger,
            loss,
            median,
            forwards,
            forwards_missing,
            previous,
            missing,
            weights,
            last[1] if last is not None and last[0] == attempt - 1 else None,
            device,
            forwards_dropped=self._dropped,
        )
        optimizer = self._optimizer()
        if optimizer is not None:
            _keep_optimizer(kept, optimizer, params)
        return kept

    def _previous_inputs(self, attempt: int) -> tuple[list[Forward] | None, str | None]:
        held = self._previous_host
        if held is not None and held[0] == attempt - 1:
            return held[1], None
        if not self._previous:
            return None, "no forward ran with grad at the previous step (or it is the first)"
        forwards, missing = _copy(self._previous)
        if missing is not None:
            return None, f"the previous step's batch is gone: {missing}"
        return forwards, None

    def explain(self, undo: Undo) -> None:
        """Until ``undo`` runs, the analysis re-runs forwards: the probe and this keeper see
        none of them (the restore is registered before the flags change)."""
        probe = self.probe
        undo.add(partial(self._explained, probe.is_due if probe is not None else False))
        self.is_explaining = True
        if probe is not None:
            probe.is_due = False

    def _explained(self, was_due: bool) -> None:
        self.is_explaining = False
        if self.probe is not None:
            self.probe.is_due = was_due


def _host(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.detach().to("cpu", copy=True)


class _Seen:
    """One forward's inputs: each tensor with its version counter (held until the step site,
    then by weak reference: :meth:`weaken`), plain values (None, numbers, strings) as they are,
    anything else by its type name only."""

    __slots__ = ("leaves", "spec")

    def __init__(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        leaves, self.spec = tree_flatten((tuple(args), dict(kwargs)))
        self.leaves: list[tuple[str, Any, int]] = [
            ("tensor", v, v._version)
            if isinstance(v, torch.Tensor)
            else ("value", v, 0)
            if v is None or isinstance(v, (bool, int, float, str))
            else ("other", type(v).__name__, 0)
            for v in leaves
        ]

    def weaken(self) -> None:
        self.leaves = [
            (kind, weakref.ref(held) if kind == "tensor" else held, version)
            for kind, held, version in self.leaves
        ]


def _copy(seen: list[_Seen]) -> tuple[list[Forward], str | None]:
    """Host copies of the forwards' inputs, or why they cannot be had."""
    out: list[Forward] = []
    for forward in seen:
        values = []
        for kind, held, version in forward.leaves:
            if kind == "other":
                return [], f"an input of type {held} is not kept (tensors and plain values are)"
            if kind == "value":
                values.append(held)
                continue
            tensor = held() if isinstance(held, weakref.ref) else held
            if tensor is None:
                return [], (
                    "the loop released that batch, and the check was not armed at its step "
                    "(keep='every_step' copies it)"
                )
            if tensor._version != version:
                return [], (
                    "the loop refilled the input tensor in place; yield a new tensor per "
                    "batch to compare against it"
                )
            values.append(_host(tensor))
        args, kwargs = tree_unflatten(values, forward.spec)
        out.append((tuple(args), dict(kwargs)))
    return out, None


def _keep_optimizer(
    kept: KeptStep, optimizer: torch.optim.Optimizer, params: Mapping[str, torch.Tensor]
) -> None:
    """Host copies of what the optimizer's next update reads: each gradient, its state and its
    group's hyperparameters (the update norms are computed from them only when asked:
    computing them at every step cost 4.0 ms a step on the 2-block GPT, against 17 ms for the
    step; copying costs a fraction of that)."""
    group_of = {id(p): g for g in optimizer.param_groups for p in g["params"]}
    kept.optimizer_name = type(optimizer).__name__
    with torch.no_grad():
        for name, param in params.items():
            group = group_of.get(id(param))
            if group is None or param.grad is None or param.grad.is_sparse:
                continue
            kept.grads[name] = _host(param.grad)
            kept.states[name] = {
                k: _host(v) if isinstance(v, torch.Tensor) else v
                for k, v in optimizer.state.get(param, {}).items()
            }
            kept.groups[name] = {k: v for k, v in group.items() if k != "params"}


class _KeptState:
    """The ``optimizer.state`` view ``_adam._update`` reads, over a kept step's copies."""

    def __init__(self, state: dict[torch.Tensor, dict[str, Any]]) -> None:
        self.state = state


def update_norms(
    kept: KeptStep,
) -> tuple[dict[str, tuple[float, float | None, float]], str | None]:
    """Per parameter of the kept step: the norms of the update the optimizer was about to take,
    of the one it took at the previous step (None before its first), and of the weight; or
    why they cannot be computed (an optimizer whose update is not modelled)."""
    out: dict[str, tuple[float, float | None, float]] = {}
    with torch.no_grad():
        for name, grad in kept.grads.items():
            weight, state, group = kept.weights[name], kept.states[name], kept.groups[name]
            view: Any = _KeptState({weight: state})
            upcoming = _update(view, group, weight, grad, 1)
            if upcoming is None:
                return {}, (
                    f"{kept.optimizer_name}'s update is not modelled (Adam-like and SGD are): "
                    "the update column is left out"
                )
            before = _previous_update(state, group)
            out[name] = (
                float(torch.linalg.vector_norm(upcoming)),
                None if before is None else float(torch.linalg.vector_norm(before)),
                float(torch.linalg.vector_norm(weight.float())),
            )
    return out, None


def _previous_update(state: dict[str, Any], group: dict[str, Any]) -> torch.Tensor | None:
    """The update the optimizer applied at its last step, recomputed from its state now: Adam's
    ``lr * m_hat / (sqrt(v_hat) + eps)`` at the state's step count (the state holds the moments
    after that step), SGD's ``lr * momentum_buffer``. None before the first step or for plain
    SGD (its last gradient is gone). The lr is the group's now (a schedule that changed it since
    makes this the update at today's lr)."""
    lr = float(group["lr"])
    if group.get("betas") is not None and all(k in state for k in ADAM_KEYS):
        step = float(state.get("step", 0))
        if step < 1:
            return None
        return adam_step(state["exp_avg"].float(), state["exp_avg_sq"].float(), step, group)
    buffer = state.get("momentum_buffer")
    if buffer is not None and math.isfinite(lr):
        return buffer.float() * lr
    return None
