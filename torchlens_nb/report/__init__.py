"""Reports: the plain, immutable results every diagnostic returns (``tl.report``)."""

from ._base import SCHEMA, Exit, Finding, Report, Table, Unavailable, Where, frozen_mapping
from ._display import live_panel
from .checks import CheckReport, CheckRun, ParamHealthReport, ParamHealthRow, SessionOverhead
from .compare import (
    BisectPrecisionReport,
    CompareParamsReport,
    CompareReport,
    DeterminismReport,
    PrecisionRow,
    RngOp,
    SkippedOp,
)
from .cost import FlopsVsDispatchReport, HotPathReport, RecomputeReport
from .doctor import DoctorCheck, DoctorReport, capabilities, doctor
from .grad_fn import (
    STRUCTURE_ONLY_LEGEND,
    GradFnEdge,
    GradFnGroup,
    GradFnNode,
    GradFnOutput,
    GradFnSketch,
    SavedShape,
)
from .lineage import LineageNode, LineageReport
from .nonfinite import (
    BackwardNanReport,
    BisectNanReport,
    FindNanReport,
    FirstBadThing,
    NonfiniteReport,
    NonfiniteScanReport,
    TransitionRow,
    ValueStats,
)
from .grad_health import (
    CheckOutcome,
    DeadNeuronsReport,
    DTypeRangeReport,
    GradHealthReport,
    HealthReport,
)
from .probing import GraphBreaksReport, GuessInputShapeReport, ShapeProbe
from .recipe_flow import (
    BroadcastSite,
    DependencyReport,
    Leak,
    LeakageReport,
    PrimeDimsReport,
    ShapeBreak,
    StageResult,
)
from .recipe_training import (
    FrontierOp,
    GradientFlowReport,
    LayerRatio,
    OverfitReport,
    ParamGrad,
    ParamWeights,
    UpdateRatioReport,
    WeightDistributionReport,
)
from .recipes import (
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
from .sinks import AttentionSinksReport, OutlierDim, SinkHead
from .probes import (
    DeadReport,
    DeadUnits,
    LivenessReport,
    LivenessStat,
    RangeReport,
    RangeStat,
    RangeViolation,
    ThresholdReport,
)

__all__ = [
    "live_panel",
    "CheckReport", "CheckRun", "ParamHealthReport", "ParamHealthRow", "SessionOverhead",
    "BackwardNanReport", "BisectNanReport", "FindNanReport", "FirstBadThing", "LineageNode",
    "LineageReport", "NonfiniteReport", "NonfiniteScanReport", "TransitionRow", "ValueStats",
    "SCHEMA", "DoctorCheck", "DoctorReport", "Exit", "Finding", "Report", "Table", "Unavailable",
    "Where", "capabilities", "doctor", "frozen_mapping",
    "STRUCTURE_ONLY_LEGEND", "GradFnEdge", "GradFnGroup", "GradFnNode", "GradFnOutput",
    "GradFnSketch", "SavedShape",
    "CheckOutcome", "DTypeRangeReport", "DeadNeuronsReport", "GradHealthReport", "HealthReport",
    "DeadReport", "DeadUnits", "LivenessReport", "LivenessStat", "RangeReport", "RangeStat",
    "RangeViolation", "ThresholdReport", "AttentionSinksReport", "OutlierDim", "SinkHead",
    "BisectPrecisionReport", "CompareParamsReport", "CompareReport", "DeterminismReport",
    "FlopsVsDispatchReport", "GraphBreaksReport", "GuessInputShapeReport", "HotPathReport",
    "PrecisionRow", "RecomputeReport", "RngOp", "ShapeProbe", "SkippedOp",
    "BroadcastSite", "ClassBalanceReport", "ClassCount", "ConfidentError", "ConfidentErrorsReport",
    "DataSanityReport", "DependencyReport", "FieldSummary", "FrontierOp", "GradientFlowReport",
    "Histogram", "InitLossReport", "LayerRatio", "Leak", "LeakageReport", "OverfitReport",
    "ParamGrad", "ParamWeights", "PrimeDimsReport", "RandomInputReport", "ShapeBreak",
    "StageResult", "TensorStats", "UpdateRatioReport", "WeightDistributionReport",
]
