"""``tl.debug.investigate``: replay the step that broke training and name where its value was born.

One replay of the step on the untouched weights: the forward and the loss under the live
tripwire (``run_live``: every floating-point op output checked, nothing kept); when both are
finite, one more forward recorded for backward (``save_grads``) and the backward ledger
(``bisect_nan_backward``). Under the kept RNG state the replay draws the same dropout masks as the
step did. Everything the user owns is put back bitwise (``_replay.keep_user_state``), whatever
instant a Ctrl-C arrives at.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from ..._undo import Undo, undoing
from ...capture import call_arguments, run_capture, validate_model
from ...errors import BackwardError, DiagnosticArgumentError, ForwardError
from ...options import CaptureOptions
from ...report import Exit, Finding, Unavailable
from ...report._investigation import (
    MAX_ROWS,
    InputFault,
    InvestigationReport,
    InvestigationStatus,
    RngSource,
)
from ...report._nonfinite import BackwardNanReport, NonfiniteReport, OriginFields, ScanFields
from .._isolation import clone_input_tree
from .._values import kind_of, value_stats
from ..lineage._walk import lineage_action
from ._backward import bisect_nan_backward
from ._forward_scan import ForwardFacts, run_live
from ._origin import lineage_fields, metadata_only, origin_report
from ._replay import (
    ForwardFn,
    StepModule,
    check_rng_state,
    describe_call,
    forward_call,
    input_fields,
    keep_user_state,
    loss_arity,
    replay_rng,
)
from ._texts import NOT_COVERED

_PANEL_FIELDS = tuple(
    f.name for f in (*dataclasses.fields(ScanFields), *dataclasses.fields(OriginFields))
)
"""The fields the ``nonfinite`` panel reads, copied from the forward replay's report."""


def investigate(
    model: nn.Module,
    inputs: Any,
    *,
    loss_fn: Callable[..., Any] | None = None,
    rng_state: Mapping[str, Any] | None = None,
    forward_fn: ForwardFn | None = None,
) -> InvestigationReport:
    """Replay one training step and name where its NaN/Inf was born: forward, loss or backward.

    The forward and the loss run once under the live tripwire (every floating-point op output
    checked as it is produced, nothing kept, same rule as ``nonfinite_origin``: a NaN always
    matters, an Inf when it reaches the loss or a NaN). When they are finite, the step runs once
    more recorded for backward (``CaptureOptions(save_grads=True)``) and the backward ledger
    (``bisect_nan_backward``) classifies every grad_fn fire. The origin comes back in the shared
    ``FirstBadThing`` vocabulary, with the report it rests on (``report.forward``,
    ``report.backward``). A batch that already holds NaN/Inf is named (``nonfinite_inputs``:
    fields and rows). Nothing non-finite on replay gives ``not_reproduced`` and the likely
    reasons, never a made-up origin.

    The loss: ``loss_fn(output)``, or ``loss_fn(output, inputs)`` when it takes two positional
    arguments (``inputs`` is the batch as given); without ``loss_fn``, ``output.loss`` when it
    is a tensor (a Hugging Face model called with ``labels=``), ``output["loss"]`` when the output
    is a mapping holding a tensor ``"loss"`` (a Lightning ``training_step``'s dict), else the
    output itself when it is a one-element tensor.

    The forward: ``forward_fn(model, inputs)`` when given (a trainer's own training step, whose
    returned loss or ``{"loss": ...}`` is then the loss); else a tuple/list batch is passed as
    positional arguments, a mapping as keyword arguments, anything else as the one argument.
    One exception, for the supervised ``(x, y)`` batch: when ``loss_fn`` takes the batch
    (``loss_fn(output, inputs)``), the batch is a list/tuple of two or more items, and the
    forward's signature takes ``inputs[0]`` alone but not the items together, the model is
    called as ``model(inputs[0])`` (said in the report's disclosures). Ops of the loss are checked like the model's (module ``""``, the loss
    function's own lines).

    Nothing the caller owns changes: parameters, buffers (BatchNorm running statistics),
    ``.grad`` (the replay's backward writes fresh gradients, then the caller's tensors are put
    back), train/eval flags, the batch (the replay runs on a clone) and every global RNG stream
    (Python, NumPy, torch CPU and CUDA) are bitwise what they were, also when the forward raises.
    No optimizer is taken, so none is touched. Cost: one tripwire forward (a host sync per op);
    when it is finite, one forward and one backward with every gradient logged
    (``benchmarks/bench_investigate.py``).

    Args:
        model: the module, as it is at the failing step (train mode replays dropout and batch
            statistics; a ``torch.compile``'d model is replayed through its eager original).
        inputs: the step's batch, in any form ``tl.trace`` takes (tensor, tuple, dict,
            ``BatchEncoding``).
        loss_fn: ``loss_fn(output)`` or ``loss_fn(output, inputs)`` returning a one-element
            floating-point tensor.
        forward_fn: ``forward_fn(model, inputs)`` returning the output (or the loss) instead of
            calling the model on the batch: e.g. ``lambda m, b: m.training_step(b, 0)``.
        rng_state: the RNG state at the step's start, as the checks kit keeps it:
            ``{"cpu": torch.get_rng_state(), "cuda": torch.cuda.get_rng_state_all()}`` (both
            keys optional; ``cuda`` a list with one state per visible device). The replay runs
            under it, so dropout draws the step's own masks; without it, the current state.

    Returns:
        An :class:`~torchlens_nb.report.InvestigationReport` (``report_type``
        ``"investigation"``, rendered by the ``nonfinite`` panel): status ``found``,
        ``nonfinite_input``, ``not_reproduced`` or ``incomplete``.

    Raises:
        ModelTypeError, InputFormError: as ``tl.trace`` raises them (nothing was run).
        DiagnosticArgumentError: a ``loss_fn`` that is not callable, raises, or returns no
            scalar; no ``loss_fn`` and an output with neither ``.loss``, ``["loss"]`` nor one
            element; a ``forward_fn`` that is not callable; a malformed ``rng_state``. State is restored before the raise.

    Example:
        >>> import torch
        >>> from torch import nn
        >>> class Block(nn.Module):
        ...     def forward(self, x):
        ...         return torch.log(x - 1.0)
        >>> model = nn.Sequential(nn.Linear(2, 2), Block())
        >>> report = investigate(model, torch.zeros(1, 2), loss_fn=lambda out: out.mean())
        >>> report.status, report.phase, report.first_bad_thing.func  # doctest: +SKIP
        ('found', 'forward', 'log')
    """
    model = validate_model(model)
    original = getattr(model, "_orig_mod", None)
    if isinstance(original, nn.Module):  # torch.compile: replay the eager original
        model = original
    call_arguments(inputs)
    arity = loss_arity(loss_fn) if loss_fn is not None else 1
    if forward_fn is not None and not callable(forward_fn):
        raise DiagnosticArgumentError(
            f"forward_fn must be callable as forward_fn(model, inputs), got "
            f"{type(forward_fn).__name__}."
        )
    call = forward_call(model, inputs, arity) if forward_fn is None else "whole"
    check_rng_state(rng_state)

    def replay(undo: Undo) -> InvestigationReport:
        # every restore is registered before the replay changes anything (an interrupt at any
        # instant leaves the user's state as it was: tests/faults/test_interrupts.py)
        keep_user_state(model, undo)
        replay_rng(rng_state, undo)
        step = StepModule(model, loss_fn, arity, clone_input_tree(inputs), forward_fn, call)
        facts = run_live(step, step._inputs, stop_at_first=False, trace_kwargs={})
        _refuse_loss_problems(step, facts)
        facts.trace.model_type = type(model).__name__
        forward = origin_report(facts)
        backward: BackwardNanReport | None = None
        unavailable: list[Unavailable] = []
        loss: float | None = None
        if not forward.found and facts.forward_error is None:
            # run_live put the RNG back: this forward draws the same dropout masks
            backward, loss, unavailable = _replay_backward(step, inputs)
        rng: RngSource = "kept" if rng_state else "current"
        return _report(facts, forward, backward, loss, unavailable, rng, step, inputs)

    return undoing(replay)


def _refuse_loss_problems(step: StepModule, facts: ForwardFacts) -> None:
    error = facts.forward_error
    if error is not None and step.in_loss_fn:
        raise DiagnosticArgumentError(
            f"loss_fn raised {type(error).__name__}: {error}; it is called as "
            f"loss_fn({'output, inputs' if step._arity == 2 else 'output'}) with the model's "
            "output."
        ) from error
    if error is None and step.loss_problem is not None:
        raise DiagnosticArgumentError(step.loss_problem)


def _replay_backward(
    first: StepModule, inputs: Any
) -> tuple[BackwardNanReport | None, float | None, list[Unavailable]]:
    """The step of ``first`` once more, recorded for backward; its ledger (None when it cannot
    run).

    Buffers are restored by the caller after the backward, not here: a train-mode BatchNorm
    saves its running statistics for backward, and restoring them in place first would fail it.
    """
    step = first.again(clone_input_tree(inputs))
    try:
        trace = run_capture(step, step._inputs, save=False, capture=CaptureOptions(save_grads=True))
    except ForwardError as err:  # it ran once already: a forward that depends on more than this
        return None, None, [_unavailable("backward", f"the second replay's forward raised: {err}")]
    loss_tensor = trace.output
    if step.loss_problem is not None or not isinstance(loss_tensor, torch.Tensor):
        reason = f"the second replay formed no loss: {step.loss_problem}"
        return None, None, [_unavailable("backward", reason)]
    loss = float(loss_tensor.detach())
    if loss_tensor.grad_fn is None:
        reason = (
            "the loss has no grad_fn (no parameter requires grad, or the model runs under "
            "no_grad), so no backward runs: nothing of it was checked."
        )
        return None, loss, [_unavailable("backward", reason)]
    try:
        trace.backward(loss_tensor)
    except BackwardError as err:
        return None, loss, [_unavailable("backward", str(err))]
    return bisect_nan_backward(trace), loss, []


def _unavailable(check: str, reason: str) -> Unavailable:
    return Unavailable(check=check, reason=reason, code="replay_incomplete")


def _input_faults(facts: ForwardFacts, inputs: Any) -> tuple[InputFault, ...]:
    """The batch's tensors that hold a NaN, or an Inf that matters, with their rows (read from
    the caller's batch: the replay ran on a clone that the forward may have written into)."""
    args, kwargs = call_arguments(inputs)
    labels = facts.trace.input_layers
    mattering = set(facts.paths().mattering)
    bad = [
        (field, tensor, label)
        for (field, tensor), label in zip(input_fields(args, kwargs), labels)
        if label in mattering
    ]
    stats = value_stats([[tensor] for _, tensor, _ in bad])
    faults = []
    for (field, tensor, label), stat in zip(bad, stats):
        rows: tuple[int, ...] = ()
        num_rows = 0
        if tensor.dim():
            values = tensor.detach()  # a boolean mask: no autograd graph, no no_grad needed
            values = torch.view_as_real(values) if values.is_complex() else values
            flagged = (~torch.isfinite(values)).reshape(values.shape[0], -1).any(dim=1)
            indices = flagged.nonzero().flatten().tolist()
            rows, num_rows = tuple(indices[:MAX_ROWS]), len(indices)
        kind = kind_of([stat])
        assert kind is not None  # the input is in `mattering`: it holds a non-finite value
        faults.append(InputFault(field, label, kind, rows, num_rows, stat))
    return tuple(faults)


_NOT_REPRODUCED = (
    "the batch changed since the step: mutated in place (an augmentation, a normalisation "
    "written into it) or another batch passed",
    "state moved since the step: an optimizer step, a GradScaler update, BatchNorm running "
    "statistics or a schedule changed the weights or buffers the step saw",
    "the value came from outside one forward and backward: gradients accumulated over other "
    "micro-batches, the optimizer's own state (Adam moments), or a GradScaler's unscale",
    "the train/eval mode differs from the step's (dropout and batch statistics change with it)",
)


def _reasons(rng: RngSource) -> tuple[str, ...]:
    first = (
        "the kept RNG state does not cover every stream the step drew from (a DataLoader's or "
        "another torch.Generator, NumPy, Python random)"
        if rng == "kept"
        else "a different RNG stream: dropout or other random ops drew other values; pass "
        "rng_state={'cpu': torch.get_rng_state()} taken before the step"
    )
    return (first, *_NOT_REPRODUCED)


def _report(
    facts: ForwardFacts,
    forward: NonfiniteReport,
    backward: BackwardNanReport | None,
    loss: float | None,
    unavailable: list[Unavailable],
    rng: RngSource,
    step: StepModule,
    inputs: Any,
) -> InvestigationReport:
    fields: dict[str, Any] = {name: getattr(forward, name) for name in _PANEL_FIELDS}
    # the replay covers the backward and custom Functions itself: no anomaly-mode recipe
    fields["anomaly_recipe"] = ""
    call_note = describe_call(step._forward_fn, step._call)
    notes = (
        *((call_note,) if call_note else ()),
        *(d for d in forward.disclosures if d != NOT_COVERED),
    )
    rng_note = (
        "replayed under the "
        + (
            "RNG state passed in (rng_state)"
            if rng == "kept"
            else "current RNG state (no rng_state)"
        )
        + "; the caller's RNG streams, buffers, .grad and modes were restored afterwards."
    )
    common: dict[str, Any] = dict(
        subject=f"{facts.trace.model_type} (one step replayed, {len(facts.trace)} ops)",
        loss_source=step.loss_source,
        rng=rng,
        forward=forward,
        backward=backward,
        unavailable=tuple(unavailable),
    )
    status: InvestigationStatus
    if forward.found:
        origin = forward.first_bad_thing
        faults = _input_faults(facts, inputs) if origin and origin.func == "input" else ()
        status = "nonfinite_input" if faults else "found"
        findings = [*_fault_findings(faults), *forward.findings]
        lead = _input_lead(faults) if faults else f"replayed step: {forward.lead}"
        return InvestigationReport(
            status=status,
            lead=lead,
            phase="forward",
            loss=step.loss_value,
            nonfinite_inputs=faults,
            evidence="nonfinite",
            findings=tuple(findings),
            disclosures=(rng_note, *notes),
            exits=tuple(e for e in forward.exits if e.action is not None),
            actions=forward.actions,
            **fields,
            **common,
        )
    if backward is not None and backward.found:
        thing = backward.first_bad_thing
        assert thing is not None
        fields.update(
            found=True, kind=thing.kind, first_bad_thing=thing, amp_hint=backward.amp_hint
        )
        exits, actions = _forward_lineage(facts, thing.op, fields)
        return InvestigationReport(
            status="found",
            lead=f"finite forward and loss ({loss:.4g}); {backward.lead}",
            phase="backward",
            loss=loss,
            evidence="backward_nan",
            findings=backward.findings,
            tables=backward.tables,
            disclosures=(rng_note, *notes, *backward.disclosures),
            exits=exits,
            actions=actions,
            **fields,
            **common,
        )
    if facts.forward_error is not None or backward is None:
        what = (
            f"the replayed forward raised {type(facts.forward_error).__name__} after "
            f"{len(facts.trace)} ops"
            + (
                " (if the batch is not the forward's arguments, replay with "
                "forward_fn=lambda model, batch: ... calling the model as the step did)"
                if isinstance(facts.forward_error, TypeError) and step._forward_fn is None
                else ""
            )
            if facts.forward_error is not None
            else f"the backward could not run ({unavailable[0].reason})"
        )
        return InvestigationReport(
            status="incomplete",
            lead=f"{what}; nothing non-finite that matters in what ran, the rest was not checked.",
            phase=None,
            loss=loss,
            findings=forward.findings,
            disclosures=(rng_note, *notes),
            **fields,
            **common,
        )
    reasons = _reasons(rng)
    checked = len(backward.transitions)
    return InvestigationReport(
        status="not_reproduced",
        lead=(
            f"not reproduced: the replayed forward ({forward.num_checked} op outputs), loss "
            f"({loss:.4g}) and backward ({checked} grad_fn fires) hold no NaN or Inf that "
            "matters."
        ),
        phase=None,
        loss=loss,
        likely_reasons=reasons,
        findings=(
            Finding(
                "not_reproduced",
                "warning",
                "the failure did not reproduce on this replay; likely: " + "; ".join(reasons[:2]),
                remedy="replay with the RNG state and the batch kept at the failing step "
                "(ChecksSession.step(inputs=...) keeps both).",
                fields={"reasons": reasons},
            ),
        ),
        tables=backward.tables,
        disclosures=(rng_note, *notes, *backward.disclosures),
        exits=(
            Exit(
                "Replay under the step's RNG state",
                "rng = torch.get_rng_state()  # before the step; after it fails: "
                "tl.debug.investigate(model, batch, loss_fn=loss_fn, rng_state={'cpu': rng})",
            ),
        ),
        **fields,
        **common,
    )


def _forward_lineage(
    facts: ForwardFacts, label: str | None, fields: dict[str, Any]
) -> tuple[tuple[Exit, ...], dict[str, Any]]:
    """Lineage of a backward birth's forward op, from the first replay (metadata only)."""
    if label is None or label not in facts.trace:
        return (), {}
    role = "forward op of the birth"
    fields.update(lineage_role=role, **lineage_fields(facts, label, role))
    held = metadata_only(facts)
    exits = (
        Exit(
            "Show forward lineage",
            f"report.run_action('lineage', label={label!r})",  # the replay left no trace to name
            action="lineage",
            args={"label": label},
        ),
    )
    actions = {
        "lineage": lineage_action(facts.trace, held, label, role, label=label, direction="both"),
        "expand": lineage_action(facts.trace, held, label, role),
    }
    return exits, actions


def _fault_findings(faults: tuple[InputFault, ...]) -> list[Finding]:
    return [
        Finding(
            "nonfinite_batch",
            "critical",
            f"the batch's {fault.field} ({fault.op}) already holds {fault.kind}"
            + (
                f" in {fault.num_rows} row{'s' if fault.num_rows != 1 else ''} "
                f"({', '.join(map(str, fault.rows))}{', ...' if fault.num_rows > len(fault.rows) else ''})"
                if fault.rows
                else ""
            )
            + f": {fault.stats.text()}.",
            remedy="find the sample(s) in the data pipeline; drop or repair them before the step "
            "(torch.isfinite(x).all() at load time).",
            fields={"field": fault.field, "rows": fault.rows, "num_rows": fault.num_rows},
        )
        for fault in faults
    ]


def _input_lead(faults: tuple[InputFault, ...]) -> str:
    first = faults[0]
    shown = ", ".join(map(str, first.rows[:4])) + (", ..." if first.num_rows > 4 else "")
    rows = f" (row{'s' if first.num_rows != 1 else ''} {shown})" if first.rows else ""
    more = (
        f" (and {len(faults) - 1} more field{'s' if len(faults) > 2 else ''})"
        if len(faults) > 1
        else ""
    )
    kind = "NaN and Inf" if first.kind == "mixed" else first.kind
    return (
        f"the batch already holds {kind} in {first.field}{rows}{more}: the value comes from "
        "the data, not the model."
    )
