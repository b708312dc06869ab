"""``trace.audit()``: every trace-local health diagnostic one capture supports, in one report.

What runs: ``find_nan`` (saved values) always; ``bisect_nan`` on a full-coverage trace
(``save=True``); ``dtype_range`` always; ``grad_health`` and ``bisect_nan_backward`` when the
trace saved gradients and has exactly one backward pass. Everything else is listed in
``skipped`` with the reason, and never counted as a check that ran: the diagnostics that need
more than the trace (a second trace, a fresh execution, a start op, a ``bwd=`` selection,
several samples).
"""

from __future__ import annotations

import dataclasses

from ...capture import PartialTrace, Trace
from ...capture._gc_pause import paused_gc
from ...errors import DiagnosticArgumentError
from ...report import Exit, Report, Unavailable
from ...report._audit import CheckOutcome, HealthReport, HealthStatus
from ..activations._dtype_range import dtype_range
from ..gradients._grad_health import grad_health
from ..nonfinite._backward import bisect_nan_backward
from ..nonfinite._find import saved_scans

_NEEDS_MORE = (
    ("compare", "needs a second trace: tl.debug.compare(trace, other)."),
    (
        "check_determinism",
        "needs fresh executions of the model: tl.debug.check_determinism(model, inputs).",
    ),
    (
        "bisect_precision",
        "needs a fresh execution at reference precision: tl.debug.bisect_precision(model, inputs).",
    ),
    ("lineage", "needs a start op: tl.debug.lineage(trace, label)."),
    (
        "dead_neurons",
        "one trace is one sample and a dead-unit verdict needs several: "
        "tl.debug.dead_neurons(trace) shows this sample, tl.dead([...]) decides.",
    ),
)
"""Diagnostics the audit never runs, and what each needs beyond the trace."""


@paused_gc()
def audit(trace: Trace) -> HealthReport:
    """Run every trace-local health diagnostic on ``trace`` (``trace.audit()``).

    Accepts a completed ``Trace`` or a ``PartialTrace`` (the ops recorded before the forward
    raised). Reads saved values and gradients only; runs nothing and changes nothing.

    Returns:
        A :class:`~torchlens_nb.report.HealthReport`: ``checks_run`` (names, in run order),
        ``skipped`` (``Unavailable`` entries with the reason), ``outcomes`` (status and lead of
        each check) and the merged findings, each with ``fields["check"]``. Its ``open``
        action (``check=name``) returns the full report of a check that ran.

    Example:
        >>> import torch
        >>> from torch import nn
        >>> import torchlens_nb as tl
        >>> report = tl.trace(nn.ReLU(), torch.tensor([[-1.0, 2.0]])).audit()
        >>> report.checks_run, len(report.skipped) > 0
        (('find_nan', 'bisect_nan', 'dtype_range'), True)
    """
    if not isinstance(trace, Trace):
        raise DiagnosticArgumentError(
            f"audit needs a Trace or PartialTrace (tl.trace(model, inputs)), got "
            f"{type(trace).__name__}."
        )
    first_nan, bisected = saved_scans(trace)
    ran: list[tuple[str, Report]] = [("find_nan", first_nan)]
    skipped: list[Unavailable] = []
    if bisected is not None:
        ran.append(("bisect_nan", bisected))
    else:
        skipped.append(
            _skip(
                "bisect_nan",
                "needs a full-coverage trace (save=True); this one "
                "saved a selection, find_nan scoped its answer.",
            )
        )
    ran.append(("dtype_range", dtype_range(trace)))
    grad_reason = _grad_health_gap(trace)
    if grad_reason is None:
        ran.append(("grad_health", grad_health(trace)))
        ran.append(("bisect_nan_backward", bisect_nan_backward(trace)))
    else:
        skipped.append(_skip("grad_health", grad_reason))
        skipped.append(_skip("bisect_nan_backward", grad_reason))
    skipped.extend(_skip(name, reason) for name, reason in _NEEDS_MORE)
    reports = dict(ran)
    findings = [
        dataclasses.replace(f, fields={**f.fields, "check": name})
        for name, report in ran
        for f in report.findings
    ]
    outcomes = tuple(
        CheckOutcome(name, r.report_type, r.status, r.lead, len(r.findings)) for name, r in ran
    )
    found = [o.check for o in outcomes if o.status == "found"]
    status: HealthStatus
    if found:
        status = "found"
        lead = f"{', '.join(found)} found problems; {len(ran)} checks ran, {len(skipped)} skipped."
    elif trace.is_partial and all(o.status == "clean" for o in outcomes):
        status = "partial"
        lead = (
            f"{len(ran)} checks found nothing in the {len(trace)} ops recorded before the "
            "forward raised; the rest never ran."
        )
    elif all(o.status == "clean" for o in outcomes):
        status, lead = "clean", f"{len(ran)} checks ran clean; {len(skipped)} skipped."
    else:
        status = "partial"
        unsure = ", ".join(f"{o.check} ({o.status})" for o in outcomes if o.status != "clean")
        lead = f"nothing found, but not every check could decide: {unsure}."
    disclosures = []
    if isinstance(trace, PartialTrace):
        disclosures.append(
            f"partial trace: the forward stopped ({type(trace.exception).__name__})"
            f" after {len(trace)} ops; only those were audited."
        )
    disclosures.extend(
        f"{name} could not see everything: {item.reason}"
        for name, report in ran
        for item in report.unavailable
    )

    def open_check(check: str) -> Report:
        if check not in reports:
            raise DiagnosticArgumentError(
                f"no check {check!r} ran in this audit; ran: {sorted(reports)}."
            )
        return reports[check]

    return HealthReport(
        subject=f"{trace.model_type} ({len(trace)} ops{', partial' if trace.is_partial else ''})",
        status=status,
        lead=lead,
        findings=tuple(findings),
        disclosures=tuple(disclosures),
        unavailable=tuple(skipped),
        exits=tuple(
            Exit(
                f"Open {o.check}",
                f"tl.debug.{o.check}(trace)",
                action="open",
                args={"check": o.check},
            )
            for o in outcomes
            if o.num_findings
        ),
        actions={"open": open_check},
        checks_run=tuple(name for name, _ in ran),
        outcomes=outcomes,
    )


def _skip(check: str, reason: str) -> Unavailable:
    return Unavailable(check=check, reason=reason, code="skipped")


def _grad_health_gap(trace: Trace) -> str | None:
    """Why grad_health cannot run on this trace alone, or None when it can."""
    if not trace.options.save_grads:
        return (
            "needs gradients: capture with CaptureOptions(save_grads=True) and call "
            "trace.backward(loss)."
        )
    passes = len(trace.backward_passes)
    if passes == 0:
        return "needs a backward pass: call trace.backward(loss) first."
    if passes > 1:
        return (
            f"this trace has {passes} backward passes and needs a bwd= selection: "
            f"tl.debug.grad_health(trace, bwd=N), N in 0..{passes - 1}."
        )
    return None
