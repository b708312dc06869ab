"""Re-measure the public zoo's ground truth: train every case and its fix with the user's own
loop, score held-out data. Prints one line per case (copied into each case's ``measured``).
Not a test (a few CPU minutes):

    PYTHONPATH=. .venv/bin/python -m tests.triage_public.measure [heldout|heldout2|development]
"""

from __future__ import annotations

import sys

import torch

from ._kit import PublicCase, measure


def line(case: PublicCase) -> str:
    bug_first, bug_error = measure(case, broken=True)
    fix_first, fix_error = measure(case, broken=False)
    return f"bug error {bug_error:.3g} vs fix {fix_error:.3g} (first loss {bug_first:.3g} / {fix_first:.3g})"


def main() -> None:
    torch.set_num_threads(1)
    which = sys.argv[1] if len(sys.argv) > 1 else "heldout"
    if which == "heldout":
        from .heldout import HELDOUT as cases
    elif which == "heldout2":
        from .heldout2 import HELDOUT2 as cases
    else:
        from .development import DEVELOPMENT as cases
    for case in cases:
        print(f"{case.name!r}: {line(case)!r},", flush=True)


if __name__ == "__main__":
    main()
