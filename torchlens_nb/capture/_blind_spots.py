"""What a capture could not see into, said on the trace: ``Trace.blind_spots``.

A TorchScript module (``torch.jit.script`` / ``torch.jit.trace``) runs its ops in the TorchScript
interpreter, out of reach of the torch-function mode: the capture records its call as one op
(``jit_module``) whose parents are its tensor inputs and whose outputs are its outputs, so value
checks still see what came out. A ``torch.vmap`` call inside a forward runs its function on
batched tensors that cannot be saved or compared; it is recorded as one ``vmap`` op the same way.
Ops inside other ``torch.func`` transforms (``grad``, ``jacrev``, ...) are recorded, but on
wrapped tensors: their values are not saved and the transform's result is not linked to them.
An op that consumes a tensor of unknown origin (a ``torch.jit.script`` function's result, a
tensor kept as a plain attribute, a loss target captured from outside) is named too: what was
born before it shows up first there. An integer or bool tensor with no autograd history (class
indices, a mask) is not: it can hold no NaN or Inf and carries no gradient.
None of these occur in the golden models (``tests/capture/golden_models.py``).
Each such region becomes a :class:`BlindSpot`; an analysis that reads the trace must not call
what happened inside "clean".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, cast

import torch
from torch import nn

from ._selectors import canonical_address

BlindSpotKind = Literal["opaque_module", "vmap", "functorch_transform", "untracked_input"]
"""``opaque_module``: a TorchScript module; ``vmap``: a ``torch.vmap`` call;
``functorch_transform``: ops run inside another ``torch.func`` transform (``grad``, ``jacrev``,
``jvp``, ...); ``untracked_input``: ops that consumed a tensor no recorded op produced and that is
no parameter, buffer or input of the model."""

_REASONS: dict[str, str] = {
    "opaque_module": (
        "is a TorchScript module ({type_name}): its ops ran in the TorchScript interpreter and "
        "were not recorded, only its call ({labels}); capture the eager module that was passed "
        "to torch.jit.script/trace to see inside it."
    ),
    "vmap": (
        "is a torch.vmap call: the ops of the vmapped function ran on batched tensors and were "
        "not recorded, only the call ({labels}); call the function on one example (without "
        "vmap) under tl.trace to see inside it."
    ),
    "functorch_transform": (
        "ran ops inside a torch.func transform (grad, jacrev, jvp, ...): {labels} ran on "
        "wrapped tensors, so their values were not saved and their links to the ops outside the "
        "transform are lost; call the transformed function without the transform under "
        "tl.trace to see its values."
    ),
    "untracked_input": (
        "has {labels} consuming floating-point tensors that no recorded op produced and that "
        "are not the model's parameters, buffers or inputs: they were made before the forward "
        "(a loss target, a constant kept as a plain attribute) or by code the capture does not "
        "see (a TorchScript function, a C++ extension, another thread), so a value born there "
        "shows up first at these ops; pass such tensors as inputs or register constants as "
        "buffers to have them checked."
    ),
}


@dataclass(frozen=True)
class BlindSpot:
    """A part of the forward the capture could not see into."""

    kind: BlindSpotKind
    """What kind of region it is."""
    where: str
    """The module address (opaque module) or op label (vmap call) that could not be seen into."""
    reason: str
    """One sentence: what is hidden and how to see it."""
    output_labels: tuple[str, ...]
    """Labels of the ops that hold what came out of it (their values can be checked)."""


_SCRIPT_MODULE = torch.jit.ScriptModule


def is_opaque(module: nn.Module) -> bool:
    """True for a module whose ops the capture cannot record (a TorchScript module)."""
    return isinstance(module, _SCRIPT_MODULE)


def describe(module: nn.Module) -> str:
    """Type name of a module as the blind spot names it: ``RecursiveScriptModule(Sequential)``."""
    original = getattr(module, "original_name", None)
    name = type(module).__name__
    return f"{name}({original})" if original and original != name else name


def opaque_modules(model: nn.Module) -> tuple[tuple[str, str], ...]:
    """``(address, type name)`` of the submodules a capture cannot see into, without running.

    Only the outermost of nested opaque modules is listed (a scripted ``Sequential`` is one
    entry, not one per layer). Addresses are spelled as ``tl.trace`` spells them (without the
    ``_orig_mod`` segments of ``torch.compile`` wrappers).

    Example:
        >>> from torch import nn
        >>> model = nn.Sequential(nn.Linear(2, 2), torch.jit.script(nn.ReLU()))
        >>> opaque_modules(model)
        (('1', 'RecursiveScriptModule(ReLU)'),)
    """
    found: list[tuple[str, str]] = []
    for address, module in model.named_modules():
        spelled = canonical_address(address)
        if is_opaque(module) and not any(_is_inside(spelled, outer) for outer, _ in found):
            found.append((spelled, describe(module)))
    return tuple(found)


def _is_inside(address: str, outer: str) -> bool:
    return outer == "" or address == outer or address.startswith(outer + ".")


def blind_spots(
    found: Mapping[tuple[str, str], list[str]], type_names: Mapping[str, str]
) -> tuple[BlindSpot, ...]:
    """The trace's blind spots from the recorder's ``(kind, where) -> labels`` table."""
    spots = []
    held: tuple[str, ...]
    for (kind, where), labels in found.items():
        template = _REASONS[kind]
        shown = ", ".join(labels[:3]) + (f" and {len(labels) - 3} more" if len(labels) > 3 else "")
        reason = template.format(
            type_name=type_names.get(where, "TorchScript"),
            labels=f"op{'s' if len(labels) > 1 else ''} {shown}"
            if labels
            else "its call raised before returning",
        )
        if kind == "vmap":
            subject = f"op {where}"
        else:
            subject = f"module {where!r}" if where != "(root)" else "the root module"
        # the ops inside a transform hold wrapped values, not what came out of it
        held = () if kind == "functorch_transform" else tuple(labels)
        spots.append(BlindSpot(cast(BlindSpotKind, kind), where, f"{subject} {reason}", held))
    return tuple(spots)
