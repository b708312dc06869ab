"""Reports that set two runs side by side: ``compare``, ``compare_params``, ``bisect_precision``
and ``check_determinism``.

Each is frozen plain data built by ``tl.debug`` (``debug/_compare.py``, ``debug/_precision.py``,
``debug/_determinism.py``). Row tables keep EXECUTION order (never alphabetical), so the first
diverged row of a table is the first divergence. The ``value_stats`` table holds the summary
statistics of both sides of every compared op, computed in Python, for the panel's detail view.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar, Literal

from ._base import PAYLOAD_EXCLUDED, Report, Table, frozen_mapping
from ._status import Tone, tones

RowStatus = Literal[
    "match",
    "value_diverged",
    "shape_diverged",
    "structure_diverged",
    "input_differs",
    "only_in_a",
    "only_in_b",
    "not_saved",
    "not_comparable",
]
"""Status of one compared op. ``input_differs`` marks an input op whose values differ: evidence
of different inputs, not a divergence of the model's computation."""
DIVERGED_STATUSES: tuple[RowStatus, ...] = (
    "value_diverged",
    "shape_diverged",
    "structure_diverged",
    "only_in_a",
    "only_in_b",
)
"""The statuses where two runs separate (value, shape or structure)."""

COMPARE_COLUMNS = (
    "op",
    "index_a",
    "index_b",
    "kind",
    "func",
    "module",
    "status",
    "shape_a",
    "shape_b",
    "dtype_a",
    "dtype_b",
    "max_abs_diff",
    "max_rel_diff",
    "mismatched",
    "numel",
    "allclose",
    "reason",
    "source_line",
)
"""Columns of the ``comparison`` table (``compare_rows`` row keys), in this order."""
VALUE_STATS_COLUMNS = ("op", "side", "min", "max", "mean", "std", "nan_count", "inf_count")
"""Columns of the ``value_stats`` table: one row per compared op and side (``a`` / ``b``)."""
COMPARE_PARAMS_COLUMNS = (
    "name",
    "kind",
    "status",
    "allclose",
    "shape_a",
    "shape_b",
    "dtype_a",
    "dtype_b",
    "max_abs_diff",
    "max_rel_diff",
    "mismatched",
    "numel",
    "reason",
)
"""Columns of the ``compare_params`` table: one row per qualified name, in model order."""

VIEW_ROWS = 300
"""Rows of the side-by-side view a payload carries: execution order from a little before the
first divergence, and separately the diverged rows; the full tables page from Python."""
VIEW_CONTEXT_ROWS = 20
"""Rows of agreement shown before the first divergence in the view."""


def _stats_by_op(tables: Sequence[Table]) -> dict[str, dict[str, dict[str, Any]]]:
    by_op: dict[str, dict[str, dict[str, Any]]] = {}
    for table in tables:
        if table.name == "value_stats":
            for row in table.dicts():
                by_op.setdefault(row.pop("op"), {})[row.pop("side")] = row
    return by_op


def divergence_view(
    rows: Sequence[dict[str, Any]],
    tables: Sequence[Table],
    first: str | None,
    *,
    side_a: str,
    side_b: str,
    sides: Callable[[dict[str, Any]], tuple[str, str]],
) -> dict[str, Any]:
    """The payload view of the comparison panel: a window of rows in execution order around
    the first divergence plus the diverged rows, each with both sides' value statistics.

    ``rows`` are table row dicts with ``op``, ``status`` (or ``is_diverged``), the error columns
    and ``source_line``; ``sides(row)`` gives the text of each side (shape and dtype).
    """
    stats = _stats_by_op(tables)
    items = []
    for position, row in enumerate(rows):
        diverged = row.get("is_diverged", row.get("status") in DIVERGED_STATUSES)
        text_a, text_b = sides(row)
        items.append(
            {
                "position": position,
                "op": row["op"],
                "func": row.get("func"),
                "module": row.get("module"),
                "kind": row.get("kind", "op"),
                "status": row.get("status", "diverged" if diverged else "match"),
                "is_diverged": bool(diverged),
                "a": text_a,
                "b": text_b,
                "max_abs": row.get("max_abs_diff", row.get("max_abs_err")),
                "max_rel": row.get("max_rel_diff", row.get("max_rel_err")),
                "mismatched": row.get("mismatched"),
                "numel": row.get("numel"),
                "reason": row.get("reason")
                or (f"rtol={row['rtol']:.2g}, atol={row['atol']:.2g}" if "rtol" in row else None),
                "source_line": row.get("source_line"),
                "stats_a": stats.get(row["op"], {}).get("a"),
                "stats_b": stats.get(row["op"], {}).get("b"),
            }
        )
    start = next((i for i, item in enumerate(items) if item["op"] == first), 0)
    start = max(0, start - VIEW_CONTEXT_ROWS)
    diverged_items = [item for item in items if item["is_diverged"]]
    return {
        "side_a": side_a,
        "side_b": side_b,
        "first": first,
        "offset": start,
        "total": len(items),
        "rows": items[start : start + VIEW_ROWS],
        "diverged": diverged_items[:VIEW_ROWS],
        "diverged_total": len(diverged_items),
    }


def _shape_dtype(row: dict[str, Any], side: str) -> str:
    shape, dtype = row.get(f"shape_{side}"), row.get(f"dtype_{side}")
    if shape is None and dtype is None:
        return "—"
    return f"{tuple(shape) if shape is not None else '?'} {dtype or ''}".strip()


def _compare_sides(row: dict[str, Any]) -> tuple[str, str]:
    return _shape_dtype(row, "a"), _shape_dtype(row, "b")


Verdict = Literal["repeatable_under_test", "nondeterminism_observed", "inconclusive"]
"""``check_determinism``'s answer to "do N isolated same-seed runs agree?" (never
"deterministic": agreement under test does not generalise to other inputs or machines)."""
SeedVerdict = Literal["seed_sensitive", "seed_insensitive", "not_run", "inconclusive"]
"""The second slot: does ONE differently seeded run change the outputs?"""


@dataclass(frozen=True, kw_only=True, repr=False)
class _SideBySideReport(Report):
    """A report the compare panel shows side by side: its ``mode`` and divergence ``view``."""

    payload_properties: ClassVar[tuple[str, ...]] = ("mode", "view")
    row_tones: ClassVar[Mapping[str, Tone]] = {  # one per RowStatus
        "match": "ok",
        "value_diverged": "critical",
        "shape_diverged": "critical",
        "structure_diverged": "critical",
        "input_differs": "info",
        "only_in_a": "warning",
        "only_in_b": "warning",
        "not_saved": "info",
        "not_comparable": "info",
    }

    @property
    def mode(self) -> str:
        """Which side-by-side view the panel draws (the report type)."""
        return self.report_type

    @property
    def view(self) -> dict[str, Any]:
        """The panel's view of the first divergence (see :func:`divergence_view`)."""
        raise NotImplementedError


@dataclass(frozen=True, kw_only=True, repr=False)
class CompareReport(_SideBySideReport):
    """Two traces aligned on op labels in execution order (``tl.debug.compare``).

    ``to_pandas()`` is the ``comparison`` table; its ``attrs`` carry the counts
    (``value_diverged``, ``shape_diverged``, ``structure_diverged``, ``only_in_a``, ...).
    """

    report_type = "compare"
    status_tones = tones({"match": "ok", "diverged": "warning", "incomplete": "warning"})
    status: Literal["match", "diverged", "incomplete"]
    """``incomplete``: nothing observed differs, but some tensors could not be compared (meta
    tensors hold no values; each is listed in ``unavailable``)."""
    rtol: float
    """Relative tolerance of the value comparison (``torch.allclose`` semantics)."""
    atol: float
    """Absolute tolerance of the value comparison."""
    first_divergence: str | None = None
    """Label of the first execution-order op where the runs separate, or None."""
    first_divergence_status: RowStatus | None = None
    """Row status of the first divergence (e.g. ``value_diverged``, ``shape_diverged``), or None."""
    counts: Mapping[str, int] = field(default_factory=frozen_mapping)
    """Rows per status plus ``compared`` (value comparisons made) and ``matched`` (aligned)."""
    alignment: Mapping[str, int] = field(default_factory=frozen_mapping)
    """How values were aligned (``same dtype and device``, ``in float64 (float32 vs float64)``,
    ``on cpu (cuda:0 vs cpu)``, ``exact (int64)``) -> number of compared rows."""
    coverage: str = ""
    """The card's coverage line: compared / aligned ops and the alignments used."""

    @property
    def view(self) -> dict[str, Any]:
        return divergence_view(
            self.table("comparison").dicts(),
            self.tables,
            self.first_divergence,
            side_a="trace_a",
            side_b="trace_b",
            sides=_compare_sides,
        )


@dataclass(frozen=True, kw_only=True, repr=False)
class CompareParamsReport(Report):
    """Two models' parameters (and optionally buffers) aligned on qualified names."""

    report_type = "compare_params"
    status_tones = tones({"match": "ok", "diverged": "warning", "incomplete": "warning"})
    status: Literal["match", "diverged", "incomplete"]
    """``incomplete``: nothing observed differs, but some tensors could not be compared (meta
    tensors hold no values; each is listed in ``unavailable``)."""
    rtol: float
    """Relative tolerance of the value comparison."""
    atol: float
    """Absolute tolerance of the value comparison."""
    include_buffers: bool
    """Whether buffers were compared too (``include_buffers=True``)."""
    counts: Mapping[str, int] = field(default_factory=frozen_mapping)
    """``matched`` (names in both), ``compared``, ``value_diverged``, ``skipped``,
    ``only_in_a``, ``only_in_b``."""


@dataclass(frozen=True)
class PrecisionRow:
    """One op of ``bisect_precision``: native output vs the high-precision reference."""

    op: str
    """Trace label of the op."""
    func: str
    """The torch function the op called."""
    module: str
    """Innermost module address (``""`` is the root module)."""
    dtype: str
    """Native output dtype; the tolerances derive from it."""
    rtol: float
    """Relative tolerance the op was judged with (``eps ** 0.5`` of its dtype)."""
    atol: float
    """Absolute tolerance the op was judged with (``eps * 10`` of its dtype)."""
    max_abs_err: float
    """Largest absolute difference from the reference."""
    max_rel_err: float
    """Largest relative difference from the reference."""
    mismatched: int
    """Elements beyond ``atol + rtol * |reference|``."""
    numel: int
    """Elements compared."""
    is_diverged: bool
    """True when some element is beyond the tolerance."""
    is_stochastic: bool
    """The op draws random numbers (dropout, rand*, bernoulli, ...)."""
    source_line: str | None
    """The op's own source line as ``file:line`` (None when unknown)."""


@dataclass(frozen=True)
class SkippedOp:
    """An op a comparison could not make, and why."""

    op: str
    """Trace label of the op."""
    reason: str
    """Why it was not compared."""


@dataclass(frozen=True, kw_only=True, repr=False)
class BisectPrecisionReport(_SideBySideReport):
    """The first op whose native output separates from a high-precision reference run."""

    report_type = "bisect_precision"
    status_tones = tones({"found": "findings", "clean": "ok", "inconclusive": "warning"})
    payload_properties = ("mode", "view", "first_divergence")
    status: Literal["found", "clean", "inconclusive"]
    """``inconclusive``: no op diverged, but some ops hold NaN/Inf in both runs, and agreeing
    non-finite values say nothing about precision (listed in ``skipped`` and ``unavailable``)."""
    found: bool
    """True when an op diverged."""
    op: str | None = None
    """Label of the first diverged op."""
    func_name: str | None = None
    """Its function name, e.g. ``"sub"`` for ``a - b``."""
    module: str | None = None
    """Innermost module address of the first diverged op."""
    is_stochastic: bool = False
    """The first divergence is a random op: likely a mask mismatch, not precision loss."""
    reference_dtype: str = "float64"
    """The dtype of the reference run's floating state (``float64``)."""
    seed: int = 0
    """The seed both runs were started from."""
    rows: tuple[PrecisionRow, ...] = field(default=(), metadata=PAYLOAD_EXCLUDED)
    """Every compared op in execution order (the panel reads them as the table)."""
    skipped: tuple[SkippedOp, ...] = ()
    """Ops not compared, with the reason (disclosed, never counted as agreeing)."""

    @property
    def first_divergence(self) -> str | None:
        """The first diverged op (``op``), under the name every side-by-side view reads."""
        return self.op

    @property
    def view(self) -> dict[str, Any]:
        return divergence_view(
            [asdict(r) for r in self.rows],
            self.tables,
            self.op,
            side_a="native",
            side_b=self.reference_dtype,
            sides=lambda row: (row["dtype"], self.reference_dtype),
        )


@dataclass(frozen=True)
class RngOp:
    """An op that consumes (or may consume) the global RNG, attributed to itself."""

    op: str
    """Trace label of the op."""
    func: str
    """The torch function the op called (e.g. ``dropout``)."""
    module: str
    """Innermost module address (``""`` is the root module)."""
    source_line: str | None
    """The op's own source line as ``file:line`` (None when unknown)."""


@dataclass(frozen=True, kw_only=True, repr=False)
class DeterminismReport(_SideBySideReport):
    """Do N isolated same-seed runs agree? (``tl.debug.check_determinism``)."""

    report_type = "determinism"
    status_tones = tones(
        {
            "repeatable_under_test": "ok",
            "nondeterminism_observed": "critical",
            "inconclusive": "warning",
        }
    )
    status: Verdict
    """The verdict (the same word as ``verdict``)."""
    verdict: Verdict
    """``repeatable_under_test``, ``nondeterminism_observed`` or ``inconclusive``; never
    "deterministic"."""
    seed_verdict: SeedVerdict = "not_run"
    """With ``seed_sensitivity=True``: does one differently seeded run change the outputs;
    ``not_run`` otherwise."""
    runs: int = 2
    """Same-seed runs compared (``runs=``)."""
    seed: int = 0
    """The seed every same-seed run started from."""
    total_runs: int = 0
    """Forward passes actually executed (``runs``, plus one with ``seed_sensitivity``)."""
    rtol: float | None = None
    """Relative tolerance (None: bitwise comparison)."""
    atol: float | None = None
    """None: bitwise comparison (NaN equal to NaN)."""
    first_divergence: str | None = None
    """Label of the first execution-order op where a run differs from run 0, or None."""
    divergent_runs: tuple[int, ...] = ()
    """Run indices (1-based after the reference run 0) that differ from run 0."""
    environment: Mapping[str, Any] = field(default_factory=frozen_mapping)
    """Witnesses: deterministic algorithms, cuDNN flags, CUBLAS_WORKSPACE_CONFIG, threads."""
    rng_ops: tuple[RngOp, ...] = ()
    """Ops that consume (or may consume) the global RNG."""

    @property
    def view(self) -> dict[str, Any]:
        return divergence_view(
            self.table("comparison").dicts() if self.tables else [],
            self.tables,
            self.first_divergence,
            side_a=f"run {self._shown_run()}",
            side_b="run 0",
            sides=_compare_sides,
        )

    def _shown_run(self) -> int:
        return int(self.tables[0].attrs.get("run", 1)) if self.tables else 1
