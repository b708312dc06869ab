"""NaN forensics: where a NaN/Inf was born, forward (find_nan, bisect_nan, nonfinite_origin),
backward (bisect_nan_backward), or in one replayed training step (investigate)."""

from ._backward import bisect_nan_backward
from ._find import bisect_nan, find_nan, find_nan_in_trace
from ._investigate import investigate
from ._origin import nonfinite_origin
from ._texts import amp_scaled_grads_hint

__all__ = [
    "amp_scaled_grads_hint",
    "bisect_nan",
    "bisect_nan_backward",
    "find_nan",
    "find_nan_in_trace",
    "investigate",
    "nonfinite_origin",
]
