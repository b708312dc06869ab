"""Hook removal that an interrupt cannot leave half done (shared by capture and checks).

A ``RemovableHandle`` only exists once its ``register_*`` call returned, so a Ctrl-C between the
registration and the line that keeps the handle leaves a hook nobody can remove. Removing by the
hook's identity instead finds it wherever it got to, and does nothing when it is not there, so
the removal can be registered *before* the hook and retried (``_undo.py``,
``tests/faults/test_interrupts.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from torch import nn

if TYPE_CHECKING:
    from ._undo import Undo


def remove_hook(registry: dict[Any, Any], hook: object, *extra: dict[Any, Any]) -> None:
    """Remove every entry of ``registry`` whose value is ``hook``, and its key from ``extra``
    (the ``always_called`` / ``with_kwargs`` flag dicts torch keeps beside a hook dict)."""
    for key in [key for key, value in registry.items() if value is hook]:
        for flags in extra:  # first: an interrupt here leaves the hook, found again on retry
            flags.pop(key, None)
        del registry[key]


def add_forward_hooks(
    undo: Undo,
    module: nn.Module,
    *,
    pre: Callable[..., Any] | None = None,
    post: Callable[..., Any] | None = None,
) -> None:
    """Register ``pre`` as ``module``'s forward pre-hook and ``post`` as its forward hook, each
    removal added to ``undo`` (``_undo.Undo``) *before* its registration: whatever
    instant an interrupt arrives at, the undo finds the hook registered or not and removes it.
    The pattern it replaces, ``handles = [m.register_forward_hook(h) for m in ...]`` then a
    ``finally`` over the handles, left a hook on the model when a Ctrl-C landed inside the list
    comprehension (``tests/faults/test_interrupt_sweep_recipes.py``, ``gradient_flow``)."""
    if pre is not None:
        undo.add(partial(remove_hook, module._forward_pre_hooks, pre))
        module.register_forward_pre_hook(pre)
    if post is not None:
        undo.add(
            partial(
                remove_hook,
                module._forward_hooks,
                post,
                module._forward_hooks_always_called,
                module._forward_hooks_with_kwargs,
            )
        )
        module.register_forward_hook(post)
