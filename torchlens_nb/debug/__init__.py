"""``tl.debug``: analyses of a trace, a model or a tensor, each returning a typed report."""

from ..checks import ChecksSession, param_health, param_health_rows
from ..errors import CheckViolationError
from ..report.nonfinite import FirstBadThing
from ..report.sinks import OutlierDim, SinkHead
from . import _audit  # noqa: F401  (registers trace.audit())
from ._attention import attention_sinks
from ._compare import compare, compare_params, compare_rows, first_divergence
from ._compile import CompileCounts, count_compiles, graph_breaks
from ._cost import hot_path, hot_path_rows, recompute_candidates
from ._dead import dead, threshold
from ._dead_neurons import dead_neurons, dead_neurons_rows
from ._determinism import check_determinism
from ._dtype_range import dtype_range, dtype_range_rows
from ._flops import flops_vs_dispatch, op_flops
from ._grad_fn import walk_grad_fn
from ._grad_health import grad_health, grad_health_rows
from ._isolation import clone_input_tree, isolated_capture, preserved_rng_state
from ._lineage import lineage
from ._nan import bisect_nan, find_nan, find_nan_in_trace
from ._nan_backward import bisect_nan_backward
from ._nonfinite import amp_scaled_grads_hint, nonfinite_origin
from ._precision import bisect_precision
from ._probes import LivenessProbe, RangeProbe
from ._shape_guess import guess_input_shape
from ._sinks import SinkProbe
from ._sketch import sketch_grad_fn

__all__: list[str] = [
    "CheckViolationError",
    "ChecksSession",
    "CompileCounts",
    "FirstBadThing",
    "LivenessProbe",
    "OutlierDim",
    "RangeProbe",
    "SinkHead",
    "SinkProbe",
    "amp_scaled_grads_hint",
    "attention_sinks",
    "bisect_nan",
    "bisect_nan_backward",
    "bisect_precision",
    "check_determinism",
    "clone_input_tree",
    "compare",
    "compare_params",
    "compare_rows",
    "count_compiles",
    "dead",
    "dead_neurons",
    "dead_neurons_rows",
    "dtype_range",
    "dtype_range_rows",
    "find_nan",
    "find_nan_in_trace",
    "first_divergence",
    "flops_vs_dispatch",
    "grad_health",
    "grad_health_rows",
    "graph_breaks",
    "guess_input_shape",
    "hot_path",
    "hot_path_rows",
    "isolated_capture",
    "lineage",
    "nonfinite_origin",
    "op_flops",
    "param_health",
    "param_health_rows",
    "preserved_rng_state",
    "recompute_candidates",
    "sketch_grad_fn",
    "threshold",
    "walk_grad_fn",
]
