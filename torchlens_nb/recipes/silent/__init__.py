"""Recipes for silent training bugs the ``ChecksSession`` cannot see from its hooks: one call
each, before training (``docs/training_checks.md``, "Silent bugs").

* :func:`eval_determinism` -- the model in ``eval()`` gives the same output twice on one batch;
* :func:`duplicate_samples` -- a loader's first batches hold no repeated rows or batches;
* :func:`autocast_coverage` -- no op autocast would cast runs in float32 inside its region.
"""

from ._autocast_coverage import autocast_coverage
from ._duplicate_samples import duplicate_samples
from ._eval_determinism import eval_determinism

__all__ = ["autocast_coverage", "duplicate_samples", "eval_determinism"]
