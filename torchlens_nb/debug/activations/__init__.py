"""Activation values: dead neurons, dtype range, the range/liveness probes, tl.dead and tl.threshold."""

from ._dead import dead, threshold
from ._dead_neurons import dead_neurons, dead_neurons_rows
from ._dtype_range import dtype_range, dtype_range_rows
from ._probes import LivenessProbe, RangeProbe

__all__ = [
    "LivenessProbe",
    "RangeProbe",
    "dead",
    "dead_neurons",
    "dead_neurons_rows",
    "dtype_range",
    "dtype_range_rows",
    "threshold",
]
