"""The healthy population triage must stay silent on: the corpus loops' ``triage_setup()``
(tests/corpus, issue 42) and the triage-only set-ups of ``tests/corpus/triage_setups.py``."""

from __future__ import annotations

from collections.abc import Callable

from tests.corpus import LOOPS, TriageSetup
from tests.corpus.triage_setups import SETUPS


def population() -> dict[str, Callable[[], TriageSetup | None]]:
    """name -> builder of the user's objects (None: triage does not apply to that loop)."""
    found: dict[str, Callable[[], TriageSetup | None]] = {
        f"corpus/{loop.name}": loop.triage_setup for loop in LOOPS if loop.triage is not None
    }
    found.update({f"triage/{name}": build for name, build in SETUPS.items()})
    return found


def triage_arguments(setup: TriageSetup) -> dict[str, object]:
    return {
        "model": setup.model,
        "batch": setup.batch,
        "loss_fn": setup.loss_fn,
        "optimizer": setup.optimizer,
    }
