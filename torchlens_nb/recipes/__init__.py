"""``tl.recipes``: the cheap checks practitioners paste into notebooks, one call each.

Every recipe returns a typed report (``tl.report.*Report``) whose findings carry the
expected value and what to do; tabular results carry a table and most reports draw a plotly chart
with ``report.figure()``. No recipe modifies the caller's model, optimizer, data or global RNG:
recipes that train work on a deep copy, the others restore train/eval flags, buffers and
``.grad`` exactly (tests/recipes/test_contract.py). ``triage`` runs the cheap ones in order on
copies and names the root cause first (tests/recipes/test_triage.py).
"""

from .data._confident import confident_errors
from .data._data import class_balance, data_sanity
from .flow._dependency import batch_independence, causal_dependency
from .flow._leakage import leakage_poison
from .flow._shapes import prime_dims
from .loss._loss import init_loss, random_input_test
from .training._gradients import gradient_flow
from .training._overfit import overfit_one_batch
from .training._update_ratio import update_ratio
from .training._weights import weight_distribution
from .triage._checks import CHECKS as TRIAGE_CHECKS
from .triage._triage import triage

__all__ = [
    "TRIAGE_CHECKS",
    "batch_independence",
    "causal_dependency",
    "class_balance",
    "confident_errors",
    "data_sanity",
    "gradient_flow",
    "init_loss",
    "leakage_poison",
    "overfit_one_batch",
    "prime_dims",
    "random_input_test",
    "triage",
    "update_ratio",
    "weight_distribution",
]

from .silent import autocast_coverage, duplicate_samples, eval_determinism

__all__ += ["autocast_coverage", "duplicate_samples", "eval_determinism"]
