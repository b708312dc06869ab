"""``tl.debug.nonfinite_origin``: the op where a NaN/Inf that matters was born, and the fields
every forward NaN report shares (``scan_report_fields``).

The origin is the first op, in execution order, whose inputs are all finite, whose output is not,
and whose value reaches something that matters: a model output, a NaN, a parameter written in
place (``_paths``). Every later non-finite output carrying that value is counted as propagating,
never named as origin; an Inf consumed and neutralised on every path (a causal mask before
softmax) is disclosed as intentional. The tool never runs anomaly mode itself: a second
execution can mutate state and follow another stochastic path, so it prints the recipe.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ...capture import Trace
from ...errors import DiagnosticArgumentError
from ...report import Exit, Finding
from ...report._nonfinite import FirstBadThing, NonfiniteReport
from .._blind_spots import blind_spot_disclosures, blind_spot_unavailable
from .._values import first_bad_thing, where_of
from ..lineage._walk import lineage_action, lineage_of_facts
from ._forward_scan import ForwardFacts, run_live, scan_saved
from ._texts import (
    ANOMALY_EXIT,
    ANOMALY_RECIPE,
    BACKWARD_RECIPE,
    NOT_COVERED,
    amp_forward_hint,
    half_precision_note,
    hidden_text,
    intentional_text,
    lead_text,
    scope_text,
    status_of,
    subject_of,
)


def scan_report_fields(facts: ForwardFacts, label: str | None) -> dict[str, Any]:
    """Fields, findings, exits and actions common to the forward NaN reports."""
    trace = facts.trace
    paths = facts.paths()
    findings: list[Finding] = []
    exits: list[Exit] = []
    disclosures = [scope_text(facts), *blind_spot_disclosures(trace)]
    intentional = intentional_text(facts, paths)
    if intentional:
        disclosures.append(intentional)
    hidden = hidden_text(facts, paths)
    if hidden:
        disclosures.append(hidden)
    fields: dict[str, Any] = dict(
        mode=facts.mode,
        num_ops=len(trace),
        num_checked=facts.num_checked,
        num_unchecked=facts.num_unchecked,
        num_exact=facts.num_exact,
        coverage=facts.coverage,
        found=label is not None,
        intentional_infinities=paths.intentional,
        num_intentional=len(paths.intentional_holders),
        unavailable=blind_spot_unavailable(trace, "NaN/Inf check"),
    )
    if facts.forward_error is not None:
        error = facts.forward_error
        findings.append(
            Finding(
                "forward_raised",
                "warning",
                f"the forward raised {type(error).__name__}: {error} after {len(trace)} ops; later "
                "ops never ran and were not checked.",
                fields={"exception": type(error).__name__, "num_ops": len(trace)},
            )
        )
    if label is None:
        fields.update(kind=None, first_bad_thing=None)
        disclosures.append(NOT_COVERED)
        exits.append(Exit("Check the backward", BACKWARD_RECIPE))
        return dict(fields, findings=findings, disclosures=disclosures, exits=exits, actions={})
    facts.ensure_stats([label])
    op = trace[label]
    cause = paths.causes[label]
    thing = first_bad_thing(
        op, facts.stats[label], is_proven=cause == "birth", rows=facts.batch_rows(label)
    )
    fields.update(kind=thing.kind, first_bad_thing=thing)
    if cause == "unattributed":
        zone, size = facts.zone(label)
        fields["uncertainty_zone"] = zone
        findings.append(
            Finding(
                "uncertainty_zone",
                "warning",
                f"{size} unchecked op output{'s' if size != 1 else ''} upstream of {label} "
                f"({', '.join(zone[:4])}{', ...' if size > 4 else ''}) may hold the real origin.",
                where=where_of(op),
                remedy="recapture with save=True, or run tl.debug.find_nan(model, inputs) live",
                fields={"zone": zone, "zone_size": size},
            )
        )
    if paths.reach[label] == "maybe":
        disclosures.append(
            f"whether the value of {label} reaches the output is not known: it flows only "
            "into values that were not checked, or the forward ended before it was consumed."
        )
    # A live run leaves the user no trace to pass: its next step is the report's own action.
    call = (
        f"tl.debug.lineage(trace, {label!r}, direction='both', max_depth=1)"
        if facts.mode == "saved"
        else f"report.run_action('lineage', label={label!r})"
    )
    exits.append(
        Exit(
            "Show lineage",
            call,
            action="lineage",
            args={"label": label},
        )
    )
    role = "origin" if thing.is_proven else "first non-finite seen"
    fields["lineage_role"] = role
    fields.update(lineage_fields(facts, label, role))
    actions = {
        "lineage": lineage_action(
            trace, metadata_only(facts), label, role, label=label, direction="both"
        ),
        "expand": lineage_action(trace, metadata_only(facts), label, role),
    }
    return dict(fields, findings=findings, disclosures=disclosures, exits=exits, actions=actions)


def metadata_only(facts: ForwardFacts) -> ForwardFacts | None:
    """The live record without the forward's exception (its traceback would pin frames); None
    for a saved trace (the lineage then reads the saved values, holding the trace weakly)."""
    if facts.mode == "saved":
        return None
    return dataclasses.replace(facts, forward_error=None, nonfinite_params={}, _paths=None)


def lineage_fields(facts: ForwardFacts, label: str, role: str) -> dict[str, Any]:
    """``lineage_nodes``: the first ring both ways around ``label`` (the panel starts there)."""
    nodes = lineage_of_facts(
        facts.trace,
        label,
        direction="both",
        max_depth=1,
        facts=metadata_only(facts),
        highlight=label,
        highlight_role=role,
    ).nodes
    return {"lineage_nodes": nodes}


def nonfinite_origin(
    trace_or_model: Any, inputs: Any = None, **trace_kwargs: Any
) -> NonfiniteReport:
    """Name the op where a NaN/Inf that matters was born: module, file:line, code, what it poisoned.

    ``nonfinite_origin(trace)`` reads the trace's saved values (no rerun);
    ``nonfinite_origin(model, inputs, capture=...)`` runs one memory-light forward that checks
    every floating-point op output as it is produced and keeps none of them (one reduction and
    one host sync per op; only the statistics of possible births are kept).

    The origin is the first op whose inputs are all finite, whose output is not, and whose value
    reaches a model output, a NaN or a parameter written in place. A NaN always counts; an Inf
    consumed and neutralised on every path (a -inf causal mask that softmax turns into 0, a -inf
    sentinel removed by clamp, where, max, masked_fill or an integer cast) does not: it is
    listed in ``intentional_infinities`` and disclosed, never the headline. Later non-finite
    outputs carrying the origin's value are counted as propagating (per birth), never named as
    origin. With unsaved inputs the origin is marked unproven and the unchecked ops that could
    hold it are listed (``uncertainty_zone``). A clean result is scoped to the values checked.
    NaNs born in backward and errors inside custom autograd Functions are outside a forward scan:
    the report carries the ``torch.autograd.set_detect_anomaly`` recipe, which it never runs.

    Raises:
        DiagnosticArgumentError: a trace with inputs, a model without inputs, or bad keywords.
        ModelTypeError, InputFormError: for the live form, as ``tl.trace`` raises them.

    Example:
        >>> import torch
        >>> from torch import nn
        >>> report = nonfinite_origin(nn.Sequential(nn.Identity()), torch.tensor([[-1.0]]).log())
        >>> report.status, report.origin.op, report.origin.kind
        ('found', 'input_1', 'nan')
    """
    if isinstance(trace_or_model, Trace):
        if inputs is not None or trace_kwargs:
            raise DiagnosticArgumentError(
                "nonfinite_origin(trace) reads the saved values and takes no inputs or capture "
                "options; for a live run call nonfinite_origin(model, inputs)."
            )
        facts = scan_saved(trace_or_model)
    else:
        if inputs is None:
            raise DiagnosticArgumentError(
                f"nonfinite_origin takes a Trace, or a model and its inputs; got "
                f"{type(trace_or_model).__name__} without inputs."
            )
        facts = run_live(trace_or_model, inputs, stop_at_first=False, trace_kwargs=trace_kwargs)
    return origin_report(facts)


def origin_report(facts: ForwardFacts) -> NonfiniteReport:
    """Build the :class:`NonfiniteReport` of ``facts``."""
    paths = facts.paths()
    label = paths.origin
    common = scan_report_fields(facts, label)
    findings = list(common.pop("findings"))
    disclosures = list(common.pop("disclosures"))
    thing = common["first_bad_thing"]
    half = half_precision_note(facts)
    if half:
        disclosures.insert(1, half)
    if thing is not None:  # a clean scan already carries it
        disclosures.append(NOT_COVERED)
    params = _nonfinite_params(facts, label)
    mattering = paths.mattering
    propagated = len(paths.carried)
    if thing is not None:
        assert label is not None
        findings.append(_origin_finding(facts, thing, facts.nonfinite_params.get(label, ())))
        findings.append(_propagation_finding(facts, label, len(mattering)))
        if paths.other_births:
            births = paths.other_births
            findings.append(
                Finding(
                    "other_births",
                    "warning",
                    f"{len(births)} other op{'s' if len(births) != 1 else ''} also turned finite "
                    f"inputs into a non-finite output that matters ({', '.join(births[:4])}); "
                    "judged from the values their inputs had when produced.",
                    fields={"labels": births},
                )
            )
        if facts.mode == "saved" and facts.trace[label].param_names:
            disclosures.append(
                f"parameters of {label} ({', '.join(facts.trace[label].param_names)}) are not "
                "in a trace and were not checked; nonfinite_origin(model, inputs) checks them."
            )
    elsewhere = tuple(p for p in params if p not in facts.nonfinite_params.get(label or "", ()))
    if elsewhere:
        findings.append(
            Finding(
                "nonfinite_parameters",
                "critical",
                f"{len(elsewhere)} parameter{'s' if len(elsewhere) != 1 else ''} read by this "
                f"forward hold NaN/Inf: {', '.join(elsewhere[:4])}"
                f"{', ...' if len(elsewhere) > 4 else ''}.",
                remedy="tl.debug.param_health(model) lists every non-finite parameter.",
                fields={"params": elsewhere},
            )
        )
    lead = lead_text(thing, facts, "born")
    if thing is not None:
        ops = "op propagates" if propagated == 1 else "ops propagate"
        lead = lead[:-1] + f"; {propagated} downstream {ops} it."
    common["exits"] = (*common["exits"], ANOMALY_EXIT)
    return NonfiniteReport(
        subject=subject_of(facts),
        status=status_of(facts, thing is not None),
        lead=lead,
        findings=tuple(findings),
        disclosures=tuple(disclosures),
        **common,
        num_nonfinite=len(mattering),
        num_propagated=propagated,
        num_unattributed=sum(
            1 for lab in mattering if paths.causes[lab] == "unattributed" and lab != label
        ),
        other_births=paths.other_births,
        nonfinite_params=params,
        reaches_output=paths.reaches_output,
        amp_hint=amp_forward_hint(facts.trace[label], thing.kind) if label and thing else "",
        anomaly_recipe=ANOMALY_RECIPE,
    )


def _nonfinite_params(facts: ForwardFacts, origin: str | None) -> tuple[str, ...]:
    """Every non-finite parameter an op read, the origin's first, then in execution order."""
    order = [origin] if origin else []
    order += [op.label for op in facts.ops if op.label in facts.nonfinite_params]
    return tuple(dict.fromkeys(p for lab in order for p in facts.nonfinite_params.get(lab, ())))


def _propagation_finding(facts: ForwardFacts, label: str, num_mattering: int) -> Finding:
    paths = facts.paths()
    count = len(paths.carried)
    text = f"{count} downstream op output{'s merely propagate' if count != 1 else ' merely propagates'} it"
    if label not in facts.nan:
        first_nan = next((lab for lab in paths.carried if lab in facts.nan), None)
        if first_nan is not None:
            text += f"; it becomes NaN at {first_nan}"
    text += "; it reaches the model output." if paths.reaches_output else "."
    return Finding(
        "propagation",
        "info",
        text,
        fields={
            "num_nonfinite": num_mattering,
            "num_propagated": count,
            "num_other": num_mattering - 1 - count,
        },
    )


def _origin_finding(facts: ForwardFacts, thing: FirstBadThing, params: tuple[str, ...]) -> Finding:
    op = facts.trace[thing.op or ""]
    stats = thing.stats
    assert stats is not None
    if op.is_input:
        return Finding(
            "nonfinite_input",
            "critical",
            f"the model input {op.label} already holds {thing.kind} ({stats.text()}): "
            "the value comes from the data, not the model.",
            where=where_of(op),
            remedy="check the batch (and its preprocessing) for "
            "NaN/Inf before the forward: torch.isfinite(x).all().",
            fields={"stats": stats},
        )
    if params:
        return Finding(
            "nonfinite_parameter",
            "critical",
            f"{op.label} reads non-finite parameter(s) {', '.join(params)}: the value "
            "was born before this forward (an optimizer step or a checkpoint).",
            where=where_of(op),
            remedy="inspect the last optimizer step (clip with "
            "error_if_nonfinite=True) or the checkpoint that set these weights.",
            fields={"params": params, "stats": stats},
        )
    proof = "finite inputs (all checked)" if thing.is_proven else "inputs that were not all checked"
    return Finding(
        "nonfinite_origin",
        "critical",
        f"{op.label} ({op.func}) turned {proof} into {thing.kind}: {stats.text()}.",
        where=where_of(op),
        remedy="inspect this line's inputs (lineage shows them) and guard the "
        "operation's domain (clamp, eps, a safe softmax).",
        fields={"stats": stats, "is_proven": thing.is_proven},
    )
