"""``tl.debug``: analyses of a trace, a model or a tensor, each returning a typed report.

One subpackage per capability, each re-exporting its public names: ``nonfinite`` (NaN forensics),
``lineage``, ``gradients``, ``activations``, ``grad_fn`` (autograd graphs), ``attention_sinks``,
``compare``, ``cost``, ``model`` (doctor, shapes, compiles) and ``audit`` (``trace.audit()``).
Shared machinery: ``_isolation`` (the isolated-rerun harness) and ``_host_sync`` (batched reads).
The checks kit lives in ``torchlens_nb.checks`` and is re-exported here, as the spec spells it.
"""

from ..checks import ChecksSession, param_health, param_health_rows
from ..errors import CheckViolationError
from ..report import FirstBadThing, InvestigationReport, OutlierDim, SinkHead
from ._isolation import clone_input_tree, isolated_capture, preserved_rng_state
from .activations import (
    LivenessProbe,
    RangeProbe,
    dead,
    dead_neurons,
    dead_neurons_rows,
    dtype_range,
    dtype_range_rows,
    threshold,
)
from .attention_sinks import SinkProbe, attention_sinks
from .compare import (
    bisect_precision,
    check_determinism,
    compare,
    compare_params,
    compare_rows,
    first_divergence,
)
from .cost import flops_vs_dispatch, hot_path, hot_path_rows, op_flops, recompute_candidates
from .grad_fn import sketch_grad_fn, walk_grad_fn
from .gradients import grad_health, grad_health_rows
from .lineage import lineage
from .model import CompileCounts, count_compiles, graph_breaks, guess_input_shape
from .nonfinite import (
    amp_scaled_grads_hint,
    bisect_nan,
    bisect_nan_backward,
    find_nan,
    find_nan_in_trace,
    investigate,
    nonfinite_origin,
)

__all__: list[str] = [
    "CheckViolationError",
    "ChecksSession",
    "CompileCounts",
    "FirstBadThing",
    "InvestigationReport",
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
    "investigate",
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
