"""Reports: the plain, immutable results every diagnostic returns (``tl.report``).

One private module per capability (``_nonfinite``, ``_lineage``, ``_gradients``, ``_activations``,
``_grad_fn``, ``_attention_sinks``, ``_compare``, ``_cost``, ``_model``, ``_audit``, ``_checks``,
``_recipes_*``, ``_triage``; ``_investigation`` holds ``tl.debug.investigate``'s report), the
same names as the folders of ``tl.debug``; every public name is re-exported here. Two analyses
are spelled under ``tl.report`` by the spec although they run code: ``doctor`` (with
``capabilities``) and ``flops_vs_dispatch``. They live in ``tl.debug`` and are
served here by name on first access (:func:`__getattr__`), the one exception to the layering
(report never imports debug at import time), recorded with its reason in
``tests/test_layering.py``.
"""

from typing import Any

from ._actions import LiveAction, live_action
from ._activations import (
    DeadNeuronsReport,
    DeadReport,
    DeadUnits,
    DTypeRangeReport,
    LivenessReport,
    LivenessStat,
    RangeReport,
    RangeStat,
    RangeViolation,
    ThresholdReport,
)
from ._attention_sinks import AttentionSinksReport, OutlierDim, SinkHead, UnseenAttention
from ._audit import CheckOutcome, HealthReport
from ._base import SCHEMA, Exit, Finding, Report, Table, Unavailable, Where, frozen_mapping
from ._checks import CheckReport, CheckRun, ParamHealthReport, ParamHealthRow, SessionOverhead
from ._compare import (
    BisectPrecisionReport,
    CompareParamsReport,
    CompareReport,
    DeterminismReport,
    PrecisionRow,
    RngOp,
    SkippedOp,
)
from ._cost import FlopsVsDispatchReport, HotPathReport, RecomputeReport
from ._display import live_dashboard, live_panel
from ._grad_fn import (
    STRUCTURE_ONLY_LEGEND,
    GradFnEdge,
    GradFnGroup,
    GradFnNode,
    GradFnOutput,
    GradFnReport,
    GradFnSketch,
    SavedShape,
)
from ._gradients import GradHealthReport
from ._investigation import InputFault, InvestigationReport
from ._lineage import LineageNode, LineageReport
from ._model import DoctorCheck, DoctorReport, GraphBreaksReport, GuessInputShapeReport, ShapeProbe
from ._nonfinite import (
    BackwardNanReport,
    BisectNanReport,
    FindNanReport,
    FirstBadThing,
    NonfiniteReport,
    NonfiniteScanReport,
    TransitionRow,
    ValueStats,
)
from ._recipes_data import (
    ClassBalanceReport,
    ClassCount,
    ConfidentError,
    ConfidentErrorsReport,
    DataSanityReport,
    FieldSummary,
    Histogram,
    InitLossReport,
    RandomInputReport,
    TensorStats,
)
from ._recipes_flow import (
    BroadcastSite,
    DependencyReport,
    Leak,
    LeakageReport,
    PrimeDimsReport,
    ShapeBreak,
    StageResult,
)
from ._recipes_silent import AutocastCoverageReport, DuplicateSamplesReport, EvalDeterminismReport
from ._recipes_training import (
    FrontierOp,
    GradientFlowReport,
    LayerRatio,
    OverfitReport,
    ParamGrad,
    ParamWeights,
    UpdateRatioReport,
    WeightDistributionReport,
)
from ._spike import SpikeReport
from ._triage import OutputLossReport, RootCause, SetupReport, TriageReport, TriageRow

__all__ = [
    "SCHEMA",
    "STRUCTURE_ONLY_LEGEND",
    "AttentionSinksReport",
    "AutocastCoverageReport",
    "BackwardNanReport",
    "BisectNanReport",
    "BisectPrecisionReport",
    "BroadcastSite",
    "CheckOutcome",
    "CheckReport",
    "CheckRun",
    "ClassBalanceReport",
    "ClassCount",
    "CompareParamsReport",
    "CompareReport",
    "ConfidentError",
    "ConfidentErrorsReport",
    "DTypeRangeReport",
    "DataSanityReport",
    "DeadNeuronsReport",
    "DeadReport",
    "DeadUnits",
    "DependencyReport",
    "DeterminismReport",
    "DoctorCheck",
    "DoctorReport",
    "DuplicateSamplesReport",
    "EvalDeterminismReport",
    "Exit",
    "FieldSummary",
    "FindNanReport",
    "Finding",
    "FirstBadThing",
    "FlopsVsDispatchReport",
    "FrontierOp",
    "GradFnEdge",
    "GradFnGroup",
    "GradFnNode",
    "GradFnOutput",
    "GradFnReport",
    "GradFnSketch",
    "GradHealthReport",
    "GradientFlowReport",
    "GraphBreaksReport",
    "GuessInputShapeReport",
    "HealthReport",
    "Histogram",
    "HotPathReport",
    "InitLossReport",
    "InputFault",
    "InvestigationReport",
    "LayerRatio",
    "Leak",
    "LeakageReport",
    "LineageNode",
    "LineageReport",
    "LiveAction",
    "LivenessReport",
    "LivenessStat",
    "NonfiniteReport",
    "NonfiniteScanReport",
    "OutlierDim",
    "OutputLossReport",
    "OverfitReport",
    "ParamGrad",
    "ParamHealthReport",
    "ParamHealthRow",
    "ParamWeights",
    "PrecisionRow",
    "PrimeDimsReport",
    "RandomInputReport",
    "RangeReport",
    "RangeStat",
    "RangeViolation",
    "RecomputeReport",
    "Report",
    "RngOp",
    "RootCause",
    "SavedShape",
    "SessionOverhead",
    "SetupReport",
    "ShapeBreak",
    "ShapeProbe",
    "SinkHead",
    "SkippedOp",
    "SpikeReport",
    "StageResult",
    "Table",
    "TensorStats",
    "ThresholdReport",
    "TransitionRow",
    "TriageReport",
    "TriageRow",
    "Unavailable",
    "UnseenAttention",
    "UpdateRatioReport",
    "ValueStats",
    "WeightDistributionReport",
    "Where",
    "capabilities",
    "doctor",
    "frozen_mapping",
    "live_action",
    "live_dashboard",
    "live_panel",
]


def __getattr__(name: str) -> Any:
    """Serve the analyses the spec spells under ``tl.report`` (see the module docstring)."""
    if name in ("capabilities", "doctor"):
        from ..debug import model

        return getattr(model, name)
    if name == "flops_vs_dispatch":
        from ..debug import cost

        return cost.flops_vs_dispatch
    raise AttributeError(f"module 'torchlens_nb.report' has no attribute {name!r}")
