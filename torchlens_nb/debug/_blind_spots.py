"""What the capture could not see, carried onto every report built from its trace.

``Trace.blind_spots`` names the regions of a forward the capture could not look into (a
TorchScript module, a ``torch.vmap`` call, ops inside a ``torch.func`` transform, tensors of
unknown origin; ``capture/_blind_spots.py``). An analysis that found nothing in the rest must not
call the whole model clean: each region becomes a disclosure and an ``unavailable`` entry, and a
``"clean"`` verdict becomes the report's "could not decide everywhere" word
(``tests/faults/test_capture_trust.py`` runs every trace-reading analysis on a scripted block).
"""

from __future__ import annotations

from typing import TypeVar

from ..capture import Trace
from ..report import Unavailable

Status = TypeVar("Status", bound=str)


def blind_spot_disclosures(trace: Trace) -> tuple[str, ...]:
    """One sentence per blind spot: what was not seen and how to see it."""
    return tuple(f"not seen by the capture: {spot.reason}" for spot in trace.blind_spots)


def blind_spot_unavailable(trace: Trace, check: str) -> tuple[Unavailable, ...]:
    """One ``unavailable`` entry per blind spot, for the check ``check`` of the report."""
    return tuple(
        Unavailable(f"{check} inside {spot.where}", spot.reason, f"blind_spot_{spot.kind}")
        for spot in trace.blind_spots
    )


def unless_blind(status: Status, trace: Trace, instead: Status) -> Status:
    """``instead`` for a ``"clean"`` verdict on a trace with blind spots, else ``status``."""
    return instead if status == "clean" and trace.blind_spots else status
