"""The forward probe: the max pre-softmax attention logit per layer and the final logits' log Z.

Capture-free: the probe is the check's own mechanism, installed only around one forward in
``every`` training attempts. A forward pre-hook and an ``always_call`` post-hook on the root
module (one Python call each per forward, about 1 us) open and close it. While open, a private
``TorchFunctionMode`` sees every ``softmax`` (``torch.softmax``, ``Tensor.softmax``,
``F.softmax``) and ``F.scaled_dot_product_attention``; per-submodule pre/post hooks, added for
that forward and removed after it, keep the stack of running modules so each attention is named
by the module that computed it. A softmax over a square last pair of dimensions (self-attention:
``(B, H, T, T)``) records its input's finite max (the mask's ``-inf`` entries ignored) and the
smallest over heads of the mean attention entropy; an SDPA call records the same of
``q @ k^T * scale`` with its causal or explicit mask (one extra matmul on probed forwards). The root's output
(a tensor, or an object with a tensor ``.logits``) gives log Z = logsumexp over its last
dimension: its mean and max. The output of each block (a numbered container entry such as
``blocks.0``, or a top-level module) gives its RMS, for the dashboard's timeline (one reduction
per block on probed forwards). Everything stays on the device; the check reads it with one host
read at the attempt's step site.

Not seen: a fused attention kernel other than SDPA (flash-attn's own), SDPA with fewer key
heads than query heads (grouped-query attention), cross-attention whose
query and key lengths differ, forwards without grad (evaluation), models whose output is not
the logits, and a ``torch.compile``'d module (a function mode switched on for one forward in
ten would change what Dynamo guards on; the probe stays off there, :attr:`ForwardProbe.is_off`).
"""

from __future__ import annotations

import contextlib
import re
import weakref
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode, _get_current_function_mode_stack

from ..._hooks import remove_hook
from ..._interrupts import shielded

_SOFTMAX = {torch.softmax, torch.Tensor.softmax, F.softmax, torch.nn.functional.softmax}


@dataclass
class ProbeReading:
    """One probed forward's device values, named."""

    attention: list[tuple[str, torch.Tensor]] = field(default_factory=list)
    """(module name, ``[max pre-softmax logit, min entropy]``) per attention call, in call
    order; the entropy (nats) is the mean over batch and queries of each head's attention
    distribution, its minimum over heads (Zhai et al. 2023 track it per layer)."""
    log_z: torch.Tensor | None = None
    """``[mean, max]`` of logsumexp over the output's last dimension."""
    activations: list[tuple[str, torch.Tensor]] = field(default_factory=list)
    """(block name, 1-element RMS of its output) per block call, after ``log_z`` in
    :meth:`tensors`."""

    def tensors(self) -> list[torch.Tensor]:
        values = [t for _, t in self.attention]
        values += [self.log_z] if self.log_z is not None else []
        return values + [t for _, t in self.activations]


class _AttentionMode(TorchFunctionMode):
    """Records attention logits' max while a probed forward runs."""

    def __init__(self, probe: ForwardProbe) -> None:
        super().__init__()
        self._probe = probe

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func in _SOFTMAX and args and isinstance(args[0], torch.Tensor):
            self._probe.record_softmax(args[0])
        elif func is F.scaled_dot_product_attention and len(args) >= 2:
            mask = args[3] if len(args) > 3 else kwargs.get("attn_mask")
            is_causal = args[5] if len(args) > 5 else kwargs.get("is_causal", False)
            self._probe.record_sdpa(args[0], args[1], kwargs.get("scale"), mask, bool(is_causal))
        return func(*args, **kwargs)


class ForwardProbe:
    """Opens on the root module's forward when :attr:`is_due`, closes at its end."""

    def __init__(self, model: torch.nn.Module) -> None:
        self._model = weakref.ref(model)
        self.is_due = True
        self.reading: ProbeReading | None = None
        """The last probed forward's values (taken by the check)."""
        self._open: ProbeReading | None = None
        self._mode: _AttentionMode | None = None
        self._stack: list[str] = []
        self._inner: contextlib.ExitStack | None = None
        self._on_pre = self._pre  # one bound method each: removal finds hooks by identity
        self._on_post = self._post

    @property
    def is_off(self) -> bool:
        """The model is a ``torch.compile``'d module: no probe (see the module docstring)."""
        model = self._model()
        return model is None or hasattr(model, "_orig_mod")

    def install(self, stack: contextlib.ExitStack) -> None:
        model = self._model()
        if model is None or self.is_off:
            return
        stack.callback(self._close)
        stack.callback(remove_hook, model._forward_pre_hooks, self._on_pre)
        model.register_forward_pre_hook(self._on_pre)
        stack.callback(
            remove_hook, model._forward_hooks, self._on_post, model._forward_hooks_always_called
        )
        model.register_forward_hook(self._on_post, always_call=True)

    # ----- root hooks ---------------------------------------------------------------------------
    @shielded()
    def _pre(self, module: torch.nn.Module, _args: Any) -> None:
        if not self.is_due or self._open is not None or not torch.is_grad_enabled():
            return
        self.is_due = False
        self._open = ProbeReading()
        inner = contextlib.ExitStack()
        self._inner = inner
        for name, sub in module.named_modules():
            if sub is module:
                continue
            push, pop = _tracker(self._stack, name, self.record_rms if _is_block(name) else None)
            inner.callback(remove_hook, sub._forward_pre_hooks, push)
            sub.register_forward_pre_hook(push)
            inner.callback(remove_hook, sub._forward_hooks, pop, sub._forward_hooks_always_called)
            sub.register_forward_hook(pop, always_call=True)
        self._mode = _AttentionMode(self)
        self._mode.__enter__()

    @shielded()
    def _post(self, _module: torch.nn.Module, _args: Any, output: Any) -> None:
        reading = self._open
        if reading is None:
            return
        self._close()
        logits = output if isinstance(output, torch.Tensor) else getattr(output, "logits", None)
        if isinstance(logits, torch.Tensor) and logits.dim() >= 2 and logits.is_floating_point():
            with torch.no_grad():
                log_z = logits.detach().float().logsumexp(-1)
                reading.log_z = torch.stack([log_z.mean(), log_z.amax()])
        self.reading = reading

    def _close(self) -> None:
        """Leave the mode and drop the per-module hooks (also on detach mid-forward). Not
        shielded itself: it runs inside ``_post``'s shield or the session's ``detach``.

        Idempotent at every instant: a detach interrupted between leaving the mode and
        forgetting it runs this again, and a second ``__exit__`` would pop a mode stack that no
        longer holds ours ("trying to pop from empty mode stack", which then left the per-module
        hooks and the session's handler behind: tests/faults/test_interrupts_with.py). The mode
        is left only while it is the innermost one. A Ctrl-C in a probed forward never reaches
        the root's ``always_call`` hook (``Module._call_impl`` runs those on ``Exception`` only),
        so the probe stays open until this runs at detach."""
        mode = self._mode
        if mode is not None:
            modes = _get_current_function_mode_stack()
            if modes and modes[-1] is mode:
                mode.__exit__(None, None, None)
            self._mode = None
        if self._inner is not None:
            self._inner.close()
            self._inner = None
        self._stack.clear()
        self._open = None

    # ----- the mode's records ----------------------------------------------------------------------
    # Every value is computed from detached tensors, so no graph is built without a
    # ``with torch.no_grad():``, whose ``__exit__`` a Ctrl-C can interrupt and leave grad mode off
    # (these run in a submodule's hook and in the mode, outside the root hooks' shield:
    # tests/faults/test_interrupt_sweep_with.py found it in ``record_rms``).
    def _where(self) -> str:
        return self._stack[-1] if self._stack else "(root)"

    def record_softmax(self, scores: torch.Tensor) -> None:
        if self._open is None or scores.dim() < 3 or scores.shape[-1] != scores.shape[-2]:
            return
        self._open.attention.append((self._where(), _summary(scores.detach().float())))

    def record_rms(self, name: str, output: Any) -> None:
        if isinstance(output, (tuple, list)) and output:
            output = output[0]  # a transformer block's (hidden, attention weights, ...)
        if self._open is None or not isinstance(output, torch.Tensor):
            return
        if not output.is_floating_point() or output.numel() == 0:
            return
        rms = output.detach().float().square().mean().sqrt()
        self._open.activations.append((name, rms.reshape(1)))

    def record_sdpa(
        self, query: Any, key: Any, scale: float | None, mask: Any, is_causal: bool
    ) -> None:
        if self._open is None or not isinstance(query, torch.Tensor):
            return
        if not isinstance(key, torch.Tensor) or query.shape[-1] != key.shape[-1]:
            return
        if query.shape[:-2] != key.shape[:-2]:  # grouped-query attention: not seen
            return
        factor = scale if scale is not None else query.shape[-1] ** -0.5
        scores = query.detach().float() @ key.detach().float().transpose(-1, -2) * factor
        rows, cols = scores.shape[-2:]
        if is_causal:
            causal = torch.ones(rows, cols, dtype=torch.bool, device=scores.device).tril()
            scores = scores.masked_fill(~causal, float("-inf"))
        if isinstance(mask, torch.Tensor):
            mask = mask.detach()
            scores = (
                scores.masked_fill(~mask, float("-inf"))
                if mask.dtype == torch.bool
                else scores + mask.float()
            )
        self._open.attention.append((self._where(), _summary(scores)))


def _summary(scores: torch.Tensor) -> torch.Tensor:
    """``[finite max, min over heads of the mean entropy]`` of ``(..., H, Tq, Tk)`` logits whose
    masked entries are ``-inf`` (a fully masked row contributes 0 nats)."""
    finite = scores.nan_to_num(nan=0.0, neginf=0.0, posinf=0.0)
    log_p = scores.log_softmax(-1)
    entropy = -(log_p.exp() * log_p).nan_to_num(nan=0.0).sum(-1)  # 0 * -inf -> 0
    per_head = entropy.reshape(-1, *entropy.shape[-2:]).mean(dim=(0, 2))
    return torch.stack([finite.amax(), per_head.amin()])


def _is_block(name: str) -> bool:
    """A top-level module or a numbered container entry (``blocks.3``, not ``blocks.3.mlp``)."""
    if "." not in name:
        return True
    first = _FIRST_NUMBERED.match(name)
    return first is not None and first.group(1) == name


_FIRST_NUMBERED = re.compile(r"^(.*?\.\d+)(?:\.|$)")
"""The stability check's block of a parameter name (``_stability._BLOCK``)."""


def _tracker(stack: list[str], name: str, on_output: Any = None) -> tuple[Any, Any]:
    def push(_module: Any, _args: Any) -> None:
        stack.append(name)

    def pop(_module: Any, _args: Any, output: Any) -> None:
        if stack and stack[-1] == name:
            stack.pop()
        if on_output is not None:
            on_output(name, output)

    return push, pop
