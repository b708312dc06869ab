"""``tl.debug.find_nan`` (live), ``trace.find_nan()`` and ``tl.debug.bisect_nan`` (saved values).

The live form runs the forward once with ``save=False`` and a tripwire that checks each
floating-point op output (its ``aminmax``: NaN and Inf show in the extremes) and stops right
after the first NaN: an Inf does not stop it, since it may be an intentional infinity (a -inf
causal mask that softmax neutralises) and is an origin only if it reaches the output or a NaN.
No activation is kept, only the statistics of possible births. The saved forms read
a trace's payloads in one batch (one host sync per device); on a selective-save trace the result
names the unsaved ops that could hold the real origin (the uncertainty zone) instead of claiming
certainty. ``debug/_audit.py`` imports ``find_nan_in_trace`` and ``bisect_nan`` from here.
"""

from __future__ import annotations

from typing import Any

from ...capture import Trace
from ...capture._gc_pause import paused_gc
from ...errors import DiagnosticArgumentError
from ...report import Finding
from ...report._nonfinite import BisectNanReport, FindNanReport
from ._forward_scan import ForwardFacts, run_live, scan_saved
from ._origin import scan_report_fields
from ._texts import lead_text, status_of, subject_of


def find_nan(model: Any, inputs: Any = None, **trace_kwargs: Any) -> FindNanReport:
    """Run ``model`` once and name the first op whose NaN or Inf matters; stop at the first NaN.

    A NaN always matters; an Inf matters when it reaches the model output or a NaN (then the
    origin is the first op on that path): a -inf mask neutralised by softmax does not, so the run
    keeps going past it, and it is disclosed (``intentional_infinities``), not reported.
    Memory-light: the capture saves nothing (``save=False``) and keeps a few facts per op and the
    statistics of possible births; the model output and gradients are dropped. Cost: one
    reduction (``aminmax``) and one host sync per floating-point op output
    (``benchmarks/bench_nan.py`` measures it against a plain forward on GPT-2 small). Passing a
    ``Trace`` instead of a model scans its saved values, like ``trace.find_nan()``.

    Args:
        model: the ``nn.Module`` to run (or a ``Trace`` to scan, with no inputs).
        inputs: anything ``tl.trace`` accepts.
        **trace_kwargs: ``capture=CaptureOptions(...)`` (hook plans, source lines); ``save``
            may only be False.

    Returns:
        A ``FindNanReport``: ``found``, ``kind`` (``nan``/``inf``/``-inf``/``mixed``) and the op
        with its module, file:line and code; a clean result says how many outputs it checked
        (and which ops hold an infinity by design).

    Raises:
        DiagnosticArgumentError: ``save`` other than False or an unknown keyword.
        ModelTypeError, InputFormError: as ``tl.trace`` raises them (nothing was run).

    Example:
        >>> import torch
        >>> from torch import nn
        >>> class NonFinite(nn.Module):
        ...     def forward(self, x):
        ...         zeros = x - x
        ...         return zeros / zeros
        >>> live = find_nan(NonFinite(), torch.ones(1, 2))
        >>> live.found, live.kind, live.op
        (True, 'nan', 'div_1')
    """
    if isinstance(model, Trace):
        if inputs is not None or trace_kwargs:
            raise DiagnosticArgumentError(
                "find_nan(trace) scans the saved values and takes no inputs or options; "
                "for a live run pass the model: find_nan(model, inputs)."
            )
        return find_nan_in_trace(model)
    if inputs is None:
        raise DiagnosticArgumentError(
            f"find_nan needs inputs for {type(model).__name__}: find_nan(model, inputs)."
        )
    facts = run_live(model, inputs, stop_at_first=True, trace_kwargs=trace_kwargs)
    return _report(FindNanReport, facts, is_stopped_early=facts.is_stopped_early)


@paused_gc()
def find_nan_in_trace(trace: Trace) -> FindNanReport:
    """``trace.find_nan()``: the first saved op output holding a NaN, or an Inf that matters.

    Accepts a ``Trace`` or a ``PartialTrace``. Unsaved ops are never assumed finite: when one
    could hold the origin, ``uncertainty_zone`` lists them and ``is_certain`` is False.

    Example:
        >>> import torch
        >>> from torch import nn
        >>> import torchlens_nb as tl
        >>> t = tl.trace(nn.Identity(), torch.tensor([1.0, float("inf")]))
        >>> report = t.find_nan()
        >>> report.found, report.kind, report.op
        (True, 'inf', 'input_1')
    """
    return _report(FindNanReport, _scan(trace, "find_nan_in_trace"))


@paused_gc()
def bisect_nan(trace: Trace) -> BisectNanReport:
    """The first saved op, in execution order, whose output holds a NaN, or an Inf that matters.

    An Inf matters when it reaches the model output or a NaN (the same rule as every NaN tool);
    an intentional infinity (a -inf mask neutralised by softmax) is disclosed, not found.

    Never raises on a finite trace: ``found`` is False and the lead says how many outputs were
    checked. One batched pass over the saved values (one host sync per device). Pair it with
    ``lineage`` (the report's "Show lineage" action) to inspect the op's neighbourhood.

    Example:
        >>> import torch
        >>> from torch import nn
        >>> import torchlens_nb as tl
        >>> result = bisect_nan(tl.trace(nn.Identity(), torch.tensor([float("nan")])))
        >>> result.found, result.kind
        (True, 'nan')
    """
    return _report(BisectNanReport, _scan(trace, "bisect_nan"))


@paused_gc()
def saved_scans(trace: Trace) -> tuple[FindNanReport, BisectNanReport | None]:
    """``find_nan_in_trace`` and (on a full-coverage trace) ``bisect_nan`` from ONE read of the
    saved values: the audit runs both, and the read is most of their cost (on the 21,171-op
    trace of ``benchmarks/bench_audit.py`` each took about 0.26 s alone)."""
    facts = _scan(trace, "audit")
    found = _report(FindNanReport, facts)
    return found, _report(BisectNanReport, facts) if trace.save_all else None


def _scan(trace: Any, name: str) -> ForwardFacts:
    if not isinstance(trace, Trace):
        raise DiagnosticArgumentError(
            f"{name} needs a Trace (tl.trace(model, inputs)), got {type(trace).__name__}; for a "
            "model, run tl.debug.find_nan(model, inputs)."
        )
    return scan_saved(trace)


def _report(cls: type[Any], facts: ForwardFacts, **extra: Any) -> Any:
    label = facts.paths().origin
    fields = scan_report_fields(facts, label)
    thing = fields["first_bad_thing"]
    if thing is not None:
        fields["findings"].insert(
            0,
            Finding(
                "first_nonfinite",
                "critical",
                f"{thing.op} ({thing.func}) outputs {thing.kind}: {thing.stats.text()}.",
                where=thing.where(),
                remedy="show its lineage, or run tl.debug.nonfinite_origin "
                "to count what it poisoned.",
            ),
        )
    lead = lead_text(thing, facts, "first appears")
    disclosures = list(fields.pop("disclosures"))
    if extra.get("is_stopped_early"):
        last = facts.ops[-1].label
        where = "there" if last == label else f"at the first NaN ({last})"
        lead = lead[:-1] + f"; the run stopped {where}, after {len(facts.trace)} ops."
        disclosures.append(
            "the live run stopped at the first NaN: later ops never ran; "
            "tl.debug.nonfinite_origin(model, inputs) runs to the end and counts what the value "
            "poisoned."
        )
    return cls(
        subject=subject_of(facts),
        status=status_of(facts, thing is not None),
        lead=lead,
        disclosures=tuple(disclosures),
        **fields,
        **extra,
    )
