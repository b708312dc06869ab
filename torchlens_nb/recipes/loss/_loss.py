"""Loss recipes run once, without training: ``init_loss`` and ``random_input_test``.

Both run the caller's model in eval mode under ``torch.no_grad()`` and restore every submodule's
train/eval flag afterwards; nothing else about the model, the batch or the RNG changes (noise is
drawn from a private seeded generator).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from ..._validate import MAX_REPEATS, check_int
from ...capture import iter_tensors
from ...debug._isolation import keeps_torch_switches
from ...errors import DiagnosticArgumentError
from ...report import Finding, Unavailable
from ...report._recipes_data import (
    InitLossReport,
    LossKind,
    RandomInputReport,
    recipe_status,
    worst_finding,
)
from .._batches import (
    call_model,
    check_loss_fn,
    check_model,
    first_batch,
    loss_input,
    loss_value,
    model_device,
    primary_output,
    split_batch,
    to_device,
)
from .._model_state import preserved

TOLERANCE_FACTOR = 1.5
"""The initial loss is "far" from expected when outside ``[expected / 1.5, expected * 1.5]``.

Measured (tests/recipes/test_loss.py): a default-initialised 8-16-10 MLP on standardised inputs
starts within 2% of ln(10), and MLPs with MSE, L1 and BCE heads within 5% of their expected
values, while a 100-logit head on 10-class labels starts at 1.96x ln(10)."""
SIMILAR_GAP = 0.1
"""Real and noise losses within 10% of each other: the model is not using the input."""

_KINDS: dict[Any, LossKind] = {
    nn.CrossEntropyLoss: "cross_entropy",
    F.cross_entropy: "cross_entropy",
    nn.NLLLoss: "nll",
    F.nll_loss: "nll",
    nn.BCELoss: "bce",
    F.binary_cross_entropy: "bce",
    nn.BCEWithLogitsLoss: "bce_logits",
    F.binary_cross_entropy_with_logits: "bce_logits",
    nn.MSELoss: "mse",
    F.mse_loss: "mse",
    nn.L1Loss: "l1",
    F.l1_loss: "l1",
}
_ELEMENTWISE: frozenset[LossKind] = frozenset({"bce", "bce_logits", "mse", "l1"})


def resolved_loss_kind(loss_kind: Any, loss_fn: Any) -> LossKind:
    """``loss_kind`` when given (one of the known families), else read from ``loss_fn``."""
    if loss_kind is None:
        return loss_kind_of(loss_fn)
    if not isinstance(loss_kind, str) or loss_kind not in (*_KINDS.values(), "unknown"):
        raise DiagnosticArgumentError(
            f"loss_kind must be one of {sorted(set(_KINDS.values()))}, got {loss_kind!r}."
        )
    return loss_kind


def loss_kind_of(loss_fn: Any) -> LossKind:
    """The loss family of an ``nn`` loss module or ``torch.nn.functional`` loss function; for
    another callable, the family whose value it reproduces on known inputs (:func:`probe_kind`)."""
    try:
        known = _KINDS.get(type(loss_fn), _KINDS.get(loss_fn, "unknown"))
    except TypeError:  # an unhashable callable
        known = "unknown"
    return known if known != "unknown" else probe_kind(loss_fn)


BROKEN_FORMS: tuple[tuple[str, Any], ...] = (
    ("nll_on_probabilities", lambda z, y: F.nll_loss(z.softmax(dim=1), y)),
    ("double_softmax", lambda z, y: F.cross_entropy(z.softmax(dim=1), y)),
)
"""Plain loss functions that transform the scores wrongly before a torch loss: NLL of
softmax probabilities (the log is missing), cross-entropy of softmax probabilities."""


def probe_broken_form(loss_fn: Any) -> str | None:
    """The code of a :data:`BROKEN_FORMS` entry a plain loss function reproduces on the probe
    scores (None: none, or the function refuses class-index targets)."""
    generator = torch.Generator().manual_seed(0)
    scores = torch.randn(6, 5, generator=generator)
    labels = torch.randint(0, 5, (6,), generator=generator)
    with torch.no_grad():
        try:
            value = loss_fn(scores.clone(), labels.clone())
        except Exception:  # not a scores-and-labels loss
            return None
        if not isinstance(value, torch.Tensor) or value.numel() != 1:
            return None
        for code, form in BROKEN_FORMS:
            expected = float(form(scores, labels))
            if abs(float(value) - expected) <= PROBE_TOLERANCE * max(1.0, abs(expected)):
                return code
    return None


PROBE_TOLERANCE = 1e-5
"""A plain function is of a family when it reproduces that family's value within 1e-5
(relative) on each probe."""


def probe_kind(loss_fn: Any) -> LossKind:
    """Infer the family of a plain loss function by calling it on fixed probe tensors (6
    examples: scores over 5 classes with class labels; matching float tensors) and comparing
    with torch's own losses: ``def loss(out, y): return F.nll_loss(out, y)`` is ``"nll"``.
    "unknown" when none matches or the function raises (it is never trusted otherwise). Runs
    under no_grad with a private generator (the global RNG is untouched)."""
    generator = torch.Generator().manual_seed(0)
    scores = torch.randn(6, 5, generator=generator)
    labels = torch.randint(0, 5, (6,), generator=generator)
    floats = torch.randn(6, 5, generator=generator)
    binary = (torch.rand(6, 5, generator=generator) > 0.5).float()
    probes: tuple[tuple[LossKind, torch.Tensor, torch.Tensor, Any], ...] = (
        ("cross_entropy", scores, labels, F.cross_entropy),
        ("nll", scores, labels, F.nll_loss),
        ("mse", scores, floats, F.mse_loss),
        ("l1", scores, floats, F.l1_loss),
        ("bce_logits", scores, binary, F.binary_cross_entropy_with_logits),
    )
    with torch.no_grad():
        for kind, out, target, reference in probes:
            try:
                value = loss_fn(out.clone(), target.clone())
            except Exception:  # not this family's arguments
                continue
            if not isinstance(value, torch.Tensor) or value.numel() != 1:
                continue
            expected = float(reference(out, target))
            if abs(float(value) - expected) <= PROBE_TOLERANCE * max(1.0, abs(expected)):
                return kind
    return "unknown"


def _class_count(output: torch.Tensor) -> int:
    return int(output.shape[1] if output.dim() >= 2 else output.shape[0])


def expected_loss(
    kind: LossKind, output: torch.Tensor, targets: torch.Tensor, num_classes: int | None
) -> tuple[float | None, str]:
    """The loss uninformed predictions give, and how it was derived.

    Cross-entropy and NLL: ln(C), uniform over C classes (``num_classes``, else the class
    dimension of the output). BCE: ln(2), p = 0.5. MSE: var(targets), the best constant
    prediction. L1: mean |t - median(t)|, the best constant (sqrt(2/pi) * std = 0.798 for N(0, 1)).
    """
    if kind in ("cross_entropy", "nll"):
        classes = num_classes or _class_count(output)
        return math.log(classes), f"ln({classes}): uniform over {classes} classes"
    if kind in ("bce", "bce_logits"):
        return math.log(2.0), "ln(2): p = 0.5 for every target"
    values = targets.detach().to(torch.float64)
    if kind == "mse":
        return float(values.var(unbiased=False)), "var(targets): the best constant prediction"
    if kind == "l1":
        spread = float((values - values.median()).abs().mean())
        return spread, "mean |t - median(t)|: the best constant prediction"
    return None, "unknown loss family"


def _entropy(p: torch.Tensor, dim: int | None) -> torch.Tensor:
    """Entropy of probabilities ``p`` along ``dim`` (None: Bernoulli entries), 0 log 0 = 0."""
    if dim is None:
        q = 1 - p
        return -(torch.xlogy(p, p) + torch.xlogy(q, q))
    return -torch.xlogy(p, p).sum(dim)


def loss_floor(loss_fn: Any, kind: LossKind, output: torch.Tensor, targets: Any) -> float | None:
    """The lowest value ``loss_fn`` can reach on these targets, or None when unknown.

    Cross-entropy with ``label_smoothing`` eps over C classes: the entropy of the smoothed
    target, ``-(1 - eps + eps/C) ln(1 - eps + eps/C) - (C - 1)(eps/C) ln(eps/C)`` (0.50 for
    eps 0.1, C 10); with probability targets, their mean entropy. BCE with soft targets: their
    mean Bernoulli entropy. NLL, MSE, L1 and hard targets: 0. Another callable: None.
    """
    if kind == "unknown" or not isinstance(targets, torch.Tensor):
        return None
    eps = float(getattr(loss_fn, "label_smoothing", 0.0) or 0.0)
    if kind == "cross_entropy":
        classes = _class_count(output)
        if targets.is_floating_point():  # probabilities over the class dim
            soft = targets.double() * (1 - eps) + eps / classes
            return float(_entropy(soft, 1).mean())
        if eps == 0.0:
            return 0.0
        top, rest = 1 - eps + eps / classes, eps / classes
        return float(-(top * math.log(top)) - (classes - 1) * rest * math.log(rest))
    if kind in ("bce", "bce_logits") and targets.is_floating_point():
        return float(_entropy(targets.double().clamp(0, 1), None).mean())
    return 0.0


def _broadcasts_wider(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    """``a`` and ``b`` broadcast, to a shape with more elements than either."""
    try:
        shape = torch.broadcast_shapes(a, b)
    except RuntimeError:
        return False
    return math.prod(shape) > max(math.prod(a), math.prod(b))


def _mismatch(
    kind: LossKind, output: torch.Tensor, targets: Any, num_classes: int | None
) -> Finding | None:
    if not isinstance(targets, torch.Tensor):
        return None
    out_shape, tgt_shape = tuple(output.shape), tuple(targets.shape)
    if kind in _ELEMENTWISE and out_shape != tgt_shape and _broadcasts_wider(out_shape, tgt_shape):
        return Finding(
            "target_broadcast",
            "critical",
            f"outputs {out_shape} and targets {tgt_shape} broadcast to "
            f"{tuple(torch.broadcast_shapes(out_shape, tgt_shape))}: the elementwise loss "
            "compares every output with every target (an (N, 1) output against (N,) targets "
            "gives an (N, N) loss), so the model learns the targets' mean.",
            remedy="make them equal: output.squeeze(-1) or targets.view_as(output).",
            fields={"output_shape": out_shape, "target_shape": tgt_shape},
        )
    if kind in _ELEMENTWISE and out_shape != tgt_shape:
        return Finding(
            "labels_logits_mismatch",
            "critical",
            f"outputs {out_shape} and targets {tgt_shape} differ in shape; an elementwise loss "
            "broadcasts them (e.g. (N, 1) against (N,) gives an (N, N) loss) or fails.",
            remedy="make them equal: output.squeeze(-1) or targets.view_as(output).",
            fields={"output_shape": out_shape, "target_shape": tgt_shape},
        )
    if kind in ("cross_entropy", "nll") and num_classes is not None:
        width = _class_count(output)
        if width != num_classes and output.shape[-1] != num_classes:  # (N, C, ...) or (..., C)
            return Finding(
                "labels_logits_mismatch",
                "critical",
                f"the model emits {width} class scores per example but num_classes is "
                f"{num_classes}: the head does not match the labels.",
                remedy=f"size the final layer to {num_classes} outputs (or fix num_classes).",
                fields={"logits": width, "num_classes": num_classes},
            )
    return None


@keeps_torch_switches
def init_loss(
    model: nn.Module,
    batch: Any,
    loss_fn: Any,
    *,
    num_classes: int | None = None,
    loss_kind: LossKind | None = None,
) -> InitLossReport:
    """Compare the initial loss with the value random predictions give for its loss family.

    Expected values: cross-entropy ln(C) (C=2: 0.693, 10: 2.303, 100: 4.605, 1000: 6.908), BCE
    ln(2), MSE var(targets), L1 mean |t - median(t)| (0.80 for N(0, 1) targets). "Far" means
    outside ``[expected / TOLERANCE_FACTOR, expected * TOLERANCE_FACTOR]`` (factor 1.5): far
    below is critical (the model is cheating: labels leak into the inputs or a shortcut), far
    above is a warning (wrong loss, bad init scale, broken pipeline). Output/target shape
    mismatches and a class head that disagrees with ``num_classes`` are critical.

    Args:
        model: runs once in eval mode under no_grad (its train/eval flags are restored).
        batch: ``(inputs, targets)``, a dict batch, or a loader (its first batch is used).
        loss_fn: ``loss_fn(outputs, targets)``; nn losses and their functional forms are
            recognised, other callables need ``loss_kind=``.
        num_classes: the number of classes of the labels (cross-entropy / NLL).
        loss_kind: the family of a custom loss callable.

    Returns:
        An :class:`InitLossReport` (status ``inconclusive`` for an unknown loss family).

    Example:
        >>> import torch, torchlens_nb as tl
        >>> from torch import nn
        >>> _ = torch.manual_seed(0)
        >>> model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 10))
        >>> batch = (torch.randn(64, 8), torch.randint(0, 10, (64,)))
        >>> tl.recipes.init_loss(model, batch, nn.CrossEntropyLoss()).status
        'pass'
    """
    check_model(model)
    check_loss_fn(loss_fn)
    if num_classes is not None:
        # one class has an expected loss of ln(1) = 0: there is nothing to compare with
        check_int("num_classes", num_classes, low=2, hint="a classifier needs at least 2 classes")
    kind = resolved_loss_kind(loss_kind, loss_fn)
    inputs, targets = split_batch(first_batch(batch))
    device = model_device(model)
    inputs, targets = to_device(inputs, device), to_device(targets, device)
    with preserved(model, mode="eval"), torch.no_grad():
        raw = call_model(model, inputs)
        output = primary_output(raw)
        mismatch = _mismatch(kind, output, targets, num_classes)
        try:
            loss = loss_value(loss_fn(loss_input(raw), targets))
        except (RuntimeError, ValueError, IndexError) as exc:
            if mismatch is None:
                raise DiagnosticArgumentError(
                    f"loss_fn raised {type(exc).__name__} on outputs {tuple(output.shape)} and "
                    f"targets {tuple(getattr(targets, 'shape', ()))}: {exc}"
                ) from exc
            loss = float("nan")  # the mismatch finding says why there is no loss
    expected, basis = expected_loss(kind, output, targets, num_classes)
    findings = [mismatch] if mismatch else []
    if mismatch is None and not math.isfinite(loss):
        findings.append(
            Finding(
                "loss_nonfinite",
                "critical",
                f"the initial loss is {loss} (not finite): training would write NaN into every "
                "weight at the first step.",
                remedy="find where the value is born with tl.debug.nonfinite_origin(model, inputs) "
                "and check the data with tl.recipes.data_sanity(batch).",
                fields={"loss": loss},
            )
        )
    unavailable: tuple[Unavailable, ...] = ()
    ratio = band = None
    if expected is None:
        unavailable = (
            Unavailable(
                "expected init loss",
                f"{type(loss_fn).__name__} is not a recognised loss; pass loss_kind= to compare.",
                "unknown_loss",
            ),
        )
    elif expected > 0 and math.isfinite(loss):
        ratio = loss / expected
        band = (expected / TOLERANCE_FACTOR, expected * TOLERANCE_FACTOR)
        findings += _band_findings(loss, expected, basis, band, output, kind, targets)
    status = recipe_status(findings)
    if status == "pass" and expected is None:
        status = "inconclusive"
    if status == "pass":
        lead = f"initial loss {loss:.4g} vs expected {expected:.4g} ({basis})."
    elif status == "inconclusive":
        lead = f"initial loss {loss:.4g}; no expected value for this loss (pass loss_kind=)."
    else:  # the most severe finding says what is wrong
        lead = worst_finding(findings).message
    return InitLossReport(
        subject=f"{type(model).__name__} with {type(loss_fn).__name__}",
        status=status,
        lead=lead,
        findings=tuple(findings),
        unavailable=unavailable,
        loss=loss,
        expected=expected,
        basis=basis,
        loss_kind=kind,
        ratio=ratio,
        band=band,
        num_classes=num_classes
        or (_class_count(output) if kind in ("cross_entropy", "nll") else None),
        output_shape=tuple(output.shape),
        target_shape=tuple(getattr(targets, "shape", ())),
        disclosures=("one batch, eval mode: dropout is off",),
    )


def _band_findings(
    loss: float,
    expected: float,
    basis: str,
    band: tuple[float, float],
    output: torch.Tensor,
    kind: LossKind,
    targets: Any,
) -> list[Finding]:
    facts = {
        "loss": loss,
        "expected": expected,
        "low": band[0],
        "high": band[1],
        "output_std": float(output.detach().float().std()) if output.numel() > 1 else 0.0,
    }
    if loss < band[0]:
        return [
            Finding(
                "loss_far_below_expected",
                "critical",
                f"initial loss {loss:.4g} is far below the {expected:.4g} of random predictions "
                f"({basis}): the untrained model is cheating.",
                remedy="look for labels leaking into the inputs (a target column among the features, "
                "a normalisation fit on all data) or a loss computed on the wrong tensors.",
                fields=facts,
            )
        ]
    if loss > band[1]:
        hint = (
            "the model's outputs have std {:.3g}: scale down the last layer's init (or zero "
            "it)".format(facts["output_std"])
        )
        offset_only = False
        if kind == "mse" and isinstance(targets, torch.Tensor):
            values = targets.detach().double()
            mean = float(values.mean())
            if mean * mean > expected:
                hint = (
                    f"the targets are not centred (mean {mean:.3g}): standardise them or "
                    "initialise the last bias to their mean"
                )
                # near-zero outputs against offset targets: the excess is the offset, which
                # the first steps learn (a super-resolution net on [0, 1] pixels starts so)
                offset_only = loss <= TOLERANCE_FACTOR * float((values * values).mean())
        return [
            Finding(
                "loss_far_above_expected",
                "info" if offset_only else "warning",
                f"initial loss {loss:.4g} is far above the {expected:.4g} of random predictions "
                f"({basis}).",
                remedy=f"check the loss function and the input pipeline; {hint}.",
                fields=facts,
            )
        ]
    return []


# ----- random_input_test -----------------------------------------------------------------------
def _is_token_like(key: str, tensor: torch.Tensor) -> bool:
    """An integer entry of a dict input that carries the example: ``input_ids``, or any
    integer tensor of 2+ dims whose values are not all 0/1 (masks are 0/1; lengths are 1-D)."""
    if tensor.is_floating_point() or tensor.dtype == torch.bool:
        return False
    if key == "input_ids":
        return True
    return tensor.dim() >= 2 and tensor.numel() > 0 and int(tensor.max()) > 1


def _noise_like(inputs: Any, generator: torch.Generator) -> tuple[Any, int]:
    """Random stand-ins and how many tensors were replaced: float tensors -> N(0, 1); a lone
    id tensor or a token-like dict entry (``_is_token_like``) -> random ids below its maximum
    + 1; other entries (attention masks, lengths) unchanged."""
    replaced = 0

    def noise(tensor: torch.Tensor) -> torch.Tensor:
        nonlocal replaced
        replaced += 1
        if tensor.is_floating_point():
            return torch.randn(tensor.shape, generator=generator, dtype=tensor.dtype).to(
                tensor.device
            )
        high = int(tensor.max()) + 1 if tensor.numel() else 1
        return torch.randint(0, max(high, 2), tensor.shape, generator=generator).to(
            dtype=tensor.dtype, device=tensor.device
        )

    if isinstance(inputs, torch.Tensor):
        return noise(inputs), replaced
    if isinstance(inputs, dict):
        out = {
            k: noise(v)
            if isinstance(v, torch.Tensor) and (v.is_floating_point() or _is_token_like(k, v))
            else v
            for k, v in inputs.items()
        }
        return out, replaced
    if isinstance(inputs, (tuple, list)):
        seq = type(inputs)(
            noise(v) if isinstance(v, torch.Tensor) and v.is_floating_point() else v for v in inputs
        )
        return seq, replaced
    raise DiagnosticArgumentError(
        f"cannot draw noise for inputs of type {type(inputs).__name__}; pass tensors."
    )


def _is_constant(inputs: Any) -> bool:
    tensors = [t for t in iter_tensors(inputs) if t.dim() >= 1 and t.shape[0] > 1]
    return bool(tensors) and all(bool((t == t[:1]).all()) for t in tensors)


@keeps_torch_switches
def random_input_test(
    model: nn.Module,
    batch: Any,
    loss_fn: Any,
    *,
    trials: int = 3,
    seed: int = 0,
    loss_kind: LossKind | None = None,
) -> RandomInputReport:
    """Compare the loss on the real inputs with the loss on random noise of the same shape.

    If they are similar the model is not using the input: the pipeline destroys the signal before
    the model sees it (or the forward ignores its argument). Findings: a real batch whose examples
    are all identical (critical: the pipeline zeroed the signal), outputs that do not change at
    all under noise (critical: the input is unused), losses within ``SIMILAR_GAP`` (10%) of each
    other (warning), real data scoring worse than noise (warning: inputs and labels misaligned).
    When both losses sit within init_loss's tolerance of the chance level the test cannot tell
    (an untrained model looks the same either way): status ``inconclusive``.

    Args:
        model: a model that has trained for a while (at init both losses are at chance). Runs
            in eval mode under no_grad; its train/eval flags are restored.
        batch: ``(inputs, targets)``, a dict batch, or a loader (first batch).
        loss_fn: ``loss_fn(outputs, targets)``.
        trials: noise draws to average.
        seed: seed of the private generator the noise is drawn from (the global RNG is untouched).
        loss_kind: the family of a custom loss callable (for the chance level).

    Returns:
        A :class:`RandomInputReport` with a bar-chart ``figure()``.
    """
    check_model(model)
    check_loss_fn(loss_fn)
    check_int("trials", trials, low=1, high=MAX_REPEATS, hint="the default is 3")
    check_int("seed", seed)
    kind = resolved_loss_kind(loss_kind, loss_fn)
    inputs, targets = split_batch(first_batch(batch))
    device = model_device(model)
    inputs, targets = to_device(inputs, device), to_device(targets, device)
    generator = torch.Generator().manual_seed(seed)
    with preserved(model, mode="eval"), torch.no_grad():
        real_raw = call_model(model, inputs)
        real_out = primary_output(real_raw)
        real = loss_value(loss_fn(loss_input(real_raw), targets))
        noise_losses, change = [], 0.0
        for _ in range(trials):
            noisy, replaced = _noise_like(inputs, generator)
            raw = call_model(model, noisy)
            out = primary_output(raw)
            noise_losses.append(loss_value(loss_fn(loss_input(raw), targets)))
            change = max(change, float((out.float() - real_out.float()).abs().max()))
    noise = sum(noise_losses) / trials
    scale = max(abs(real), abs(noise))
    gap = (noise - real) / scale if scale > 0 else 0.0
    chance, _ = expected_loss(kind, real_out, targets, None)
    constant = _is_constant(inputs)
    findings = (
        _random_input_findings(real, noise, gap, change, constant)
        if replaced
        else [
            Finding(
                "no_input_to_replace",
                "info",
                "no input tensor could be replaced by noise (integer entries that are neither "
                "input_ids nor token-like), so the test could not compare.",
            )
        ]
    )
    at_chance = (
        chance is not None
        and chance > 0
        and all(
            abs(math.log(max(v, 1e-12) / chance)) <= math.log(TOLERANCE_FACTOR)
            for v in (real, noise)
        )
    )
    status = recipe_status(findings) if replaced else "inconclusive"
    if status != "fail" and at_chance:
        status = "inconclusive"
        # an inconclusive test accuses nothing: its warnings become hints
        findings = [
            dataclasses.replace(f, severity="info") if f.severity == "warning" else f
            for f in findings
        ]
        findings.append(
            Finding(
                "both_at_chance",
                "info",
                f"real {real:.4g} and noise {noise:.4g} both sit at the chance level {chance:.4g}: "
                "an untrained model scores the same on anything.",
                remedy="train a few hundred steps first (or run tl.recipes.overfit_one_batch), then "
                "rerun this test.",
            )
        )
    lead = f"real-input loss {real:.4g} vs noise {noise:.4g} ({100 * gap:+.0f}% gap)."
    if status != "pass":  # the finding that decided the status leads
        lead = (findings[-1] if status == "inconclusive" else worst_finding(findings)).message
    return RandomInputReport(
        subject=type(model).__name__,
        status=status,
        lead=lead,
        findings=tuple(findings),
        real_loss=real,
        noise_loss=noise,
        noise_losses=tuple(noise_losses),
        relative_gap=gap,
        chance_loss=chance,
        loss_kind=kind,
        output_change=change,
        is_input_constant=constant,
        disclosures=(
            "noise is N(0, 1) for float inputs and random ids for token inputs; masks are kept",
        ),
    )


def _random_input_findings(
    real: float, noise: float, gap: float, change: float, constant: bool
) -> list[Finding]:
    facts = {"real_loss": real, "noise_loss": noise, "relative_gap": gap}
    if not (math.isfinite(real) and math.isfinite(noise)):
        return [
            Finding(
                "loss_nonfinite",
                "critical",
                f"the loss is not finite (real input {real}, noise {noise}): the comparison "
                "cannot be made.",
                remedy="find where the value is born with tl.debug.nonfinite_origin(model, "
                "inputs); tl.recipes.init_loss shows the loss at initialisation.",
                fields=facts,
            )
        ]
    if constant:
        return [
            Finding(
                "input_carries_no_signal",
                "critical",
                "every example of the real batch has the same input: the pipeline destroys the signal "
                "before the model sees it.",
                remedy="inspect the transforms (a multiply by 0, a normalisation by a huge std, a "
                "wrong column selection); tl.recipes.data_sanity shows the field statistics.",
                fields=facts,
            )
        ]
    if change == 0.0:
        return [
            Finding(
                "model_ignores_input",
                "critical",
                "the model's outputs are bitwise the same for the real input and for noise: forward "
                "does not use its input.",
                remedy="check that forward reads its argument (not a stored tensor) and does not "
                "detach or zero it.",
                fields=facts,
            )
        ]
    if abs(gap) < SIMILAR_GAP:
        return [
            Finding(
                "loss_same_as_noise",
                "warning",
                f"the loss on noise ({noise:.4g}) is within {100 * SIMILAR_GAP:.0f}% of the loss on "
                f"real data ({real:.4g}) although the model's outputs differ between them "
                f"(relative change {change:.3g}): the loss does not follow the output (it "
                "ignores it, or reads a detached copy), or the model learned nothing of the input "
                "it memorised.",
                remedy="check that the loss is computed from the model's output; then "
                "preprocessing, data loading and feature selection.",
                fields={**facts, "output_change": change},
            )
        ]
    if gap < 0:
        return [
            Finding(
                "real_worse_than_noise",
                "warning",
                f"real data scores worse ({real:.4g}) than noise ({noise:.4g}).",
                remedy="check that inputs and labels stay aligned (shuffled together) and that the "
                "evaluation pipeline matches the training one.",
                fields=facts,
            )
        ]
    return []
