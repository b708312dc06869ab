"""Reports of the recipes for silent bugs the training checks cannot see (``tl.recipes``:
``eval_determinism``, ``duplicate_samples``, ``autocast_coverage``).

Each is a :class:`~._recipes_data.RecipeReport` (``pass`` / ``warn`` / ``fail`` from the worst
finding) with one table; the table panel renders them.
"""

from __future__ import annotations

from dataclasses import dataclass

from ._recipes_data import RecipeReport


@dataclass(frozen=True, kw_only=True, repr=False)
class EvalDeterminismReport(RecipeReport):
    """The model in ``eval()`` run twice on one batch: do the outputs agree bitwise?"""

    report_type = "eval_determinism"
    passes: int
    """Forward passes compared (the ``passes`` argument, >= 2)."""
    max_abs_diff: float
    """Largest elementwise difference between the passes' outputs (0.0: bitwise the same)."""
    first_module: str | None
    """The module where the passes first parted ("" for the root's own code), if any."""


@dataclass(frozen=True, kw_only=True, repr=False)
class DuplicateSamplesReport(RecipeReport):
    """Hashes of the rows of a loader's first batches: rows and batches seen more than once."""

    report_type = "duplicate_samples"
    batches: int
    """Batches read from the loader."""
    rows: int
    """Rows (samples) hashed over those batches."""
    duplicate_rows: int
    """Rows whose bytes equal an earlier row's."""
    duplicate_batches: int
    """Batches whose every row equals the rows of an earlier batch, in order."""


@dataclass(frozen=True, kw_only=True, repr=False)
class AutocastCoverageReport(RecipeReport):
    """The ops of one forward under autocast that autocast would cast but ran in float32."""

    report_type = "autocast_coverage"
    dtype: str
    """The autocast dtype the forward ran under (``"bfloat16"`` or ``"float16"``)."""
    eligible_ops: int
    """Ops of autocast's lower-precision list seen (matmuls, convolutions, linear)."""
    float32_ops: int
    """Of those, the ones whose floating inputs were float32: they escaped autocast."""
