"""The texts every NaN tool shares: recipes, the AMP hints (only where they apply), the scope
sentence, the lead and the disclosure of intentional infinities.

Each text states what was observed; a hint that depends on a condition (half-precision values,
a GradScaler) is produced only when the condition holds, so a panel shows what it gets.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from ..._validate import check_bool
from ...report import Exit
from ...report._nonfinite import Coverage, ScanStatus
from .._blind_spots import not_seen_text

if TYPE_CHECKING:
    from ...capture import Op
    from ._forward_scan import ForwardFacts
    from ._paths import Paths

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

NOT_COVERED = (
    "not covered: NaNs born in backward (finite forward) and inside custom autograd "
    "Functions; run tl.debug.bisect_nan_backward on a logged backward, or the "
    "torch.autograd.set_detect_anomaly recipe (report.anomaly_recipe) by hand."
)

HALF_DTYPES = frozenset({"float16", "bfloat16"})
"""The dtypes autocast computes in: an Inf there can be an overflow of that dtype."""

MAX_NAMED = 3
"""A disclosure names at most this many ops of a kind, then ``...``."""


# ----- AMP -----------------------------------------------------------------------------------
def amp_scaled_grads_hint(all_nonfinite: bool = False) -> str:
    """The AMP/GradScaler paragraph of a backward result whose gradients are half precision.

    ``bisect_nan_backward`` carries it only where it applies: an Inf-kind first bad gradient in
    float16/bfloat16 and no ``grad_scale`` disclosed.

    Args:
        all_nonfinite: add the sentence for a pass where every parameter gradient (every
            ``AccumulateGrad`` sink that was checked) received a non-finite value, the signature
            of a loss-scale overflow rather than of one bad op.

    Example:
        >>> amp_scaled_grads_hint().startswith("Gradients captured under torch.amp.GradScaler")
        True
    """
    check_bool("all_nonfinite", all_nonfinite)
    text = (
        "Gradients captured under torch.amp.GradScaler carry the loss scale (about 2**16 = "
        "65536 at the default init_scale): pass grad_scale=scaler.get_scale() so magnitudes "
        "read unscaled. In fp16 an Inf gradient can be loss-scale overflow, which the scaler "
        "detects and skips (the step is not applied and the scale halves): that is the "
        "mechanism working, not proof of a bad op."
    )
    if all_nonfinite:
        text += (
            " Every parameter gradient of this pass received a non-finite value, the typical "
            "signature of scale overflow: compare with a step after the scale has halved before "
            "debugging the model."
        )
    return text


def amp_forward_hint(op: Op, kind: str) -> str:
    """The AMP paragraph of a forward origin: only for an Inf born in a half-precision op.

    Returns ``""`` when it does not apply (a NaN, or an op computing in float32/float64).
    """
    if kind == "nan" or op.dtype not in HALF_DTYPES:
        return ""
    limit = torch.finfo(getattr(torch, op.dtype)).max
    return (
        f"{op.label} computes in {op.dtype}, whose largest finite value is {limit:.6g}: an Inf "
        "born there can be an overflow of that dtype. Under autocast, keep this op in float32 "
        "(torch.autocast(device_type, enabled=False) around it) or rescale its inputs; a "
        "GradScaler guards gradients, not the forward, so this Inf is a real forward value."
    )


def half_precision_note(facts: ForwardFacts) -> str | None:
    """The forward scan's AMP note, when some op output is float16/bfloat16 (else None)."""
    count = sum(1 for op in facts.ops if op.dtype in HALF_DTYPES)
    if not count:
        return None
    return (
        f"{count} op output{'s are' if count != 1 else ' is'} float16/bfloat16: values are "
        "checked as computed, so an overflow under autocast is a real Inf of this forward; "
        "gradients scaled by a GradScaler are outside a forward scan."
    )


# ----- scope, lead, status -------------------------------------------------------------------
def scope_text(facts: ForwardFacts) -> str:
    """``checked 12 of 14 floating-point op outputs (2 not saved); 3 integer outputs ...``."""
    total = facts.num_checked + facts.num_unchecked
    how = "live" if facts.mode == "live" else "saved"
    text = f"checked {facts.num_checked} of {total} floating-point op outputs ({how} values)"
    if facts.num_unchecked:
        text += f"; {facts.num_unchecked} not checked (not saved)"
    if facts.partial:
        text += (
            f"; {len(facts.partial)} multi-output ops had an output that could not be read "
            f"(e.g. {sorted(facts.partial)[0]})"
        )
    if facts.num_exact:
        text += f"; {facts.num_exact} integer/bool outputs are finite by dtype"
    if facts.trace.is_partial:
        text += f"; the forward ended after {len(facts.trace)} ops, later ops never ran"
    return text


def intentional_text(facts: ForwardFacts, paths: Paths) -> str | None:
    """``3 ops hold -inf by design (born at full_1 in decoder ...; neutralised by softmax_1 ...);
    none of it reaches the model output or a NaN.`` (None when there is none)."""
    holders = paths.intentional_holders
    if not holders:
        return None
    kinds = {k for k in facts.kinds_of(paths.intentional) if k is not None}
    # no NaN among them (a NaN always matters): "mixed" is both signs
    spelled = {frozenset({"-inf"}): "-inf", frozenset({"inf"}): "+inf"}.get(
        frozenset(kinds), "inf and -inf"
    )
    births = _named([_placed(facts.trace[label]) for label in paths.intentional])
    consumers = _named(list(paths.neutralisers)) or "nothing (the values are never used)"
    tail = (
        "none of it had reached a NaN when the run stopped"
        if facts.is_stopped_early
        else "none of it reaches the model output or a NaN"
    )
    verb = "holds" if len(holders) == 1 else "hold"
    return (
        f"{len(holders)} op{'s' if len(holders) != 1 else ''} {verb} {spelled} by design "
        f"(born at {births}; neutralised by {consumers}); {tail}."
    )


def hidden_text(facts: ForwardFacts, paths: Paths) -> str | None:
    """``the -inf born at full_1 meets the NaN only where a NaN already was (add_1): ...``
    (None when no Inf birth is hidden behind a NaN)."""
    hidden = paths.hidden_behind_nan
    if not hidden:
        return None
    births = _named([_placed(facts.trace[label]) for label in hidden])
    meets = _named(list(dict.fromkeys(hidden.values())))
    return (
        f"the Inf born at {births} meets a NaN only in ops that already had a NaN input "
        f"({meets}): the NaN, not the Inf, made them NaN, so whether the Inf would have been "
        "neutralised cannot be told; fix the NaN and check again."
    )


def _placed(op: Op) -> str:
    return f"{op.label} in {op.module}" if op.module else op.label


def _named(items: list[str]) -> str:
    head = ", ".join(items[:MAX_NAMED])
    return head + (", ..." if len(items) > MAX_NAMED else "")


def lead_text(thing: Any, facts: ForwardFacts, verb: str) -> str:
    """The one-sentence verdict of a forward scan (``verb``: "born" or "first appears")."""
    if thing is None:
        if facts.coverage == "none":
            return (
                "nothing checked: no floating-point op output was saved; run "
                "tl.debug.find_nan(model, inputs) or recapture with save=True."
            )
        by_design = bool(facts.paths().intentional_holders)
        if facts.coverage == "full":
            if by_design:
                return (
                    f"no NaN in any of the {facts.num_checked} floating-point op outputs (all "
                    "checked), and no Inf reaches the output."
                )
            return (
                f"no NaN or Inf in any of the {facts.num_checked} floating-point op outputs "
                "(all checked)."
            )
        missing = (
            f"{facts.num_unchecked} were not checked"
            if facts.num_unchecked
            else "the rest were not checked"
        )
        what = "no NaN, and no Inf that reaches the output," if by_design else "no NaN or Inf"
        if facts.trace.blind_spots and not facts.num_unchecked and not facts.trace.is_partial:
            missing = not_seen_text(facts.trace)
        return f"{what} in the {facts.num_checked} checked floating-point op outputs; {missing}."
    code = f": `{thing.code}`" if thing.code else ""  # no source text for exec'd code
    source = f" (line {thing.line}{code})" if thing.line else ""
    if thing.func == "input":
        return f"the model input {thing.op} already holds {thing.kind}{thing.rows_text()}{source}."
    place = f" in {thing.module}" if thing.module else ""
    has_inputs = bool(facts.trace[thing.op].parents)
    proof = (
        ("; its inputs were checked finite" if has_inputs else "; it read no recorded tensor")
        if thing.is_proven
        else "; its inputs were not all checked, see the uncertainty zone"
    )
    return f"{thing.kind} {verb} at {thing.op}{place}{source}{proof}."


def status_of(facts: ForwardFacts, found: bool) -> ScanStatus:
    """``found``, ``clean`` (full coverage), ``partial`` (clean where checked) or ``unchecked``."""
    return "found" if found else STATUS_OF_COVERAGE[facts.coverage]


STATUS_OF_COVERAGE: dict[Coverage, ScanStatus] = {
    "full": "clean",
    "partial": "partial",
    "none": "unchecked",
}
"""The status of a search that found nothing, by how much it could check."""


def subject_of(facts: ForwardFacts) -> str:
    return f"{facts.trace.model_type} ({facts.mode}, {len(facts.trace)} ops)"
