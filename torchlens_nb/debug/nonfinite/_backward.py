"""``tl.debug.bisect_nan_backward``: where, in one logged backward, a gradient turned non-finite.

Each grad_fn fire is classified from the finiteness of what flowed in (its ``grad_outputs``)
and what it sent on (its ``grad_inputs``):

========== ============== ==============
transition incoming       outgoing
========== ============== ==============
clean      finite         finite
birth      finite         non-finite
propagated non-finite     non-finite
healed     non-finite     finite
root_seed  non-finite seed of the first fire (the ``gradient`` passed to backward)
unchecked  not saved (capture without ``save_grads``)
========== ============== ==============

A sink such as ``AccumulateGrad`` sends nothing on; it is judged by what it receives. The
classification reads every gradient in two batched passes (finiteness, then kinds of the bad
ones): one host sync per device each, never one per fire.

The rule of the forward tools applies where the ledger can see it: a NaN is always a finding, an
Inf only when it reaches something that matters. When every fire was checked, no NaN appears
anywhere, and every parameter gradient (each ``AccumulateGrad`` sink) received finite values,
the Inf births were healed on the way (a clamp's or a mask's backward zeroes them): they are
disclosed in ``neutralised_births``, not found. The ledger records no edges between fires, so
when something does matter, the earliest birth is headlined.
"""

from __future__ import annotations

from typing import Any, Literal

import torch

from ..._validate import check_int, check_number
from ...capture import GradFnFire, Trace
from ...capture._gc_pause import paused_gc
from ...errors import DiagnosticArgumentError, UnavailableError
from ...report import Exit, Finding, Table
from ...report._nonfinite import (
    TRANSITION_COLUMNS,
    BackwardNanReport,
    Coverage,
    FirstBadThing,
    NonfiniteKind,
    Transition,
    TransitionRow,
)
from .._blind_spots import blind_spot_disclosures, blind_spot_unavailable, unless_blind
from .._values import (
    ValueClass,
    checkable,
    finite_flags,
    nonfinite_kinds,
    saved_tensors,
    value_classes,
    value_stats,
)
from ..lineage._walk import lineage_action
from ._texts import HALF_DTYPES, STATUS_OF_COVERAGE, amp_scaled_grads_hint

_State = Literal["finite", "nonfinite", "unknown", "none"]
_TRANSITIONS: tuple[Transition, ...] = (
    "clean",
    "birth",
    "propagated",
    "healed",
    "root_seed",
    "unchecked",
)


@paused_gc()
def bisect_nan_backward(
    trace: Trace, *, bwd: int | None = None, grad_scale: float | None = None
) -> BackwardNanReport:
    """Classify every grad_fn fire of one logged backward and headline the earliest birth.

    Post-hoc: reads the gradients ``trace.backward(loss)`` logged (capture with
    ``CaptureOptions(save_grads=True)``); nothing is rerun. A finite loss gradient does not prove
    a clean backward (a NaN can heal on the way, e.g. through ``torch.where``), so the report
    carries the full ledger, and ``clean`` needs every fire checked.

    Args:
        trace: a trace with at least one logged backward pass.
        bwd: which pass (index into ``trace.backward_passes``); required when there are several:
            passes are never merged into one verdict.
        grad_scale: the loss scale the gradients carry (``scaler.get_scale()``), when the
            backward ran under a GradScaler. Without it an Inf result carries the AMP hint.

    Raises:
        UnavailableError: the trace has no logged backward pass (code ``no_backward_pass``).
        DiagnosticArgumentError: ``bwd`` missing with several passes, or out of range; a
            ``grad_scale`` that is not a positive finite number.

    Example:
        >>> import torch
        >>> from torch import nn
        >>> import torchlens_nb as tl
        >>> class Root(nn.Module):
        ...     def forward(self, x):
        ...         return torch.sqrt(x * 0).sum()
        >>> t = tl.trace(Root(), torch.ones(2, requires_grad=True),
        ...              capture=tl.options.CaptureOptions(save_grads=True))
        >>> _ = t.backward(t.output)
        >>> result = bisect_nan_backward(t)
        >>> result.first_bad_thing.node, result.first_bad_thing.op, result.kind
        ('SqrtBackward0', 'sqrt_1', 'inf')
    """
    if not isinstance(trace, Trace):
        raise DiagnosticArgumentError(
            f"bisect_nan_backward needs a Trace with a logged backward, got {type(trace).__name__}."
        )
    bwd = _select_pass(trace, bwd)
    if grad_scale is not None:
        check_number(
            "grad_scale",
            grad_scale,
            low=0,
            low_open=True,
            expect="a positive finite number (scaler.get_scale())",
        )
    fires = trace.backward_passes[bwd].fires
    incoming, _ = _states([f.grad_outputs for f in fires])
    outgoing, sends_nan = _states([f.grad_inputs for f in fires])
    kinds = _kinds(fires, outgoing)
    rows = tuple(
        TransitionRow(
            order=f.order,
            node=f.node,
            transition=_classify(f.order, i, o),
            ops=f.labels,
            incoming=i,
            outgoing=o,
            kind=k,
        )
        for f, i, o, k in zip(fires, incoming, outgoing, kinds)
    )
    return _report(trace, bwd, rows, grad_scale, any(sends_nan))


def _select_pass(trace: Trace, bwd: Any) -> int:
    count = len(trace.backward_passes)
    if count == 0:
        raise UnavailableError(
            "this trace has no logged backward pass: capture with capture=tl.options."
            "CaptureOptions(save_grads=True), then call trace.backward(loss).",
            code="no_backward_pass",
        )
    if bwd is None:
        if count > 1:
            raise DiagnosticArgumentError(
                f"this trace logged {count} backward passes; pass bwd=N (0..{count - 1}): "
                "passes are never merged into one verdict."
            )
        return 0
    return check_int(
        "bwd",
        bwd,
        low=0,
        high=count - 1,
        expect=f"an int in 0..{count - 1} (this trace logged {count} backward "
        f"pass{'es' if count != 1 else ''})",
    )


def _group(grads: tuple[Any, ...]) -> list[torch.Tensor]:
    return [g for g in grads if checkable(g)]


def _states(groups: list[tuple[Any, ...] | None]) -> tuple[list[_State], list[bool]]:
    """Finiteness of each group of gradients and whether it holds a NaN, in one batch."""
    checked = [i for i, g in enumerate(groups) if g is not None and _group(g)]
    found: list[ValueClass] = value_classes([_group(groups[i]) for i in checked])  # type: ignore[arg-type]
    states: list[_State] = ["unknown" if g is None else "none" for g in groups]
    has_nan = [False] * len(groups)
    for index, value_class in zip(checked, found):
        states[index] = "finite" if value_class == "finite" else "nonfinite"
        has_nan[index] = value_class == "nan"
    return states, has_nan


def _kinds(fires: list[GradFnFire], outgoing: list[_State]) -> list[NonfiniteKind | None]:
    bad = [i for i, state in enumerate(outgoing) if state == "nonfinite"]
    kinds: list[NonfiniteKind | None] = [None] * len(fires)
    found = nonfinite_kinds([_group(fires[i].grad_inputs or ()) for i in bad])
    for index, kind in zip(bad, found):
        kinds[index] = kind
    return kinds


def _classify(order: int, incoming: _State, outgoing: _State) -> Transition:
    if "unknown" in (incoming, outgoing):
        return "unchecked"
    if outgoing == "none":  # a sink (AccumulateGrad): judged by what it receives
        outgoing = incoming
    bad_in, bad_out = incoming == "nonfinite", outgoing == "nonfinite"
    if bad_in and order == 0:
        return "root_seed"
    if bad_in:
        return "propagated" if bad_out else "healed"
    return "birth" if bad_out else "clean"


def _neutralised(rows: tuple[TransitionRow, ...], counts: dict[str, int], any_nan: bool) -> bool:
    """Every Inf birth healed before any parameter gradient, with no NaN and nothing unchecked."""
    sinks = [r for r in rows if r.outgoing == "none" and r.incoming != "none"]
    return (
        counts["birth"] > 0
        and counts["root_seed"] == 0
        and counts["unchecked"] == 0
        and not any_nan
        and bool(sinks)
        and all(r.incoming == "finite" for r in sinks)
    )


def _report(
    trace: Trace,
    bwd: int,
    rows: tuple[TransitionRow, ...],
    grad_scale: float | None,
    any_nan: bool,
) -> BackwardNanReport:
    counts: dict[str, int] = {
        name: sum(1 for r in rows if r.transition == name) for name in _TRANSITIONS
    }
    neutralised = _neutralised(rows, counts, any_nan)
    head = (
        None
        if neutralised
        else next((r for r in rows if r.transition in ("birth", "root_seed")), None)
    )
    coverage: Coverage = (
        "none" if counts["unchecked"] == len(rows) else "partial" if counts["unchecked"] else "full"
    )
    fires = trace.backward_passes[bwd].fires
    thing = _first_bad(trace, fires[head.order], head) if head else None
    findings: list[Finding] = []
    disclosures = [
        f"backward pass {bwd} of {len(trace.backward_passes)}: {len(rows)} grad_fn "
        f"fires in measured order; {counts['unchecked']} unchecked."
    ]
    births = tuple(r.order for r in rows if r.transition == "birth") if neutralised else ()
    if births:
        named = ", ".join(f"{rows[o].node} (fire {o})" for o in births[:3])
        disclosures.append(
            f"{len(births)} fire{'s' if len(births) != 1 else ''} sent on Inf gradients that "
            f"were healed before any parameter gradient ({named}{', ...' if len(births) > 3 else ''}"
            "): no NaN appeared and every parameter gradient is finite, so they do not matter."
        )
    exits: list[Exit] = []
    actions: dict[str, Any] = {}
    if thing is not None:
        findings.append(_birth_finding(thing, head))  # type: ignore[arg-type]
        if thing.op is not None:
            exits.append(
                Exit(
                    "Show forward lineage",
                    f"tl.debug.lineage(trace, {thing.op!r}, direction='both', max_depth=1)",
                    action="lineage",
                    args={"label": thing.op},
                )
            )
            actions["lineage"] = lineage_action(
                trace, None, thing.op, "forward op of the birth", label=thing.op, direction="both"
            )
            findings.extend(_forward_note(trace, thing.op))
    if counts["healed"]:
        findings.append(
            Finding(
                "healed",
                "info",
                f"{counts['healed']} fire{'s' if counts['healed'] != 1 else ''} "
                "turned non-finite incoming gradients into finite ones: a finite gradient further "
                "on does not prove a clean backward.",
                fields={"count": counts["healed"]},
            )
        )
    amp_hint = ""
    if thing is not None and thing.kind != "nan":
        if grad_scale is not None:
            disclosures.append(
                f"gradients carry the disclosed loss scale {grad_scale:g}; an Inf "
                "in fp16 at this scale may be overflow that GradScaler skips."
            )
        elif head is not None and _is_half(fires[head.order], head):
            sinks = [r for r in rows if r.outgoing == "none" and r.incoming != "unknown"]
            amp_hint = amp_scaled_grads_hint(
                all_nonfinite=bool(sinks) and all(r.incoming == "nonfinite" for r in sinks)
            )
            disclosures.append(amp_hint)
    table = Table.from_dicts(
        "transitions",
        [_row_dict(r) for r in rows],
        TRANSITION_COLUMNS,
        attrs={"bwd": bwd, "highlight_order": head.order if head else None, "coverage": coverage},
    )
    status, lead = unless_blind(
        "found" if thing else STATUS_OF_COVERAGE[coverage],
        _lead(thing, counts, len(rows), coverage, neutralised),
        trace,
        "partial",
    )
    return BackwardNanReport(
        subject=f"{trace.model_type} backward {bwd} ({len(rows)} fires)",
        status=status,
        lead=lead,
        findings=tuple(findings),
        tables=(table,),
        disclosures=(*disclosures, *blind_spot_disclosures(trace)),
        unavailable=blind_spot_unavailable(trace, "backward NaN/Inf ledger"),
        exits=tuple(exits),
        actions=actions,
        bwd=bwd,
        found=thing is not None,
        kind=thing.kind if thing else None,
        first_bad_thing=thing,
        transitions=rows,
        counts=counts,
        coverage=coverage,
        grad_scale=grad_scale,
        amp_hint=amp_hint,
        neutralised_births=births,
    )


def _is_half(fire: GradFnFire, row: TransitionRow) -> bool:
    """The first bad gradient is float16/bfloat16 (the only case a GradScaler overflow can be)."""
    bad = fire.grad_outputs if row.transition == "root_seed" else fire.grad_inputs
    return any(str(g.dtype).removeprefix("torch.") in HALF_DTYPES for g in _group(bad or ()))


def _row_dict(row: TransitionRow) -> dict[str, Any]:
    return {
        "order": row.order,
        "node": row.node,
        "transition": row.transition,
        "ops": ", ".join(row.ops),
        "incoming": row.incoming,
        "outgoing": row.outgoing,
        "kind": row.kind,
    }


def _first_bad(trace: Trace, fire: GradFnFire, row: TransitionRow) -> FirstBadThing:
    bad = fire.grad_outputs if row.transition == "root_seed" else fire.grad_inputs
    stats = value_stats([_group(bad or ())])[0]
    op = trace[fire.labels[0]] if fire.labels else None
    return FirstBadThing(
        phase="backward",
        kind=stats.kind or "mixed",
        op=op.label if op else None,
        func=op.func if op else None,
        module=op.module if op else None,
        file=op.file if op else None,
        line=op.line if op else None,
        code=op.code if op else None,
        is_proven=row.transition == "birth",
        node=fire.node,
        fire_order=fire.order,
        stats=stats,
    )


def _birth_finding(thing: FirstBadThing, row: TransitionRow) -> Finding:
    assert thing.stats is not None
    if row.transition == "root_seed":
        message = (
            f"the gradient fed into backward is already {thing.kind} "
            f"({thing.stats.text()}): check the gradient= argument or the loss scale."
        )
    else:
        target = f"the gradient of {thing.op}" if thing.op else "an internal node"
        message = (
            f"{thing.node} (fire {thing.fire_order}) received finite gradients and sent "
            f"on {thing.kind} ({thing.stats.text()}): {target}."
        )
    return Finding(
        "backward_birth" if row.transition == "birth" else "nonfinite_seed",
        "critical",
        message,
        where=thing.where(),
        remedy="guard this op's backward domain (e.g. sqrt(x + eps), clamp before "
        "log/pow) where the forward value sits on a singularity.",
        fields={"node": thing.node, "fire_order": thing.fire_order},
    )


def _forward_note(trace: Trace, label: str) -> list[Finding]:
    """Say so when the forward value under a backward birth is itself non-finite."""
    op = trace[label]
    labels = [label, *op.parents]
    values = [saved_tensors(trace[lab].out) for lab in labels]
    bad = [lab for lab, v, ok in zip(labels, values, finite_flags(values)) if v and not ok]
    if not bad:
        return []
    return [
        Finding(
            "forward_nonfinite",
            "warning",
            f"the forward value(s) of {', '.join(bad)} are already non-finite: this NaN "
            "was born in the forward; tl.debug.nonfinite_origin(trace) names its origin.",
            fields={"labels": tuple(bad)},
        )
    ]


def _lead(
    thing: FirstBadThing | None,
    counts: dict[str, int],
    total: int,
    coverage: str,
    neutralised: bool,
) -> str:
    if thing is None and neutralised:
        return (
            f"no NaN, and no Inf that reaches a parameter gradient, in the {total} grad_fn "
            "fires (all checked)."
        )
    if thing is None:
        if coverage == "none":
            return (
                f"nothing checked: none of the {total} fires saved gradients; capture with "
                "CaptureOptions(save_grads=True)."
            )
        if coverage == "partial":
            return (
                f"no non-finite gradient in the {total - counts['unchecked']} checked fires; "
                f"{counts['unchecked']} were not checked."
            )
        return f"every gradient of the {total} grad_fn fires is finite (all checked)."
    place = f" in {thing.module}" if thing.module else ""
    source = f" (line {thing.line}: `{thing.code}`)" if thing.line else ""
    subject = f"the gradient of {thing.op}{place}{source}" if thing.op else "an internal node"
    verb = "enters as the seed of" if not thing.is_proven else "born in backward at"
    spread, healed = counts["propagated"], counts["healed"]
    return (
        f"{thing.kind} {verb} {thing.node} (fire {thing.fire_order}), {subject}; "
        f"{spread} fire{'s' if spread != 1 else ''} propagate{'s' if spread == 1 else ''} it, "
        f"{healed} heal{'s' if healed == 1 else ''} it."
    )
