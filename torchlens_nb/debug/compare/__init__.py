"""Comparing runs: compare, compare_params, first_divergence, bisect_precision, check_determinism."""

from ._compare import compare, compare_params, compare_rows, first_divergence
from ._determinism import check_determinism
from ._precision import bisect_precision

__all__ = [
    "bisect_precision",
    "check_determinism",
    "compare",
    "compare_params",
    "compare_rows",
    "first_divergence",
]
