"""Build the immutable ``CheckReport`` (and the dashboard's live state) from the engine.

Pure host work on numbers the sites already read: assembling a report adds no device work.
Status rule: ``raised`` when a check raised; ``found`` when a warning or critical finding exists;
``incomplete`` when no check is registered (the default watchdog alone judges no gradient), a
registered check judged nothing, or a registered check's evidence is unavailable (unknown never
passes); ``clean`` otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ...report import Exit, Finding, Table, Unavailable
from ...report._actions import live_action
from ...report._checks import CheckReport, CheckRun, CheckStatus
from ..dashboard._timeline import TimelineRecorder, live_timeline
from ..gradients._nonfinite import INVESTIGATE_CALL
from ..gradients._update_ratio import UpdateRatioCheck
from ..stability._spike import spike_followup
from ..stability._stability import StabilityCheck
from ._engine import Engine
from ._replay import Replay
from ._series import SERIES_COLUMNS

PARAM_COLUMNS = (
    "param",
    "group",
    "numel",
    "dtype",
    "grad_fact",
    "grad_norm_raw",
    "grad_stage",
    "grad_scale_provenance",
    "update_ratio",
    "update_ratio_lr_normalized",
    "update_attempt",
    "update_stage",
    "update_scale_provenance",
)

_ACTIVATIONS_UNAVAILABLE = Unavailable(
    "activations",
    "the checks kit is capture-free: forward activations are not observed; "
    "tl.debug.RangeProbe / LivenessProbe on a tl.trace cover them",
    "not_observed",
)
_ACTIVATIONS_SAMPLED = Unavailable(
    "activations",
    "sampled only: the stability check read each block's output RMS (and the attention "
    "logits, log Z) on its probed forwards, one attempt in probe_every; values inside the "
    "activations (non-finite, out of range) are not checked: tl.debug.RangeProbe / "
    "LivenessProbe on a tl.trace cover them",
    "sampled",
)


def counters(engine: Engine) -> dict[str, Any]:
    """``report.counters`` now."""
    return engine.ledger.counters(engine.backwards, engine.arrivals, engine.pending_backwards)


def scale_ledger(engine: Engine, count: dict[str, Any]) -> dict[str, Any]:
    """``ledgers["scale"]`` given the counters ``count`` (see ``ScaleLedger.to_dict``)."""
    return engine.scale_ledger.to_dict(count["attempts"], count["skipped"])


def ledgers(engine: Engine, count: dict[str, Any]) -> dict[str, Any]:
    """``report.ledgers``: the skip ledger and the per-attempt records."""
    return {
        "scale": scale_ledger(engine, count),
        "steps": list(engine.ledger.records),
        "steps_dropped": engine.ledger.records_dropped,
    }


@dataclass(frozen=True)
class _Verdict:
    """What the report and the live dashboard both state: findings, runs, status, lead."""

    findings: list[Finding]
    runs: list[CheckRun]
    unavailable: list[Unavailable]
    counters: dict[str, Any]
    status: CheckStatus
    lead: str


def _verdict(engine: Engine) -> _Verdict:
    findings = [f for check in engine.checks.values() for f in check.findings()]
    findings += engine.session_findings
    findings += _first_seen(engine)
    unavailable = [u for check in engine.checks.values() for u in check.unavailable()]
    unavailable += _arrival_unavailable(engine)
    runs = [check.run() for check in engine.checks.values()]
    status: CheckStatus = "clean"
    if any(run.state == "raised" for run in runs):
        status = "raised"
    elif any(f.severity != "info" for f in findings):
        status = "found"
    elif not engine.registered or unavailable or any(run.evaluations == 0 for run in runs):
        status = "incomplete"
    count = counters(engine)
    lead = session_lead(count, len(findings), is_registered=bool(engine.registered))
    return _Verdict(findings, runs, unavailable, count, status, lead)


def session_lead(count: Mapping[str, Any], num_findings: int, *, is_registered: bool) -> str:
    """The session report's lead: the attempt counters, then the number of findings."""
    return (
        f"{count['attempts']} attempt(s): {count['accepted']} accepted, "
        f"{count['skipped']} skipped"
        + (f", {count['raised']} raised" if count["raised"] else "")
        + f" ({count['step_provenance']}); "
        + (
            f"{num_findings} finding(s)."
            if num_findings
            else "no findings."
            if is_registered
            else "no check registered."
        )
    )


def build_report(
    engine: Engine,
    subject: str,
    *,
    is_final: bool,
    exit_reason: str | None,
    paused_spans: int,
    replay: Replay | None = None,
) -> CheckReport:
    """The report of everything the engine has seen; with the ``replay`` of a raised attempt,
    its "Find where it was born" exit runs ``replay.investigate()`` from the panel (action
    ``investigate``, disabled with its reason once the model is released)."""
    verdict = _verdict(engine)
    model = replay.model() if replay is not None else None
    actions = (
        {"investigate": live_action(replay.investigate, needs=model, gone=MODEL_RELEASED)}
        if replay is not None and model is not None
        else {}
    )
    count = verdict.counters
    stability = engine.checks.get(StabilityCheck.name)
    spike_exits, spike_actions = spike_followup(
        stability.spikes if isinstance(stability, StabilityCheck) else None,
        {f.code for f in verdict.findings},
    )
    recorder = _recorder(engine)
    return CheckReport(
        subject=subject,
        status=verdict.status,
        lead=verdict.lead,
        findings=tuple(verdict.findings),
        tables=(
            _params_table(engine),
            Table.from_dicts("series", list(engine.series.rows), SERIES_COLUMNS),
        ),
        disclosures=tuple(_disclosures(engine, count, paused_spans)),
        unavailable=tuple(verdict.unavailable + _mandatory_unavailable(engine, count)),
        exits=tuple(_exits(verdict.findings, has_replay=bool(actions)) + spike_exits),
        actions={**actions, **spike_actions},
        checks_run=tuple(verdict.runs),
        counters=count,
        ledgers=ledgers(engine, count),
        is_final=is_final,
        exit_reason=exit_reason,
        timeline=recorder.timeline(verdict.findings) if recorder is not None else None,
    )


def _recorder(engine: Engine) -> TimelineRecorder | None:
    """The stability check's timeline recorder (None when the check is off)."""
    check = engine.checks.get("stability")
    return check.timeline if isinstance(check, StabilityCheck) else None


def _params_table(engine: Engine) -> Table:
    attempt = engine.last_attempt
    updates = next((c for c in engine.checks.values() if isinstance(c, UpdateRatioCheck)), None)
    rows = []
    infos = engine.roster.infos
    for info in (infos[i] for i in engine.roster.optimized):
        ratio, normalized, at = (None, None, None)
        if updates is not None and info.index in updates.last:
            ratio, normalized, at = updates.last[info.index]
        norm = attempt.final_norms.get(info.index) if attempt else None
        rows.append(
            {
                "param": info.name,
                "group": info.group,
                "numel": info.numel,
                "dtype": info.dtype,
                "grad_fact": attempt.fact(info.index)
                if attempt and attempt.backward_count
                else None,
                "grad_norm_raw": norm,
                # where and how a norm was read: nothing to say of a norm not measured
                "grad_stage": attempt.stage if attempt and norm is not None else None,
                "grad_scale_provenance": attempt.scale_provenance
                if attempt and norm is not None
                else None,
                "update_ratio": ratio,
                "update_ratio_lr_normalized": normalized,
                "update_attempt": at,
                "update_stage": "post_clip_applied" if at is not None else None,
                "update_scale_provenance": "unscaled" if at is not None else None,
            }
        )
    return Table.from_dicts(
        "params", rows, PARAM_COLUMNS, {"last_attempt": attempt.index if attempt else None}
    )


def _disclosures(engine: Engine, count: dict[str, Any], paused_spans: int) -> list[str]:
    notes = []
    if count["step_provenance"] == "inferred":
        # the way to exact attribution matters only once an attempt ended without a step
        notes.append(
            "Attempt grouping is inferred from hooks (step_provenance='inferred'); "
            "use `with session.step(global_step=..., micro_batches=...)` for exact "
            "accepted/skipped attribution."
            if count["skipped"]
            else "Attempts are grouped from the hooks: each optimizer.step() closes one."
        )
    if engine.needs_norms:
        notes.append(
            "Gradient norms are read as each backward delivers them, before any clipping; under "
            "accumulation they are norms of the accumulated gradient."
        )
        arrival = engine.arrival_reads.note()
        if arrival is not None:
            notes.append(arrival)
    if engine.sample_every is not None:
        notes.append(
            f"Update ratios and movement are sampled every {engine.sample_every} "
            "accepted step(s) (a weight snapshot each time)."
        )
    outside = engine.roster.outside
    if outside:
        notes.append(
            f"{len(outside)} parameter(s) require grad but are not in the optimizer: their "
            "gradients are watched as backward delivers them (a non-finite one is named, since clipping over "
            "every parameter spreads it) but no training check judges them: "
            + ", ".join(outside[:3])
        )
    if engine.unobserved_backwards:
        notes.append(
            f"{engine.unobserved_backwards} backward(s) ran while the gradient-arrival watch kept one hook (the "
            "graph had been stable) and gave the hooked parameter no gradient: their "
            "gradients were judged at the step site but not counted as backwards (every "
            "hook is back since)."
        )
    if count["backwards_outside_steps"]:
        notes.append(
            f"{count['backwards_outside_steps']} backward(s) reached these parameters outside "
            "every session.step() block and their gradients were reset before a step used "
            "them (another optimizer's loss through this model, as a GAN generator's through "
            "its discriminator): they are not attempts."
        )
    if engine.attempts_without_backward:
        notes.append(
            f"{engine.attempts_without_backward} optimizer step(s) ran with no observed "
            "backward and were not judged."
        )
    if paused_spans:
        notes.append(
            f"The session was disabled {paused_spans} time(s); evidence of those spans "
            "(and of an attempt they interrupted) is not judged."
        )
    scale = scale_ledger(engine, count)
    if scale.get("method") == "scale_decrements" and scale["skipped"] != count["skipped"]:
        notes.append(
            f"The skip ledger counts {scale['skipped']} scale decrement(s) but "
            f"{count['skipped']} attempt(s) were closed as skipped (an explicit "
            "scaler.update(new_scale) or a backoff_factor of 1 breaks the one-to-one "
            "rule)."
        )
    return notes


def _arrival_unavailable(engine: Engine) -> list[Unavailable]:
    """Arrival reads a deferred attempt could not take (``_arrival.py``): never "clean"."""
    unread = engine.arrival_reads.unread_attempts
    if not unread:
        return []
    return [
        Unavailable(
            "arrival_norms",
            f"{unread} attempt(s) had gradients changed in place between backward and step "
            "before their arrival read, deferred to the step site, ran: what those gradients "
            "held when their backward ended was not read (arrival reads are eager since)",
            "not_read",
        )
    ]


def _mandatory_unavailable(engine: Engine, count: dict[str, Any]) -> list[Unavailable]:
    recorder = _recorder(engine)
    sampled = recorder is not None and recorder.has("activation_rms")
    entries = [_ACTIVATIONS_SAMPLED if sampled else _ACTIVATIONS_UNAVAILABLE]
    if "magnitude" not in engine.checks:
        entries.append(
            Unavailable(
                "magnitude",
                "off by default: register_magnitude_check() arms the magnitude verdicts "
                "on gradient norms before clipping",
                "not_registered",
            )
        )
    if not engine.is_nonfinite_armed:
        entries.append(
            Unavailable(
                "nonfinite_grad",
                "not registered: the non-finite gradients the session reads for its other "
                "checks are collected as findings, but nothing stops optimizer.step() from "
                "writing one; register_nonfinite_grad_check() raises before the write"
                if engine.needs_norms
                else "not registered, and no registered check reads gradient values: "
                "non-finite gradients are not observed; register_nonfinite_grad_check() "
                "reads them and raises before the write",
                "not_registered",
            )
        )
    scale = scale_ledger(engine, count)
    if scale["method"] == "unknown":  # an undeclared scaler and a skip it may have caused
        entries.append(Unavailable("skip_ledger", scale["reason"], "scale_unknown"))
    if not count["attempts"]:
        entries.append(
            Unavailable("session", "no optimizer attempt was observed yet", "no_evidence")
        )
    return entries


MODEL_RELEASED = (
    "the model of this raise was released; replay the batch with "
    "tl.debug.investigate(model, batch, loss_fn=...)."
)


def _exits(findings: list[Finding], *, has_replay: bool) -> list[Exit]:
    codes = {f.code for f in findings}
    exits = []
    if "param_received_no_gradient" in codes:
        exits.append(Exit("Find the gradient frontier", "tl.debug.grad_health(trace)"))
    nonfinite = [f for f in findings if f.code == "nonfinite_grad"]
    if nonfinite:
        raised = [f for f in nonfinite if f.fields.get("is_step_stopped")]
        call = (raised or nonfinite)[-1].fields.get("next_step", INVESTIGATE_CALL)
        exits.append(
            Exit(
                "Find where the value was born",
                call,
                action="investigate" if has_replay and raised else None,
                is_primary=has_replay and bool(raised),
            )
        )
    return exits


def _first_seen(engine: Engine) -> list[Finding]:
    """``param_first_seen``: the parameters that joined the roster while the session ran."""
    seen = engine.roster.first_seen
    if not seen:
        return []
    names = [row["param"] for row in seen]
    return [
        Finding(
            "param_first_seen",
            "info",
            f"{len(seen)} parameter(s) joined the optimizer's work (or, outside it, started "
            f"to require grad) after the session started and are judged from attempt "
            f"{seen[0]['attempt']} on: "
            + ", ".join(names[:5])
            + (f" and {len(names) - 5} more." if len(names) > 5 else "."),
            fields={"code": "param_first_seen", "params": [dict(row) for row in seen]},
        )
    ]


def live_state(engine: Engine) -> dict[str, Any]:
    """The dashboard increment: status, lead, counters, check states, findings, the skip
    ledger summary and the chart rows added since the previous increment."""
    verdict = _verdict(engine)
    scale = scale_ledger(engine, verdict.counters)
    return {
        "status": verdict.status,
        "lead": verdict.lead,
        "counters": verdict.counters,
        "checks": [run.as_dict() for run in verdict.runs],
        "findings": [
            {"code": f.code, "severity": f.severity, "message": f.message} for f in verdict.findings
        ],
        "scale": {k: v for k, v in scale.items() if k != "decrements"},
        "points": engine.series.take_fresh(),
        **_live_timeline(engine, verdict.findings),
    }


def _live_timeline(engine: Engine, findings: list[Finding]) -> dict[str, Any]:
    """``{"timeline": ...}`` when the timeline changed since the previous increment."""
    recorder = _recorder(engine)
    timeline = recorder.take_changed(findings) if recorder is not None else None
    return {"timeline": live_timeline(timeline)} if timeline is not None else {}
