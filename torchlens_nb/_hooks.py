"""Hook removal that an interrupt cannot leave half done (shared by capture and checks).

A ``RemovableHandle`` only exists once its ``register_*`` call returned, so a Ctrl-C between the
registration and the line that keeps the handle leaves a hook nobody can remove. Removing by the
hook's identity instead finds it wherever it got to, and does nothing when it is not there, so
the removal can be registered *before* the hook and retried (``capture/_installs.py``,
``tests/faults/test_interrupts.py``).
"""

from __future__ import annotations

from typing import Any


def remove_hook(registry: dict[Any, Any], hook: object, *extra: dict[Any, Any]) -> None:
    """Remove every entry of ``registry`` whose value is ``hook``, and its key from ``extra``
    (the ``always_called`` / ``with_kwargs`` flag dicts torch keeps beside a hook dict)."""
    for key in [key for key, value in registry.items() if value is hook]:
        for flags in extra:  # first: an interrupt here leaves the hook, found again on retry
            flags.pop(key, None)
        del registry[key]
