"""``count_compiles`` (Dynamo compilation events across a block) and ``graph_breaks``.

Counts come from ``torch._dynamo.utils.counters`` (the ``HAS_DYNAMO_COMPILE_COUNTERS``
capability of ``tl.report.doctor``): ``frames["ok"]`` (frames Dynamo compiled, recompiles
included), ``frames["total"]`` (frames it tried), ``stats["unique_graphs"]`` and the
``graph_break`` reasons. Reading them never imports ``torch._dynamo``: before the first
``torch.compile`` call of a process the module is not loaded and every counter is zero.

Measured on torch 2.13 CPU (tests/compare/test_compile.py): a ``torch.compile``'d function
called inside ``tl.trace`` compiles 0 frames (the capture holds the ``force_eager`` stance and
warns that it does), and its next compiled call afterwards compiles none either (the cache from
before the capture is still valid).
"""

from __future__ import annotations

import importlib.util
import sys
from types import TracebackType
from typing import Any

import torch
from torch import nn

from ...capture import call_arguments, validate_model
from ...errors import CompileCountsUnavailableError, ForwardError, UnavailableError
from ...report import Finding, Table
from ...report._model import BREAK_COLUMNS, GraphBreaksReport
from .._isolation import clone_input_tree, copy_model, preserved_rng_state, seed_all


def _counters() -> dict[str, dict[str, int]]:
    """A snapshot of the Dynamo counters this module reads (all zero before Dynamo loads)."""
    utils = sys.modules.get("torch._dynamo.utils")
    counters = getattr(utils, "counters", None) if utils is not None else None
    if counters is None:
        return {"frames": {}, "stats": {}, "graph_break": {}}
    return {name: dict(counters.get(name, {})) for name in ("frames", "stats", "graph_break")}


class CompileCounts:
    """Dynamo compilation events counted across a ``with`` block (``tl.debug.count_compiles``).

    Inside the block the attributes read the live difference; after it they are frozen.
    """

    def __init__(self) -> None:
        if importlib.util.find_spec("torch._dynamo") is None:
            raise CompileCountsUnavailableError(
                "this torch build has no torch._dynamo, so there are no compile counters to "
                "read; count_compiles needs torch >= 2.0 with Dynamo."
            )
        utils = sys.modules.get("torch._dynamo.utils")
        if utils is not None and not hasattr(utils, "counters"):
            raise CompileCountsUnavailableError(
                "torch._dynamo.utils exposes no `counters` in this torch version; "
                "count_compiles cannot measure compilation events here."
            )
        self._start: dict[str, dict[str, int]] | None = None
        self._end: dict[str, dict[str, int]] | None = None

    def __enter__(self) -> CompileCounts:
        self._start, self._end = _counters(), None
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._end = _counters()

    def _delta(self, group: str, key: str | None) -> int:
        if self._start is None:
            return 0
        end = self._end if self._end is not None else _counters()
        if key is None:
            return sum(end[group].values()) - sum(self._start[group].values())
        return end[group].get(key, 0) - self._start[group].get(key, 0)

    @property
    def frames_compiled(self) -> int:
        """Frames Dynamo compiled in the block (first compiles and recompiles)."""
        return self._delta("frames", "ok")

    @property
    def frames_attempted(self) -> int:
        """Frames Dynamo tried to compile (``frames_compiled`` plus failures and skips)."""
        return self._delta("frames", "total")

    @property
    def unique_graphs(self) -> int:
        """FX graphs produced."""
        return self._delta("stats", "unique_graphs")

    @property
    def graph_breaks(self) -> int:
        """Graph breaks Dynamo hit."""
        return self._delta("graph_break", None)

    def __repr__(self) -> str:
        return (
            f"<CompileCounts frames_compiled={self.frames_compiled} "
            f"frames_attempted={self.frames_attempted} graph_breaks={self.graph_breaks}>"
        )


def count_compiles() -> CompileCounts:
    """Count Dynamo compilation events (including recompiles) across a ``with`` block.

    Raises:
        CompileCountsUnavailableError: the runtime exposes no Dynamo counters.

    Example:
        >>> with count_compiles() as counts:
        ...     pass
        >>> counts.frames_compiled
        0
    """
    return CompileCounts()


def _check_eager_accepts(model: nn.Module, args: Any, kwargs: Any) -> None:
    """Run one eager forward (no grad) of the copy: Dynamo accepts inputs the eager model
    rejects (it traces numpy arrays as tensors), so ``explain`` alone would report one clean
    graph for a call that fails without ``torch.compile`` (tests/faults/test_no_false_clean_
    recipes.py). Costs one forward of the copy; BatchNorm statistics it updates are the copy's.
    """
    try:
        with torch.no_grad():
            model(*args, **kwargs)
    except Exception as exc:
        raise ForwardError(
            f"the eager model rejects these inputs: {type(exc).__name__}: "
            f"{str(exc).strip().splitlines()[0] if str(exc).strip() else ''} (graph breaks are "
            "only meaningful for a forward that runs; the model was not touched: this ran on a "
            "copy). Fix the inputs so that model(inputs) runs.",
            None,
        ) from exc


def graph_breaks(model: nn.Module, inputs: Any) -> GraphBreaksReport:
    """Where ``torch.compile`` splits ``model``'s forward, by ``torch._dynamo.explain``.

    Runs one eager forward of a deep copy (cloned inputs, seeded under a preserved RNG; the
    inputs must be ones the eager model accepts), then one forward of it through Dynamo's
    explain backend, which builds FX graphs without compiling kernels. Side effect
    inherited from ``explain``: it calls ``torch._dynamo.reset()`` before and after, so every
    ``torch.compile``'d function in the process recompiles on its next call (disclosed in the
    report). A ``torch.compile``'d model is explained through its eager original.

    Raises:
        UnavailableError: code ``graph_breaks_unavailable`` when this torch has no
            ``torch._dynamo.explain``.
        ModelCopyError: the model cannot be deep-copied.
        ForwardError: the copy's eager forward, or its forward under ``explain``, raised (the
            cause is chained).
    """
    validate_model(model)
    args, kwargs = call_arguments(inputs)
    if importlib.util.find_spec("torch._dynamo") is None:
        raise UnavailableError(
            "this torch has no torch._dynamo, so graph breaks cannot be explained.",
            code="graph_breaks_unavailable",
        )
    import torch._dynamo  # heavy (about 1 s): loaded only when graph breaks are asked for

    explain = getattr(torch._dynamo, "explain", None)
    if explain is None:
        raise UnavailableError(
            "torch._dynamo.explain is missing in this torch version.",
            code="graph_breaks_unavailable",
        )
    original = getattr(model, "_orig_mod", model)
    with preserved_rng_state():
        seed_all(0)
        copy = copy_model(original)
        copy_args, copy_kwargs = clone_input_tree((args, kwargs))
        _check_eager_accepts(copy, copy_args, copy_kwargs)
        # explain's frames are not compile regions of the user (it resets Dynamo after): put
        # the frame counters back, else every later tl.trace warns that compiled code exists.
        frames = torch._dynamo.utils.counters["frames"]
        frames_before = dict(frames)
        try:
            result = explain(copy)(*copy_args, **copy_kwargs)
        except Exception as exc:  # the copy's forward (or Dynamo tracing it) raised
            raise ForwardError(
                f"the model's forward raised {type(exc).__name__} under torch._dynamo.explain: "
                f"{str(exc).strip().splitlines()[0] if str(exc).strip() else ''} (the model was "
                "not touched: explain ran on a copy); run model(inputs) eagerly to see it.",
                None,
            ) from exc
        finally:
            frames.clear()
            frames.update(frames_before)
    rows = []
    for index, reason in enumerate(result.break_reasons):
        frame = reason.user_stack[-1] if reason.user_stack else None
        rows.append(
            {
                "index": index,
                "reason": reason.reason.strip().splitlines()[0],
                "source_line": None if frame is None else f"{frame.filename}:{frame.lineno}",
                "code": None if frame is None else (frame.line or None),
            }
        )
    findings = tuple(
        Finding(
            "graph_break",
            "info",
            f"graph break: {row['reason']}",
            fields={"source_line": row["source_line"]},
        )
        for row in rows
    )
    return GraphBreaksReport(
        subject=type(original).__name__,
        status="breaks" if rows else "single_graph",
        lead=(
            f"{result.graph_count} graphs, {result.graph_break_count} graph break(s)"
            if rows
            else f"one graph of {result.op_count} ops, no graph break"
        ),
        findings=findings,
        tables=(Table.from_dicts("breaks", rows, BREAK_COLUMNS),),
        disclosures=(
            "torch._dynamo.explain reset Dynamo's caches: compiled functions in this "
            "process recompile on their next call",
        ),
        graph_count=result.graph_count,
        graph_break_count=result.graph_break_count,
        op_count=result.op_count,
    )
