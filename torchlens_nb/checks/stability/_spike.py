"""Spike forensics: what changed at a kept step against the step before it (``SpikeReport``).

:func:`spike_forensics` reads the :class:`~._spike_keep.KeptStep` the stability check's keeper
holds and re-runs the model's forward, through ``torch.func.functional_call`` on the kept host
weights moved back to the model's device, on this step's batch and on the previous step's:

* activations: the RMS of every submodule's output (forward hooks on the model for the two
  re-runs only, removed after them, also when the forward raises or a Ctrl-C lands anywhere:
  ``tests/faults/test_interrupt_sweep_spike.py``);
* gradients: the norm of each module's parameters' gradient of the mean per-sample loss
  (``torch.autograd.grad`` on the re-run's own leaves: nothing is written to ``.grad``);
* samples: the per-sample loss of this step's batch, from ``loss_fn(output, *inputs)`` when
  given, else for a language model (one integer ``(B, T)`` input, ``(B, T, V)`` logits) the
  next-token cross-entropy over the input's own tokens (``reduction="none"``); otherwise
  ``unavailable`` with the reason;
* update: the upcoming update's ratio to the weight against the previous update's, kept at the
  step site from the optimizer's state.

The model, the optimizer and the loop are untouched: the parameters are never swapped in
place, the RNG is restored after the re-runs (dropout draws there do not shift the loop's
stream), the session's probe and keeper skip the re-runs. Cost: two forwards and two backwards
of the model on the kept batches, when called.
"""

from __future__ import annotations

import math
import statistics
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils._pytree import tree_map

from ..._hooks import add_forward_hooks
from ..._undo import Undo, undoing
from ..._validate import check_int
from ...errors import DiagnosticArgumentError
from ...report import Exit, Finding, Table, Unavailable, Where
from ...report._actions import live_action
from ...report._base import Severity
from ...report._spike import CARRY, JUMP, LAYER_COLUMNS, SAMPLE_COLUMNS, SpikeReport, SpikeStatus
from ._spike_keep import ARM_MAX_BYTES, Forward, KeptStep, SpikeKeeper, update_norms

_set_grad_enabled = torch._C._set_grad_enabled
"""Grad mode switched by a C call (``with torch.enable_grad():`` is a Python frame whose
``__exit__`` an interrupt can skip)."""

LossFn = Callable[..., torch.Tensor]
"""``loss_fn(output, *inputs, **kw_inputs)`` -> one loss per sample (first dimension)."""

SESSION_RELEASED = "the session that kept the step was released; keep a reference to it."


@dataclass
class _Run:
    """One re-run over a batch's forwards: device sums, then host values."""

    rms: dict[str, float] = field(default_factory=dict)
    grad: dict[str, float] = field(default_factory=dict)
    samples: list[tuple[Any, float]] = field(default_factory=list)
    loss_kind: str | None = None
    loss_missing: str | None = None


def spike_forensics(
    keeper: SpikeKeeper | None,
    *,
    attempt: int | None = None,
    loss_fn: LossFn | None = None,
    off_reason: str | None = None,
) -> SpikeReport:
    """Explain the kept step (see the module docstring).

    Args:
        keeper: the stability check's keeper, None when the check is off (``off_reason`` says why).
        attempt: the attempt to explain; None for the kept one. Only the last kept step is held.
        loss_fn: ``loss_fn(output, *inputs, **kw_inputs)`` returning one loss per sample.

    Raises:
        DiagnosticArgumentError: ``attempt`` is not an int >= 0 or not the kept step,
            ``loss_fn`` is not callable, or it returned no per-sample losses.
    """
    if attempt is not None:
        attempt = check_int(
            "attempt", attempt, low=0, hint="pass the attempt number a finding shows, or None"
        )
    if loss_fn is not None and not callable(loss_fn):
        raise DiagnosticArgumentError(
            f"loss_fn must be callable as loss_fn(output, *inputs) -> one loss per sample, got "
            f"{type(loss_fn).__name__}; pass None to let the session derive the per-sample loss."
        )
    kept = keeper.kept if keeper is not None else None
    if attempt is not None and (kept is None or kept.attempt != attempt):
        held = f"attempt {kept.attempt}" if kept is not None else "no step"
        raise DiagnosticArgumentError(
            f"attempt {attempt} was not kept: the session holds {held} (only the last spike, or "
            "with register_stability_check(keep='every_step') the last attempt); pass "
            "attempt=None."
        )
    model = keeper.model if keeper is not None else None
    if keeper is None or kept is None or model is None:
        return _not_kept(keeper, off_reason, is_released=keeper is not None and model is None)

    def explain(undo: Undo) -> SpikeReport:
        # every restore registered before its change: a Ctrl-C at any instant leaves the
        # keeper, the probe, grad mode (also around update_norms' `with torch.no_grad():`), the
        # RNG and the model's hooks as they were
        keeper.explain(undo)
        undo.add(partial(_set_grad_enabled, torch.is_grad_enabled()))
        undo.add(_rng_restorer(kept.device))
        _set_grad_enabled(True)
        now = _rerun(model, kept.device, kept.weights, kept.forwards, loss_fn)
        before_weights = kept.previous_weights or kept.weights
        before = _rerun(model, kept.device, before_weights, kept.previous, loss_fn)
        return _report(kept, now, before if kept.previous is not None else None)

    return undoing(explain)


def spike_followup(
    keeper: SpikeKeeper | None, codes: set[str]
) -> tuple[list[Exit], dict[str, Any]]:
    """The session report's exit to the forensics (a kept step, or a loss spike to explain)
    and its action, which holds the keeper by weak reference."""
    if keeper is None or (keeper.kept is None and "loss_spike" not in codes):
        return [], {}
    ref = weakref.ref(keeper)

    def run() -> SpikeReport:
        return spike_forensics(ref())

    is_spike = "loss_spike" in codes or (keeper.kept is not None and keeper.kept.trigger == "spike")
    label = "Explain the spike" if is_spike else "Explain the last step"
    exit_ = Exit(label, "session.spike_forensics()", action="spike_forensics")
    return [exit_], {"spike_forensics": live_action(run, needs=keeper, gone=SESSION_RELEASED)}


# ----- re-running ----------------------------------------------------------------------------------
def _rerun(
    model: torch.nn.Module,
    device: torch.device,
    weights: dict[str, torch.Tensor],
    forwards: list[Forward] | None,
    loss_fn: LossFn | None,
) -> _Run:
    run = _Run()
    if not forwards:
        return run
    trainable_names = {n for n, p in model.named_parameters() if p.is_floating_point()}
    leaves = {  # copies: the kept step stays as kept (a BatchNorm re-run writes its buffers)
        n: w.to(device, copy=True).requires_grad_(n in trainable_names) for n, w in weights.items()
    }
    sums: dict[str, list[torch.Tensor]] = {}
    counts: dict[str, int] = {}
    grads: dict[str, torch.Tensor] = {}
    losses: list[tuple[Any, torch.Tensor]] = []

    def forward_all(undo: Undo) -> None:
        for name, module in model.named_modules():
            if module is not model:
                add_forward_hooks(undo, module, post=_recorder(name, sums, counts))
        for position, (args, kwargs) in enumerate(forwards):
            args, kwargs = tree_map(_to(device), (args, kwargs))
            output = torch.func.functional_call(model, leaves, args, kwargs)
            per_sample, run.loss_kind, run.loss_missing = _per_sample(output, args, kwargs, loss_fn)
            if per_sample is None:
                continue
            trainable = {n: t for n, t in leaves.items() if t.requires_grad}
            found = torch.autograd.grad(
                per_sample.sum(), list(trainable.values()), allow_unused=True
            )
            for n, g in zip(trainable, found):
                if g is not None:
                    grads[n] = grads[n] + g if n in grads else g.detach()
            label = (lambda i: i) if len(forwards) == 1 else (lambda i, p=position: f"{p}:{i}")
            losses.extend((label(i), v) for i, v in enumerate(per_sample.detach()))

    undoing(forward_all)  # the hooks are off the model before the next re-run
    total = len(losses) or 1
    module_sq: dict[str, torch.Tensor] = {}
    for n, g in grads.items():
        owner = _owner(n)
        square = (g.float() / total).square().sum()
        module_sq[owner] = module_sq[owner] + square if owner in module_sq else square
    order = list(sums) + list(module_sq) + [label for label, _ in losses]
    flat = [torch.stack(sums[n]).sum() for n in sums] + list(module_sq.values())
    flat += [v.float() for _, v in losses]
    values = torch.stack([t.reshape(()) for t in flat]).cpu().tolist() if flat else []
    for name, value in zip(order[: len(sums)], values):
        run.rms[name] = math.sqrt(value / counts[name]) if counts[name] else math.nan
    for name, value in zip(list(module_sq), values[len(sums) : len(sums) + len(module_sq)]):
        run.grad[name] = math.sqrt(value)
    run.samples = list(zip([label for label, _ in losses], values[len(sums) + len(module_sq) :]))
    return run


def _rng_restorer(device: torch.device) -> Callable[[], None]:
    """Save the CPU stream (and ``device``'s when it is CUDA) now; the returned action puts them
    back and may run any number of times (an ``Undo`` action): dropout draws in the re-runs do
    not shift the loop's stream."""
    cpu = torch.get_rng_state()
    cuda = torch.cuda.get_rng_state(device) if device.type == "cuda" else None

    def restore() -> None:
        torch.set_rng_state(cpu)
        if cuda is not None:
            torch.cuda.set_rng_state(cuda, device)

    return restore


def _to(device: torch.device) -> Callable[[Any], Any]:
    def move(value: Any) -> Any:
        return value.to(device) if isinstance(value, torch.Tensor) else value

    return move


def _owner(param_name: str) -> str:
    return param_name.rpartition(".")[0] or "(root)"


def _recorder(
    name: str, sums: dict[str, list[torch.Tensor]], counts: dict[str, int]
) -> Callable[..., None]:
    def record(_module: torch.nn.Module, _args: Any, output: Any) -> None:
        tensor = output if isinstance(output, torch.Tensor) else None
        if isinstance(output, (tuple, list)) and output and isinstance(output[0], torch.Tensor):
            tensor = output[0]
        if tensor is None or not tensor.is_floating_point() or tensor.numel() == 0:
            return
        sums.setdefault(name, []).append(tensor.detach().float().square().sum())
        counts[name] = counts.get(name, 0) + tensor.numel()

    return record


def _per_sample(
    output: Any, args: tuple[Any, ...], kwargs: dict[str, Any], loss_fn: LossFn | None
) -> tuple[torch.Tensor | None, str | None, str | None]:
    """(per-sample losses, how they were computed, or why they could not be)."""
    logits = output if isinstance(output, torch.Tensor) else getattr(output, "logits", None)
    if loss_fn is not None:
        value = loss_fn(output, *args, **kwargs)
        if not isinstance(value, torch.Tensor) or value.dim() == 0:
            raise DiagnosticArgumentError(
                "loss_fn must return one loss per sample (a tensor whose first dimension is the "
                f"batch), got {type(value).__name__} of shape "
                f"{tuple(getattr(value, 'shape', ()))}; use reduction='none'."
            )
        return value.reshape(value.shape[0], -1).float().mean(1), "loss_fn", None
    tokens = args[0] if len(args) == 1 and not kwargs else None
    if (
        isinstance(tokens, torch.Tensor)
        and isinstance(logits, torch.Tensor)
        and not tokens.is_floating_point()
        and tokens.dim() == 2
        and tokens.shape[1] >= 2
        and logits.dim() == 3
        and logits.shape[:2] == tokens.shape
        and int(tokens.min()) >= 0
        and int(tokens.max()) < logits.shape[-1]
    ):
        batch, length, vocab = logits.shape
        per_token = F.cross_entropy(
            logits[:, :-1].reshape(-1, vocab).float(),
            tokens[:, 1:].reshape(-1).long(),
            reduction="none",
        )
        return per_token.view(batch, length - 1).mean(1), "next_token_cross_entropy", None
    return (
        None,
        None,
        "the loss cannot be recomputed from the forward's inputs (its targets are not among "
        "them, and the output is not a language model's over its own tokens); pass "
        "loss_fn=lambda output, *inputs: per-sample losses",
    )


# ----- the report --------------------------------------------------------------------------------
def _ratio(now: float | None, before: float | None) -> float | None:
    if now is None or before is None or not (math.isfinite(now) and math.isfinite(before)):
        return None
    if before == 0:
        return math.inf if now > 0 else None
    return now / before


def _update_ratios(
    kept: KeptStep, norms: dict[str, tuple[float, float | None, float]]
) -> dict[str, tuple[float | None, float | None]]:
    """Per module: (upcoming update / weight, previous update / weight). The previous update is
    ``w - w_before`` when the previous step's weights were kept (exact, weight decay included),
    else the one recomputed from the optimizer's state."""
    squares: dict[str, list[float]] = {}
    before_weights = kept.previous_weights
    for name, (upcoming, before, weight) in norms.items():
        if before_weights is not None and name in before_weights:
            before = float(
                torch.linalg.vector_norm((kept.weights[name] - before_weights[name]).float())
            )
        entry = squares.setdefault(_owner(name), [0.0, 0.0, 0.0, 1.0])
        entry[0] += upcoming * upcoming
        entry[1] += (before or 0.0) ** 2
        entry[2] += weight * weight
        entry[3] = min(entry[3], 0.0 if before is None else 1.0)
    return {
        owner: (
            math.sqrt(up) / math.sqrt(w) if w > 0 else None,
            math.sqrt(prev) / math.sqrt(w) if w > 0 and has_before else None,
        )
        for owner, (up, prev, w, has_before) in squares.items()
    }


def _layer_rows(
    kept: KeptStep,
    norms: dict[str, tuple[float, float | None, float]],
    now: _Run,
    before: _Run | None,
) -> list[dict[str, Any]]:
    updates = _update_ratios(kept, norms)
    names = list(dict.fromkeys([*now.rms, *now.grad, *updates]))
    rows = []
    for name in names:
        rms_before = before.rms.get(name) if before is not None else None
        grad_before = before.grad.get(name) if before is not None else None
        update, update_before = updates.get(name, (None, None))
        row: dict[str, Any] = {
            "layer": name,
            "activation_rms": now.rms.get(name),
            "activation_rms_before": rms_before,
            "activation_jump": _ratio(now.rms.get(name), rms_before),
            "grad_norm": now.grad.get(name),
            "grad_norm_before": grad_before,
            "grad_jump": _ratio(now.grad.get(name), grad_before),
            "update_ratio": update,
            "update_ratio_before": update_before,
            "update_jump": _ratio(update, update_before),
        }
        jumps: list[float] = [
            row[c] for c in ("activation_jump", "grad_jump", "update_jump") if row[c]
        ]
        row["is_jumped"] = any(j >= JUMP for j in jumps)
        row["_rank"] = max(jumps, default=0.0)
        rows.append(row)
    rows.sort(key=lambda r: -r.pop("_rank"))
    return rows


def _sample_rows(now: _Run) -> list[dict[str, Any]]:
    losses = [v for _, v in now.samples]
    if not losses:
        return []
    median = statistics.median(losses)
    total = math.fsum(losses)
    rows = [
        {
            "sample": label,
            "loss": value,
            "loss_to_median": value / median if median > 0 else None,
            "share": value / total if total > 0 else None,
            "carries": median > 0 and value >= CARRY * median,
        }
        for label, value in now.samples
    ]
    return sorted(rows, key=lambda r: -r["loss"] if math.isfinite(r["loss"]) else -math.inf)


_MEASURES = (
    ("activation", "activation_jump", "activation_rms", "Activations", "RMS"),
    ("grad", "grad_jump", "grad_norm", "Gradients", "norm"),
    ("update", "update_jump", "update_ratio", "The update", "ratio to the weight"),
)


def _findings(
    kept: KeptStep, layers: list[dict[str, Any]], samples: list[dict[str, Any]], before: _Run | None
) -> list[Finding]:
    severity: Severity = "warning" if kept.trigger == "spike" else "info"
    found = []
    carrying = [r for r in samples if r["carries"]]
    if samples and not carrying and before is not None and before.samples:
        median = statistics.median(r["loss"] for r in samples)
        median_before = statistics.median(v for _, v in before.samples)
        found.append(
            Finding(
                "loss_across_batch",
                "info",
                f"No sample carries the loss alone (the largest is "
                f"{samples[0]['loss_to_median'] or math.nan:.2f}x the batch median): the batch "
                f"median is {median:.4g} against {median_before:.4g} at the previous step.",
                fields={"median": median, "median_before": median_before},
            )
        )
    if carrying:
        top = carrying[0]
        found.append(
            Finding(
                "samples_carry_loss",
                severity,
                f"{len(carrying)} of {len(samples)} sample(s) carry the loss: sample "
                f"{top['sample']} at {top['loss']:.4g}, {top['loss_to_median']:.1f}x the batch "
                f"median ({top['share']:.0%} of the batch's loss).",
                remedy="Look at these samples of the batch (a corrupt or out-of-distribution "
                "example); the measurement does not say whether they are wrong.",
                fields={"samples": [r["sample"] for r in carrying[:8]]},
            )
        )
    for key, column, value, what, unit in _MEASURES:
        jumped = [r for r in layers if r[column] is not None and r[column] >= JUMP]
        if not jumped:
            continue
        top = max(jumped, key=lambda r: r[column])
        found.append(
            Finding(
                f"{key}_jump",
                severity,
                f"{what} jumped most in {top['layer']}: {unit} {top[value]:.3g} against "
                f"{top[value + '_before']:.3g} at the previous step ({top[column]:.3g}x); "
                f"{len(jumped)} layer(s) at least {JUMP:g}x.",
                where=Where(module=top["layer"]),
                fields={"layers": [r["layer"] for r in jumped[:8]], "jump": top[column]},
            )
        )
    return found


def _unavailable(
    kept: KeptStep,
    norms: dict[str, tuple[float, float | None, float]],
    missing: str | None,
    now: _Run,
) -> list[Unavailable]:
    out = []
    if kept.forwards_missing is not None:
        out.append(Unavailable("batch", kept.forwards_missing, "no_batch"))
    if kept.previous is None:
        out.append(Unavailable("previous_batch", kept.previous_missing or "", "no_previous"))
    if now.loss_missing is not None:
        out.append(Unavailable("samples", now.loss_missing, "no_loss"))
    if missing is not None:
        out.append(Unavailable("update", missing, "not_modelled"))
    elif norms and kept.previous_weights is None and all(b is None for _, b, _ in norms.values()):
        out.append(
            Unavailable("update", "the optimizer has taken no step yet", "no_previous_update")
        )
    return out


def _report(kept: KeptStep, now: _Run, before: _Run | None) -> SpikeReport:
    norms, missing = update_norms(kept)
    layers = _layer_rows(kept, norms, now, before)
    samples = _sample_rows(now)
    findings = _findings(kept, layers, samples, before)
    unavailable = _unavailable(kept, norms, missing, now)
    jumped_any = any(f.code != "loss_across_batch" for f in findings)
    status: SpikeStatus = (
        "jumped" if jumped_any else "partly_seen" if unavailable else "nothing_jumped"
    )
    spiked = (
        f" ({kept.loss / kept.loss_median:.1f}x its running median)"
        if kept.loss is not None and kept.loss_median
        else ""
    )
    loss = f"loss {kept.loss:.4g}{spiked}" if kept.loss is not None else "loss not read"
    jumped = sum(r["is_jumped"] for r in layers)
    carrying = sum(r["carries"] for r in samples)
    lead = (
        f"Attempt {kept.attempt}, {loss}: {jumped} layer(s) jumped at least {JUMP:g}x against "
        f"the previous step; {carrying} sample(s) carry the loss."
        if jumped_any
        else f"Attempt {kept.attempt}, {loss}: nothing jumped {JUMP:g}x against the previous "
        "step among what was measured, and no sample carries the loss."
    )
    disclosures = [
        (
            f"Each step re-ran on its own weights (attempt {kept.attempt}'s and the previous "
            "step's, kept while the check was armed): the columns compare the two steps as "
            "they ran. The update column compares the update the optimizer was about to take "
            "(from its state, weight decay left out) with the one it took (the weights' "
            "difference)."
            if kept.previous_weights is not None
            else f"The previous step's weights were not kept (the check was not armed before "
            f"this spike, or the model is larger than the {ARM_MAX_BYTES // 2**20} MiB it "
            f"copies per step while armed): both batches ran on the weights attempt {kept.attempt} used, so "
            "the activation and gradient columns show what the batch changed, not the "
            "weights. The update column compares the update the optimizer was about to take "
            "with its previous one, both from its state (weight decay left out)."
        ),
        f"The session held {kept.kept_bytes:,} bytes on the host for this step (the weights, "
        "the previous step's when armed, the gradients, the optimizer's state and two "
        "batches); only the last kept step is held.",
        "The re-runs fork the RNG: dropout draws differ from the step's, the loop's stream is "
        "untouched.",
    ]
    if now.loss_kind == "next_token_cross_entropy":
        disclosures.append(
            "Per-sample loss: next-token cross-entropy over the input's own tokens (the T-1 "
            "positions whose target is among the inputs), not the loop's loss function."
        )
    if kept.forwards_dropped:
        disclosures.append(
            f"{kept.forwards_dropped} forward(s) of the step beyond the first 64 were not kept."
        )
    return SpikeReport(
        subject=f"attempt {kept.attempt}",
        status=status,
        lead=lead,
        findings=tuple(findings),
        tables=(
            Table.from_dicts("layers", layers, LAYER_COLUMNS, {"jump": JUMP}),
            Table.from_dicts("samples", samples, SAMPLE_COLUMNS, {"carry": CARRY}),
        ),
        disclosures=tuple(disclosures),
        unavailable=tuple(unavailable),
        attempt=kept.attempt,
        trigger=kept.trigger,
        loss=kept.loss,
        loss_median=kept.loss_median,
        rerun_loss=statistics.fmean(v for _, v in now.samples) if now.samples else None,
        loss_kind=now.loss_kind,
        num_samples=len(now.samples),
        kept_bytes=kept.kept_bytes,
    )


def _not_kept(
    keeper: SpikeKeeper | None, off_reason: str | None, *, is_released: bool
) -> SpikeReport:
    if keeper is None:
        reason = off_reason or "the stability check is off, so no step is kept"
    elif is_released:
        reason = "the model was released; forensics re-runs its forward"
    else:
        missed = (
            f" (the spike(s) at attempt(s) {keeper.missed[:5]} were read after their step site, "
            "with the weights already moved)"
            if keeper.missed
            else ""
        )
        reason = (
            f"no loss spike was detected{missed}, so no step was kept; "
            "register_stability_check(keep='every_step') keeps the last step"
        )
    return SpikeReport(
        subject="no step kept",
        status="not_kept",
        lead=f"No step to explain: {reason}.",
        unavailable=(Unavailable("spike_forensics", reason, "not_kept"),),
    )
