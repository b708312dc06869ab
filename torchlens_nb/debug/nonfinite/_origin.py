"""``tl.debug.nonfinite_origin``: the op where a NaN/Inf was born, and the texts every NaN tool
shares (the AMP/GradScaler hint, the anomaly-mode recipe, the scope sentence, the lead).

The origin is the first op, in execution order, whose inputs are all finite and whose output is
not (see ``_forward_scan``); every later non-finite output downstream of it is counted as merely
propagating. The tool never runs anomaly mode itself: a second execution can mutate state and
follow another stochastic path, so it prints the recipe for the user to run.
"""

from __future__ import annotations

from typing import Any

from ...capture import Trace
from ...errors import DiagnosticArgumentError
from ...report import Exit, Finding
from ...report._nonfinite import NonfiniteReport
from .._values import first_bad_thing, where_of
from ..lineage._walk import lineage_action, lineage_of_facts
from ._forward_scan import ForwardFacts, run_live, scan_saved

ANOMALY_RECIPE = """\
# What a forward scan cannot see: a NaN born in backward (its forward is finite), or an error
# inside a custom autograd Function. torch's anomaly mode covers both. It re-runs your step (so
# state, RNG and data order move on) and costs about 1.2-1.3x a step: run it once, by hand.
import torch
with torch.autograd.set_detect_anomaly(True, check_nan=True):
    loss = loss_fn(model(inputs), targets)
    loss.backward()  # raises at the first backward node that returns NaN and prints the
                     # forward traceback of the op that created that node"""

BACKWARD_RECIPE = (
    "trace = tl.trace(model, inputs, capture=tl.options.CaptureOptions("
    "save_grads=True)); trace.backward(loss_fn(trace.output)); "
    "tl.debug.bisect_nan_backward(trace)"
)
"""The post-hoc alternative to anomaly mode: log one backward and classify its fires."""

ANOMALY_EXIT = Exit(
    "Anomaly-mode recipe (run it by hand)",
    "with torch.autograd.set_detect_anomaly(True, check_nan=True): "
    "loss_fn(model(inputs), targets).backward()",
)
"""The recipe as an exit: shown on the card, never run by a panel (no action)."""

_AMP_FORWARD = (
    "AMP: values are checked as computed (an fp16 overflow under autocast is a real "
    "Inf of that forward); gradients scaled by a GradScaler are outside a forward "
    "scan (report.amp_hint)."
)

_NOT_COVERED = (
    "not covered: NaNs born in backward (finite forward) and inside custom autograd "
    "Functions; run tl.debug.bisect_nan_backward on a logged backward, or the "
    "torch.autograd.set_detect_anomaly recipe (report.anomaly_recipe) by hand."
)


def amp_scaled_grads_hint(all_nonfinite: bool = False) -> str:
    """The one AMP/GradScaler disclosure shared by the NaN and gradient diagnostics.

    Args:
        all_nonfinite: the variant for a result where every checked gradient is non-finite, the
            signature of a loss-scale overflow rather than of one bad op.

    Example:
        >>> amp_scaled_grads_hint().startswith("Gradients captured under torch.amp.GradScaler")
        True
    """
    text = (
        "Gradients captured under torch.amp.GradScaler carry the loss scale (about 2**16 = "
        "65536 at the default init_scale): pass grad_scale=scaler.get_scale() so magnitudes "
        "read unscaled. In fp16 an Inf gradient can be loss-scale overflow, which the scaler "
        "detects and skips (the step is not applied and the scale halves): that is the "
        "mechanism working, not proof of a bad op."
    )
    if all_nonfinite:
        text += (
            " Every checked gradient here is non-finite, the typical signature of scale "
            "overflow: compare with a step after the scale has halved before debugging "
            "the model."
        )
    return text


# ----- shared by find_nan, bisect_nan and nonfinite_origin ----------------------------------
def scope_text(facts: ForwardFacts) -> str:
    """``checked 12 of 14 floating-point op outputs (2 not saved); 3 integer outputs ...``."""
    total = facts.num_checked + facts.num_unchecked
    how = "live" if facts.mode == "live" else "saved"
    text = f"checked {facts.num_checked} of {total} floating-point op outputs ({how} values)"
    if facts.num_unchecked:
        text += f"; {facts.num_unchecked} not checked (not saved)"
    if facts.partial:
        text += (
            f"; {len(facts.partial)} multi-output ops checked on their first output only "
            f"(e.g. {sorted(facts.partial)[0]})"
        )
    if facts.num_exact:
        text += f"; {facts.num_exact} integer/bool outputs are finite by dtype"
    if facts.trace.is_partial:
        text += f"; the forward ended after {len(facts.trace)} ops, later ops never ran"
    return text


def scan_report_fields(facts: ForwardFacts, label: str | None) -> dict[str, Any]:
    """Fields, findings, exits and actions common to the forward NaN reports."""
    trace = facts.trace
    findings: list[Finding] = []
    exits: list[Exit] = []
    disclosures = [scope_text(facts)]
    fields: dict[str, Any] = dict(
        mode=facts.mode,
        num_ops=len(trace),
        num_checked=facts.num_checked,
        num_unchecked=facts.num_unchecked,
        num_exact=facts.num_exact,
        coverage=facts.coverage,
        found=label is not None,
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
        disclosures.append(_NOT_COVERED)
        exits.append(Exit("Check the backward", BACKWARD_RECIPE))
        return dict(fields, findings=findings, disclosures=disclosures, exits=exits, actions={})
    facts.ensure_stats([label])
    op = trace[label]
    cause = facts.causes()[label]
    thing = first_bad_thing(op, facts.stats[label], is_proven=cause == "birth")
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
    exits.append(
        Exit(
            "Show lineage",
            f"tl.debug.lineage(trace, {label!r}, direction='both', max_depth=1)",
            action="lineage",
            args={"label": label},
        )
    )
    # the live record without the forward's exception, whose traceback would pin frames
    live = (
        None
        if facts.mode == "saved"
        else ForwardFacts(
            trace=facts.trace,
            mode="live",
            state=facts.state,
            checked_by=facts.checked_by,
            stats=facts.stats,
            partial=facts.partial,
        )
    )
    role = "origin" if thing.is_proven else "first non-finite seen"
    fields["lineage_role"] = role
    fields["lineage_nodes"] = lineage_of_facts(
        facts.trace,
        label,
        direction="both",
        max_depth=1,
        facts=live,
        highlight=label,
        highlight_role=role,
    ).nodes
    actions = {
        "lineage": lineage_action(facts.trace, live, label, role, label=label, direction="both"),
        "expand": lineage_action(facts.trace, live, label, role),
    }
    return dict(fields, findings=findings, disclosures=disclosures, exits=exits, actions=actions)


def lead_text(thing: Any, facts: ForwardFacts, verb: str) -> str:
    """The one-sentence verdict of a forward scan (``verb``: "born" or "first seen")."""
    if thing is None:
        if facts.coverage == "none":
            return (
                "nothing checked: no floating-point op output was saved; run "
                "tl.debug.find_nan(model, inputs) or recapture with save=True."
            )
        if facts.coverage == "full":
            return (
                f"no NaN or Inf in any of the {facts.num_checked} floating-point op outputs "
                "(all checked)."
            )
        missing = (
            f"{facts.num_unchecked} were not checked"
            if facts.num_unchecked
            else "the rest were not checked"
        )
        return (
            f"no NaN or Inf in the {facts.num_checked} checked floating-point op outputs; "
            f"{missing}."
        )
    code = f": `{thing.code}`" if thing.code else ""  # no source text for exec'd code
    source = f" (line {thing.line}{code})" if thing.line else ""
    if thing.func == "input":
        return f"the model input {thing.op} already holds {thing.kind}{source}."
    place = f" in {thing.module}" if thing.module else ""
    proof = (
        "; its inputs were checked finite"
        if thing.is_proven
        else "; its inputs were not all checked, see the uncertainty zone"
    )
    return f"{thing.kind} {verb} at {thing.op}{place}{source}{proof}."


def status_of(facts: ForwardFacts, found: bool) -> str:
    """``found``, ``clean`` (full coverage), ``partial`` (clean where checked) or ``unchecked``."""
    if found:
        return "found"
    return {"full": "clean", "partial": "partial", "none": "unchecked"}[facts.coverage]


def subject_of(facts: ForwardFacts) -> str:
    return f"{facts.trace.model_type} ({facts.mode}, {len(facts.trace)} ops)"


def nonfinite_origin(
    trace_or_model: Any, inputs: Any = None, **trace_kwargs: Any
) -> NonfiniteReport:
    """Name the op where a NaN/Inf was born: module, file:line and code, and what it poisoned.

    ``nonfinite_origin(trace)`` reads the trace's saved values (no rerun);
    ``nonfinite_origin(model, inputs, capture=...)`` runs one memory-light forward that checks
    every floating-point op output as it is produced and keeps none of them (one reduction and
    one host sync per op; only the bad values' statistics are kept).

    The origin is the first op whose inputs are all finite and whose output is not; later
    non-finite outputs downstream of it are counted as propagating, never named as origin. With
    unsaved inputs the origin is marked unproven and the unchecked ops that could hold it are
    listed (``uncertainty_zone``). A clean result is scoped to the values checked. NaNs born in
    backward and errors inside custom autograd Functions are outside a forward scan: the report
    carries the ``torch.autograd.set_detect_anomaly`` recipe, which it never runs itself.

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
    label = facts.origin()
    common = scan_report_fields(facts, label)
    causes = facts.causes()
    counts = {
        cause: sum(1 for c in causes.values() if c == cause)
        for cause in ("birth", "propagated", "unattributed")
    }
    births = tuple(lab for lab in facts.nonfinite if causes[lab] == "birth" and lab != label)
    outputs = facts.trace.output_layers
    reaches = any(facts.state.get(out) == "nonfinite" for out in outputs) if outputs else None
    findings = list(common.pop("findings"))
    disclosures = list(common.pop("disclosures"))
    thing = common["first_bad_thing"]
    disclosures[1:1] = [_AMP_FORWARD]
    if thing is not None:  # a clean scan already carries it
        disclosures.append(_NOT_COVERED)
    params = facts.nonfinite_params.get(label or "", ())
    if thing is not None:
        findings.append(_origin_finding(facts, thing, params))
        spread = len(facts.nonfinite) - 1
        findings.append(
            Finding(
                "propagation",
                "info",
                f"{counts['propagated']} downstream op output{'s' if counts['propagated'] != 1 else ''}"
                f" merely propagate it" + ("; it reaches the model output." if reaches else "."),
                fields={
                    "num_nonfinite": len(facts.nonfinite),
                    "num_propagated": counts["propagated"],
                    "num_other": spread - counts["propagated"],
                },
            )
        )
        if births:
            findings.append(
                Finding(
                    "other_births",
                    "warning",
                    f"{len(births)} later op{'s' if len(births) != 1 else ''} also turned finite "
                    f"inputs into non-finite output ({', '.join(births[:4])}); judged from the "
                    "values their inputs had when produced.",
                    fields={"labels": births},
                )
            )
        if facts.mode == "saved" and facts.trace[label].param_names:
            disclosures.append(
                f"parameters of {label} ({', '.join(facts.trace[label].param_names)}) are not "
                "in a trace and were not checked; nonfinite_origin(model, inputs) checks them."
            )
    lead = lead_text(thing, facts, "born")
    if thing is not None:
        lead = lead[:-1] + f"; {counts['propagated']} downstream ops propagate it."
    common["exits"] = (*common["exits"], ANOMALY_EXIT)
    return NonfiniteReport(
        subject=subject_of(facts),
        status=status_of(facts, thing is not None),
        lead=lead,
        findings=tuple(findings),
        disclosures=tuple(disclosures),
        **common,
        num_nonfinite=len(facts.nonfinite),
        num_propagated=counts["propagated"],
        num_unattributed=counts["unattributed"] - (1 if thing and not thing.is_proven else 0),
        other_births=births,
        nonfinite_params=params,
        reaches_output=reaches,
        amp_hint=amp_scaled_grads_hint(),
        anomaly_recipe=ANOMALY_RECIPE,
    )


def _origin_finding(facts: ForwardFacts, thing: Any, params: tuple[str, ...]) -> Finding:
    op = facts.trace[thing.op]
    stats = thing.stats
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
