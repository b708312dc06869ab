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


def unless_blind(
    status: Status, lead: str, trace: Trace, instead: Status, *, clean: str = "clean"
) -> tuple[Status, str]:
    """``(instead, lead + what was not seen)`` for a ``clean`` verdict (the report's word for
    it, ``"clean"`` unless told) on a trace with blind spots, else ``(status, lead)``: the lead
    never sounds clean above a status that is not."""
    if status != clean or not trace.blind_spots:
        return status, lead
    return instead, f"{lead.rstrip('.')}; {not_seen_text(trace)}."


def not_seen_text(trace: Trace) -> str:
    """``the capture could not see inside module 'inner' (TorchScript)`` and the like."""
    words = {
        "opaque_module": "TorchScript",
        "vmap": "torch.vmap",
        "functorch_transform": "a torch.func transform",
        "untracked_input": "tensors of unknown origin",
    }
    places = [f"{spot.where!r} ({words[spot.kind]})" for spot in trace.blind_spots[:3]]
    more = len(trace.blind_spots) - len(places)
    return (
        "the capture could not see inside "
        + ", ".join(places)
        + (f" and {more} more" if more > 0 else "")
    )
