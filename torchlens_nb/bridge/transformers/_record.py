"""``record_attention``: the attention probabilities of every attention call of a Hugging Face
model, whatever its attention implementation.

Every transformers attention module asks ``ALL_ATTENTION_FUNCTIONS.get_interface(
config._attn_implementation, eager_attention_forward)`` for its attention function on each
forward, then calls it as ``attention(module, query, key, value, attention_mask, **kwargs)`` and
gets ``(attn_output, attn_weights)`` back (transformers 5.x; 460 modeling files do). Inside
``with record_attention(model):`` that lookup hands out a wrapper of the function it chose, so each
call of this model's attention modules is seen with its module, its arguments and its result:

* eager attention returns its probabilities: they are recorded as returned (the softmax output
  after attention dropout, which is what multiplied the values);
* ``sdpa`` returns none: the wrapper runs the call inside the recompute mode ``SinkProbe(
  fused_attention="recompute")`` uses (``debug/attention_sinks/_fused.py``), which recomputes
  ``softmax(q @ k^T * scale + mask)`` from the arguments the ``scaled_dot_product_attention``
  kernel itself received (after transformers' grouped-query repeat, mask conversion and causal
  cropping) and, with ``check_sdpa=True``, measures ``max |probabilities @ V - kernel output|``;
* flash and flex attention neither return probabilities nor call SDPA: each such call is an
  :class:`UnrecordedCall` with the reason and the fix.

A few modeling files (the SAM family, Qwen2.5-Omni) look the function up as
``ALL_ATTENTION_FUNCTIONS["sdpa"]``; that lookup is wrapped the same way. What the recording
cannot attribute is disclosed, never dropped: a block-wide count of ``scaled_dot_product_attention``
calls names those made outside any attention-interface call, and a model whose forwards never
asked the interface (attention written inline) gets an :class:`UnrecordedCall` saying so.

Calls that pass ``s_aux`` sink logits (GPT-OSS and the models built like it) are recorded, but
their SDPA cross-check is skipped with the reason: those logits are a learned extra column of the
softmax, dropped after it, so the recorded rows sum to less than 1 and no SDPA call computes them.
On the 2-layer configs of tests/attention_sinks/test_record_attention.py the recorded
probabilities equal eager ``output_attentions=True`` within 1e-5 for GPT-2, LLaMA and BERT, eager
and sdpa, and every SDPA check is below 1e-5.

Cost: nothing outside the attention calls. Per eager call one float32 copy of the probabilities;
per SDPA call the recompute (one ``(batch, heads, queries, keys)`` float32 softmax) and, with
``check_sdpa``, one matmul and one host sync. The recording holds every probability tensor on the
model's device until it is dropped.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Literal

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from ...debug.attention_sinks import SDPA, FusedAttentionMode, FusedCall
from ...errors import DiagnosticArgumentError, MissingExtraError, ModelTypeError

SdpaCheckStatus = Literal["checked", "skipped", "not_fused"]
"""``checked``: a number was measured; ``skipped``: the reason says why not; ``not_fused``: the
probabilities are the model's own returned weights, there is no fused output to compare."""

S_AUX_REASON = (
    "the call passes s_aux sink logits, a learned extra column of the softmax that is dropped "
    "after it: scaled_dot_product_attention computes no such column, so probabilities @ V is not "
    "compared with a fused output (the recorded rows sum to less than 1)."
)
CHECK_OFF_REASON = "record_attention(check_sdpa=False): not measured."
RETURNED_REASON = (
    "the attention function returned its probabilities (eager attention): they are the ones that "
    "multiplied the values, with no fused kernel output to compare them against."
)
_NOT_RECORDED = (
    "{impl} attention neither returns its probabilities nor calls "
    "scaled_dot_product_attention, so they cannot be recomputed: load the model with "
    'attn_implementation="eager" or "sdpa" (model.set_attn_implementation("sdpa")) to record them.'
)
_OUTSIDE = (
    "{count} scaled_dot_product_attention calls ran outside this model's attention-interface "
    "calls (code that calls it directly), so they were not recorded: "
    "tl.debug.SinkProbe(attention=[tl.func('softmax')], fused_attention='recompute') sees them."
)
_NO_INTERFACE = (
    "the model ran {count} forward calls but none asked transformers' attention interface for "
    "its attention function, so nothing could be recorded: its attention is written inline; "
    "use tl.debug.attention_sinks(model, inputs) on it (eager) instead."
)
_SEVERAL_SDPA = (
    "the {impl} attention call made {count} scaled_dot_product_attention calls, so no single "
    "probability tensor is the call's: record it with attn_implementation='eager'."
)


@dataclass(frozen=True)
class SdpaCheck:
    """The SDPA cross-check of one recorded call."""

    site: str
    """Module address of the attention module that made the call."""
    status: SdpaCheckStatus
    max_abs_diff: float | None
    """``max |probabilities @ V - kernel output|`` (``checked`` only), in the value's units."""
    reason: str
    """Why there is no number (``""`` when ``checked``)."""


@dataclass(frozen=True)
class UnrecordedCall:
    """An attention call whose probabilities could not be recorded."""

    site: str
    implementation: str
    """``config._attn_implementation`` of the call, e.g. ``"flash_attention_2"``."""
    reason: str


class AttentionRecording:
    """What ``with record_attention(model):`` saw, in call order (built by
    :func:`record_attention`; entering it again starts a fresh recording)."""

    def __init__(self, model: nn.Module, *, check_sdpa: bool, interface: type) -> None:
        self._model = model
        self._interface: Any = interface  # AttentionInterface, typed loosely: transformers is lazy
        self.check_sdpa = check_sdpa
        """Whether each SDPA call's ``probabilities @ V`` is compared with the kernel output."""
        self._sites: list[str] = []
        self._attentions: list[torch.Tensor] = []
        self._checks: list[SdpaCheck] = []
        self._unrecorded: list[UnrecordedCall] = []
        self._addresses: dict[int, str] = {}
        self._original: Any = None
        self._own_getitem: Any = None
        self._counter = _SdpaCounter()
        self._hook: Any = None
        self._inner_sdpa = self._forwards = self._interface_calls = 0

    @property
    def attentions(self) -> tuple[torch.Tensor, ...]:
        """One float32 ``(batch, heads, queries, keys)`` tensor per recorded call, on the model's
        device."""
        return tuple(self._attentions)

    @property
    def sites(self) -> tuple[str, ...]:
        """The module address of each recorded call (aligned with :attr:`attentions`)."""
        return tuple(self._sites)

    @property
    def sdpa_checks(self) -> tuple[SdpaCheck, ...]:
        """The SDPA cross-check of each recorded call (aligned with :attr:`attentions`)."""
        return tuple(self._checks)

    @property
    def unrecorded(self) -> tuple[UnrecordedCall, ...]:
        """Calls of this model's attention whose probabilities could not be recorded; after the
        block also (``site`` ``""``) SDPA calls made outside the attention interface, and a
        model whose forwards never asked the interface at all."""
        return tuple(self._unrecorded)

    def __enter__(self) -> AttentionRecording:
        global _active
        if _active is not None:
            raise DiagnosticArgumentError(
                "another record_attention block is active: it patches transformers' attention "
                "lookup, so record one model at a time (exit the other block first)."
            )
        self._sites.clear()
        self._attentions.clear()
        self._checks.clear()
        self._unrecorded.clear()
        self._inner_sdpa = self._forwards = self._interface_calls = 0
        self._addresses = {id(m): name for name, m in self._model.named_modules()}
        cls = self._interface
        self._original = cls.__dict__["get_interface"]
        self._own_getitem = cls.__dict__.get("__getitem__")
        lookup, getitem = self._original, cls.__getitem__

        def get_interface(interface: Any, attn_implementation: Any, default: Callable) -> Any:
            chosen = lookup(interface, attn_implementation, default)
            return self._wrap(chosen, "eager" if chosen is default else str(attn_implementation))

        def get_item(interface: Any, key: Any) -> Any:  # ALL_ATTENTION_FUNCTIONS["sdpa"]
            return self._wrap(getitem(interface, key), str(key))

        self._counter = _SdpaCounter()
        self._counter.__enter__()
        self._hook = self._model.register_forward_pre_hook(self._count_forward)
        cls.get_interface, cls.__getitem__ = get_interface, get_item
        _active = self
        return self

    def __exit__(self, *exc_info: object) -> None:
        global _active
        cls = self._interface
        cls.get_interface = self._original
        if self._own_getitem is None:
            del cls.__getitem__  # inherited again from GeneralInterface
        else:
            cls.__getitem__ = self._own_getitem
        self._hook.remove()
        _active = None
        self._counter.__exit__(*exc_info)
        outside = self._counter.calls - self._inner_sdpa
        if outside:
            self._unrecorded.append(UnrecordedCall("", "", _OUTSIDE.format(count=outside)))
        if self._forwards and not self._interface_calls:
            self._unrecorded.append(
                UnrecordedCall("", "", _NO_INTERFACE.format(count=self._forwards))
            )

    def _count_forward(self, module: nn.Module, args: Any) -> None:
        self._forwards += 1

    def _wrap(self, chosen: Any, implementation: str) -> Any:
        if getattr(chosen, "_torchlens_nb_recording", None) is self:  # get() reads __getitem__
            return chosen

        def recorded(*args: Any, **kwargs: Any) -> Any:
            return self._call(chosen, implementation, args, kwargs)

        recorded._torchlens_nb_recording = self  # type: ignore[attr-defined]
        return recorded

    def _call(
        self, chosen: Callable, implementation: str, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        module = args[0] if args else kwargs.get("module")
        site = self._addresses.get(id(module))
        if site is None:  # another model's attention: not ours to record
            return chosen(*args, **kwargs)
        fused: list[FusedCall] = []
        self._interface_calls += 1
        with FusedAttentionMode(fused.append):
            out = chosen(*args, **kwargs)
        self._inner_sdpa += sum(call.name == SDPA for call in fused)
        query = args[1] if len(args) > 1 else kwargs.get("query")
        weights = out[1] if isinstance(out, tuple) and len(out) > 1 else None
        sdpa = [call for call in fused if call.name == SDPA]
        has_sinks = kwargs.get("s_aux") is not None
        if isinstance(weights, torch.Tensor) and weights.dim() == 4:
            self._keep(site, weights.detach().to(torch.float32, copy=True))
            self._checks.append(
                SdpaCheck(site, "skipped", None, S_AUX_REASON)
                if has_sinks
                else SdpaCheck(site, "not_fused", None, RETURNED_REASON)
            )
        elif len(sdpa) == 1:
            self._keep(site, _as_heads(sdpa[0].probabilities, query))
            self._checks.append(self._check(site, sdpa[0], has_sinks))
        else:
            template = _SEVERAL_SDPA if sdpa else _NOT_RECORDED
            reason = template.format(impl=implementation, count=len(sdpa))
            self._unrecorded.append(UnrecordedCall(site, implementation, reason))
        return out

    def _keep(self, site: str, probabilities: torch.Tensor) -> None:
        self._sites.append(site)
        self._attentions.append(probabilities)

    def _check(self, site: str, call: FusedCall, has_sinks: bool) -> SdpaCheck:
        if has_sinks:
            return SdpaCheck(site, "skipped", None, S_AUX_REASON)
        if not self.check_sdpa:
            return SdpaCheck(site, "skipped", None, CHECK_OFF_REASON)
        error = call.output_error()
        assert error is not None  # an SDPA call always has a value to multiply
        return SdpaCheck(site, "checked", error, "")


class _SdpaCounter(TorchFunctionMode):
    """Counts every ``scaled_dot_product_attention`` call of the block, so the calls made outside
    the attention interface (which the recording cannot attribute) are disclosed."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if getattr(func, "__name__", "") == SDPA:
            self.calls += 1
        return func(*args, **(kwargs or {}))


_active: AttentionRecording | None = None
"""The recording whose ``with`` block is open (one at a time: it patches a class attribute)."""


def _as_heads(probabilities: torch.Tensor, query: Any) -> torch.Tensor:
    """``(batch, heads, queries, keys)`` in the interface's head and query counts: transformers
    packs a one-token grouped-query call as ``(batch, kv_heads, groups, keys)`` (``pack_gqa``),
    which is the same numbers in head-major order."""
    if not isinstance(query, torch.Tensor) or query.dim() != 4:
        return probabilities
    shape = (probabilities.shape[0], query.shape[1], query.shape[2], probabilities.shape[-1])
    if tuple(probabilities.shape) != shape and probabilities.numel() == math.prod(shape):
        return probabilities.reshape(shape)
    return probabilities


def _transformers() -> ModuleType:
    try:
        return importlib.import_module("transformers.modeling_utils")
    except ImportError as missing:
        raise MissingExtraError(
            "record_attention needs transformers: pip install -c constraints.txt "
            '"torchlens_nb[transformers]" (the constraint keeps your torch).'
        ) from missing


def record_attention(model: nn.Module, *, check_sdpa: bool = True) -> AttentionRecording:
    """Record the attention probabilities of every attention call of a Hugging Face model.

    Args:
        model: a ``transformers.PreTrainedModel`` (any attention implementation).
        check_sdpa: compare, per SDPA call, ``probabilities @ V`` with the kernel's own output
            (:class:`SdpaCheck`); calls that pass ``s_aux`` sink logits are skipped with the
            reason.

    Returns:
        An :class:`AttentionRecording` to enter around the forward calls. Inside the block the
        class attributes ``get_interface`` and ``__getitem__`` of
        ``transformers.modeling_utils.AttentionInterface`` are wrapped, one torch-function mode
        counts SDPA calls and one forward pre-hook on ``model`` counts forwards; all are
        removed on exit, exceptions included. The model's outputs are its own:
        nothing is changed in its arguments or results. Feed it to
        ``tl.debug.SinkProbe(recording=...)`` or ``tl.debug.attention_sinks(..., recording=...)``.

    Raises:
        MissingExtraError: transformers is not installed.
        ModelTypeError: ``model`` is not a ``transformers.PreTrainedModel``.
        DiagnosticArgumentError: ``check_sdpa`` is not a bool; entering while another
            recording's block is open.

    Example:
        >>> import torch, transformers, torchlens_nb as tl
        >>> config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=64,
        ...     bos_token_id=0, eos_token_id=0, attn_implementation="sdpa")
        >>> model = transformers.GPT2LMHeadModel(config).eval()
        >>> with tl.bridge.transformers.record_attention(model) as recording:
        ...     _ = model(torch.arange(6)[None])
        >>> recording.sites, tuple(recording.attentions[0].shape)
        (('transformer.h.0.attn', 'transformer.h.1.attn'), (1, 4, 6, 6))
        >>> [check.status for check in recording.sdpa_checks]
        ['checked', 'checked']
    """
    modeling = _transformers()
    if not isinstance(model, modeling.PreTrainedModel):
        raise ModelTypeError(
            "record_attention needs a Hugging Face transformers model (a "
            f"transformers.PreTrainedModel), got {type(model).__name__}; for other models use "
            "tl.debug.SinkProbe(attention=[tl.func('softmax')], fused_attention='recompute')."
        )
    if not isinstance(check_sdpa, bool):
        raise DiagnosticArgumentError(f"check_sdpa must be True or False, got {check_sdpa!r}.")
    return AttentionRecording(model, check_sdpa=check_sdpa, interface=modeling.AttentionInterface)


__all__ = ["AttentionRecording", "SdpaCheck", "UnrecordedCall", "record_attention"]
