"""The checks ``tl.recipes.triage`` runs, in order, each an adapter around one recipe.

Every adapter takes the :class:`TriageRun` (the working copy of the model, the cloned batch, the
loss and the options) and returns its recipe's report, or raises :class:`Skipped` with the
reason the check cannot apply here (never counted as a pass). :func:`key_of` picks the one
number a row shows.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import math
import statistics
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ...capture import iter_tensors
from ...debug import preserved_rng_state
from ...errors import DiagnosticArgumentError, ForwardError, TorchlensNbError
from ...report import Finding, Report, Unavailable
from ...report._recipes_data import (
    DataSanityReport,
    InitLossReport,
    LossKind,
    RandomInputReport,
    recipe_status,
    worst_finding,
)
from ...report._recipes_flow import DependencyReport
from ...report._recipes_training import (
    GradientFlowReport,
    OverfitReport,
    UpdateRatioReport,
    WeightDistributionReport,
)
from ...report._triage import OutputLossReport, SetupReport
from .._batches import call_model, loss_input, primary_output, split_batch
from .._model_state import preserved
from ..data._data import data_sanity
from ..flow._dependency import batch_independence, causal_dependency
from ..loss._loss import init_loss, loss_floor, random_input_test, resolved_loss_kind
from ..training._gradients import gradient_flow
from ..training._overfit import memorise_batch
from ..training._update_ratio import (
    ratio_session,
    recorded_update_ratio,
    update_ratio,
    weight_groups,
)
from ..training._weights import weight_distribution
from ._budget import RATIO_WATCH_PARAMS, STEP_SIZE_STEPS, Budget
from ._loop_state import HeldState, loop_findings
from ._optimizer_spec import OptimizerSpec
from ._output_vs_loss import loss_as_fixed, output_vs_loss
from ._padding import padding_dependency
from ._registration import unregistered_findings
from ._saturation import with_saturating_stack
from ._step_size import PROBE_STEPS, ProbeRun, probe_and_judge

CHECKS: tuple[str, ...] = (
    "training_setup",
    "data_sanity",
    "init_loss",
    "output_vs_loss",
    "gradient_flow",
    "batch_independence",
    "causal_dependency",
    "padding_dependency",
    "overfit_one_batch",
    "random_input_test",
    "update_ratio",
    "weight_distribution",
)
"""The run order: what the model and optimizer say (modes, roster, param groups), the data, the loss at init (and the outputs' form against it), whether the
gradient reaches every layer and examples stay independent, memorising one batch, whether the
memorised model uses its input, the step size, the weights."""
OVERFIT_LR_SCALES = (1.0, 10.0, 100.0)
"""overfit_one_batch tries your optimizer at your lr, then at 10x (a healthy SGD 0.01 MLP
memorises its batch in 200 steps at 0.1, not always at 0.01; a fine-tune at 5e-5 memorises
where Adam at 3e-3 did not: 0.72 -> 0.69 in 30 steps), then 100x when the loss fell without
memorising (a linear classifier on L2-normalised TF-IDF rows needs large weights: Adam 1e-3
and 1e-2 plateau), before Adam at ``OVERFIT_LR``."""
OVERFIT_LR = 3e-3
"""The last try of overfit_one_batch: Adam at 3e-3 (whatever ``optimizer=`` says), asking
whether the architecture can fit one batch. Measured in 200 steps: at 1e-3 an 8-32-3 MLP on 32 examples and
a 2-layer GPT-2 (n_embd 32, 4x16 tokens) only reach 20% and 8% of their initial loss
("decreasing": a false warning); at 3e-3 they reach 1.6% and 0.6%, the 20-64-64-10 zoo MLP
0.05%, and every zoo bug keeps its verdict (tests/recipes/test_triage.py)."""


class Skipped(Exception):
    """A check that cannot apply here; ``reason`` says why (never leaves ``triage``)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class TriageRun:
    """What every check reads: copies only (the caller's objects never reach a recipe)."""

    model: nn.Module
    """The working deep copy of the caller's model."""
    batch: Any
    """A clone of the caller's first batch."""
    loss_fn: Any
    steps: int
    optimizer: OptimizerSpec | None
    seq_dim: int | None
    num_classes: int | None
    loss_kind: LossKind | None
    on_overfit: Callable[[OverfitReport], None]
    setup: SetupReport | None = None
    """training_setup's report, read from the caller's model and optimizer before the run."""
    trained: nn.Module | None = None
    """The copy overfit_one_batch trained, when it memorised or kept falling (released once
    random_input_test has read it)."""
    random_input_on_trained: bool = False
    """random_input_test ran on ``trained`` (else on the untrained working copy)."""
    fits_at_your_lr: bool = False
    """overfit_one_batch's run with your optimizer at your lr memorised or was still falling."""
    overfit_memorised: bool = False
    """overfit_one_batch's best run memorised the batch."""
    overfit_notes: list[str] = dataclasses.field(default_factory=list)
    """What overfit_one_batch tried before the run it reports (shown as disclosures)."""
    held: HeldState | None = None
    """The loop state read from the caller's model and optimizer before the run."""
    tuple_output: bool = False
    """The model returns a tuple or list, which the loss receives whole."""
    step_loss_fn: Any = None
    """The loss update_ratio judges the step size with when output_vs_loss found an output
    form the fix removes (``loss_as_fixed``); None: ``loss_fn``."""
    yours_run: ProbeRun | None = None
    """overfit_one_batch's run with your optimizer at your lr (the probe reuses it when the
    budget is shortened)."""
    yours_ratios: RatioRecord | None = None
    """The update ratios of that run, recorded when the model is large
    (``_budget.RATIO_WATCH_PARAMS``); a shortened update_ratio reads them."""
    budget: Budget = dataclasses.field(init=False)
    """The training runs' lengths (``_budget``): ``steps`` and the constants, or shorter once
    a slow step was timed."""

    def __post_init__(self) -> None:
        self.budget = Budget(self.steps)


@dataclass
class RatioRecord:
    """The update ratios one training run recorded (:meth:`watch` is its loop's context)."""

    checks: Report | None = None
    """The ChecksSession report of the run (None until the run ended without raising)."""
    names: dict[int, str] = dataclasses.field(default_factory=dict)
    """group -> weight matrix name (``weight_groups``)."""

    @contextlib.contextmanager
    def watch(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> Iterator[None]:
        """Record every step's update ratio of ``optimizer`` on ``model`` while the loop runs.
        A session that refuses to attach records nothing and leaves the run as it was
        (update_ratio's own run then meets the same refusal and says why)."""
        named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        with contextlib.ExitStack() as stack:
            try:
                session = stack.enter_context(ratio_session(model, optimizer))
            except TorchlensNbError:
                session = None
            yield
        if session is not None:
            self.checks, self.names = session.report(), weight_groups(named)


def _records_ratios(run: TriageRun) -> bool:
    """Whether overfit_one_batch's run at your lr records update ratios for update_ratio: a
    model above ``RATIO_WATCH_PARAMS`` trained with your optimizer and the loss update_ratio
    would train with (no output form undone, no tuple output)."""
    spec = run.optimizer
    return (
        spec is not None
        and spec.make is not None
        and run.step_loss_fn is None
        and not run.tuple_output
        and sum(p.numel() for p in run.model.parameters() if p.requires_grad) > RATIO_WATCH_PARAMS
    )


def _batch_size(run: TriageRun) -> int | None:
    inputs, _ = split_batch(run.batch)
    for tensor in iter_tensors(inputs):
        return int(tensor.shape[0]) if tensor.dim() else None
    return None


def _reinitialised(model: nn.Module) -> tuple[nn.Module | None, str]:
    """A deep copy with every parameter re-drawn by its module's ``reset_parameters``, or None
    and the modules that hold parameters but cannot reset them."""
    clone = copy.deepcopy(model)
    stuck = [
        name or "(root)"
        for name, module in clone.named_modules()
        if any(True for _ in module.parameters(recurse=False))
        and not callable(getattr(module, "reset_parameters", None))
    ]
    if stuck:
        return None, ", ".join(stuck[:3]) + (" ..." if len(stuck) > 3 else "")
    with preserved_rng_state():
        torch.manual_seed(0)
        for module in clone.modules():
            reset = getattr(module, "reset_parameters", None)
            if callable(reset) and any(True for _ in module.parameters(recurse=False)):
                reset()
    return clone, ""


def _init_loss(run: TriageRun) -> Report:
    """init_loss; a loss far below chance is re-judged against a re-initialised copy, since a
    model that has already been trained scores below chance too (not a shortcut)."""
    report = init_loss(
        run.model, run.batch, run.loss_fn, num_classes=run.num_classes, loss_kind=run.loss_kind
    )
    below = next((f for f in report.findings if f.code == "loss_far_below_expected"), None)
    if below is None:
        return report
    fresh, stuck = _reinitialised(run.model)
    if fresh is None:
        note = (
            f"a loss below chance is a shortcut only for an untrained model, and this one "
            f"could not be re-initialised to compare ({stuck} have no reset_parameters)"
        )
        return _downgraded(report, below, note, "inconclusive")
    again = init_loss(
        fresh, run.batch, run.loss_fn, num_classes=run.num_classes, loss_kind=run.loss_kind
    )
    if any(f.code == "loss_far_below_expected" for f in again.findings):
        return report  # the re-initialised model scores below chance too: a real shortcut
    note = (
        f"the model looks trained already: a re-initialised copy scores {again.loss:.4g}, "
        "near chance, so the low loss is learnt, not a shortcut"
    )
    return _downgraded(report, below, note, "pass")


def _downgraded(report: Report, finding: Finding, note: str, status: str) -> Report:
    """``report`` with ``finding`` turned into an info note (its first clause, then ``note``)
    and ``status``; an ``inconclusive`` one also lists what could not be compared."""
    head = finding.message.split(":")[0]
    message = f"{head}; but {note}."
    findings = tuple(
        dataclasses.replace(f, severity="info", message=message) if f is finding else f
        for f in report.findings
    )
    return dataclasses.replace(
        report,
        status=status,
        lead=message,
        findings=findings,
        unavailable=(
            *report.unavailable,
            *(
                (Unavailable("init_loss shortcut", note, "not_comparable"),)
                if status == "inconclusive"
                else ()
            ),
        ),
    )


def _dependency(run: TriageRun, check: str) -> Report:
    inputs, _ = split_batch(run.batch)
    if check == "causal_dependency":
        if run.seq_dim is None:
            raise Skipped("pass seq_dim= (the sequence axis of input and output) to check it")
        return causal_dependency(run.model, inputs, dim=run.seq_dim)
    size = _batch_size(run)
    if size is not None and size < 2:
        raise Skipped(f"the batch holds {size} example: independence needs 2 or more")
    return batch_independence(run.model, inputs)


def _overfit_floor(run: TriageRun) -> float | None:
    """The loss's floor on this batch (``loss_floor``), read on the working copy."""
    inputs, targets = split_batch(run.batch)
    with preserved(run.model, mode="eval"), torch.no_grad():
        output = primary_output(call_model(run.model, inputs))
    kind = resolved_loss_kind(run.loss_kind, run.loss_fn)
    return loss_floor(run.loss_fn, kind, output, targets)


def _overfit_attempts(run: TriageRun) -> list[tuple[str, Any, float]]:
    """(label, optimizer factory or None for Adam, lr) in the order overfit_one_batch tries
    them: your optimizer at your lr, then at 10x, then Adam at ``OVERFIT_LR``."""
    attempts: list[tuple[str, Any, float]] = []
    spec = run.optimizer
    if spec is not None and spec.make is not None and spec.lr:
        for scale in OVERFIT_LR_SCALES:
            label = f"{spec.family} lr={spec.lr * scale:g} (yours x{scale:g})"

            def make(params: list[torch.Tensor], scale: float = scale) -> Any:
                return spec.build([{"params": [p]} for p in params], lr_scale=scale)

            attempts.append((label, make, spec.lr * scale))
    attempts.append((f"Adam lr={OVERFIT_LR:g}", None, OVERFIT_LR))
    return attempts


def _overfit(run: TriageRun) -> Report:
    """overfit_one_batch with your optimizer at your lr, then 10x, then Adam at
    ``OVERFIT_LR``, each for the full length, stopping at the first that memorises; the
    verdict is the best run's (a setup that memorises with any of them can fit the batch).
    A shortened budget (``_budget``) makes one attempt, judged by :func:`_within_budget`."""
    budget = run.budget
    floor = _overfit_floor(run)
    best: tuple[OverfitReport, nn.Module] | None = None
    attempts = _overfit_attempts(run)
    budget.ratio_from_overfit = _records_ratios(run)
    for index, (label, make, lr) in enumerate(attempts):
        if index and budget.is_shortened:
            skipped = "; ".join(label for label, _, _ in attempts[index:])
            run.overfit_notes.append(
                f"{attempts[index - 1][0]} only, for {budget.steps('overfit')} steps (the "
                f"budget); not tried: {skipped}"
            )
            break
        if label.endswith(f"x{OVERFIT_LR_SCALES[-1]:g})") and (
            best is None or best[0].verdict != "decreasing"
        ):
            continue  # the largest scale is for a loss that fell without memorising
        record = (
            RatioRecord() if budget.ratio_from_overfit and label.endswith("(yours x1)") else None
        )
        try:
            report, trained = memorise_batch(
                run.model,
                run.batch,
                run.loss_fn,
                steps=budget.steps("overfit"),
                lr=lr,
                sinks=[run.on_overfit],
                make_optimizer=make,
                floor=floor,
                label=label,
                plan=budget.plan("overfit", f"overfit_one_batch ({label})"),
                watch=record.watch if record is not None else None,
            )
        except (TypeError, ValueError, RuntimeError) as exc:
            if make is None:
                raise
            run.overfit_notes.append(f"{label} could not train the copy ({exc})")
            budget.ratio_from_overfit = budget.ratio_from_overfit and record is None
            continue
        if label.endswith("(yours x1)"):
            run.yours_run = ProbeRun(1.0, report.losses)
            run.yours_ratios = record
            if report.verdict == "memorised" or any(
                f.code == "loss_still_falling" for f in report.findings
            ):
                run.fits_at_your_lr = True
        if best is None or _overfit_rank(report) < _overfit_rank(best[0]):
            best = (report, trained)
        if report.verdict == "memorised":
            break
        if not budget.is_shortened:  # a shortened run's verdict is _within_budget's
            run.overfit_notes.append(f"{label}: {report.verdict}")
    assert best is not None
    report, trained = best
    run.overfit_memorised = report.verdict == "memorised"
    if report.verdict in ("memorised", "decreasing"):
        run.trained = trained
    if budget.is_shortened and report.verdict != "memorised":
        report = _within_budget(report, budget.overfit_steps_full)
        if report.status == "pass":  # it trains: random_input_test reads what it learnt
            run.trained = trained
    return report


VERDICT_CODES = frozenset({"loss_not_near_zero", "cannot_overfit", "loss_diverged"})
"""overfit_one_batch's findings that judge memorisation, which a shortened run cannot do."""


def _within_budget(report: OverfitReport, full: int) -> OverfitReport:
    """A shortened run's verdict on what it showed. A non-finite loss, or no gradient at the
    first step, stays as found. Otherwise memorisation is not judged (an ``unavailable``
    entry): the check passes when the loss trains by the step-size probe's rule (1% lower at
    the end, no spike above 1.5x the start) and is inconclusive otherwise, never
    ``cannot_overfit`` from a few steps."""
    if not all(math.isfinite(v) for v in report.losses):
        return report
    losses = report.losses
    trains = ProbeRun(1.0, losses).outcome == "trains"
    message = (
        f"the loss went {losses[0]:.4g} -> {losses[-1]:.4g} (peak {max(losses):.4g}) in "
        f"{len(losses)} steps, shortened from {full} by the time budget: "
        + (
            "it trains; whether it memorises the batch was not judged."
            if trains
            else "inconclusive within the budget (too few steps to judge)."
        )
    )
    kept = [f for f in report.findings if f.code not in VERDICT_CODES]
    findings = (
        Finding("shortened_run", "info", message, fields={"steps": len(report.losses)}),
        *kept,
    )
    status = recipe_status(list(findings))
    if status == "pass" and not trains:
        status = "inconclusive"
    return dataclasses.replace(
        report,
        status=status,
        lead=message if status in ("pass", "inconclusive") else worst_finding(findings).message,
        findings=findings,
        unavailable=(
            *report.unavailable,
            Unavailable(
                "memorisation verdict",
                f"the run was shortened to {len(report.losses)} of {full} steps by the time "
                "budget; run tl.recipes.overfit_one_batch with steps= for the verdict",
                "shortened",
            ),
        ),
    )


def _overfit_rank(report: OverfitReport) -> tuple[int, float]:
    order = {"memorised": 0, "decreasing": 1, "stuck": 2, "diverged": 3}
    losses = report.losses
    share = losses[-1] / losses[0] if losses and losses[0] else math.inf
    return order.get(report.verdict, 4), share if math.isfinite(share) else math.inf


DEFAULT_NOISE_TRIALS = 3
"""random_input_test's noise draws (its default)."""
SHORTENED_NOISE_TRIALS = 1
"""One noise draw when the budget is shortened: each draw is a forward of the model (a third of
a step on GPT-2 small), and the draws are averaged, not compared."""
UNBACKED_NOISE_CODES = frozenset({"loss_same_as_noise", "real_worse_than_noise"})
"""random_input_test's comparisons that mean something only on a copy that memorised the batch:
on one that did not (a VAE whose summed loss fell 6%), real and noise score alike anyway."""


def _random_input(run: TriageRun) -> Report:
    model, run.trained = run.trained or run.model, None  # the trained copy is freed after this
    run.random_input_on_trained = model is not run.model
    trials = SHORTENED_NOISE_TRIALS if run.budget.is_shortened else DEFAULT_NOISE_TRIALS
    report = random_input_test(
        model, run.batch, run.loss_fn, loss_kind=run.loss_kind, trials=trials
    )
    if run.overfit_memorised:
        return report
    unbacked = [
        f for f in report.findings if f.code in UNBACKED_NOISE_CODES and f.severity != "info"
    ]
    if not unbacked:
        return report
    note = "the copy it ran on had not memorised the batch, so real and noise may score alike"
    return _downgraded(report, unbacked[0], note, "inconclusive")


def _update_ratio(run: TriageRun) -> Report:
    spec = run.optimizer
    if spec is None:
        raise Skipped(
            "no optimizer given: pass optimizer= (yours, its class or a factory) and lr= to "
            "judge your step size"
        )
    if spec.unbuildable is not None:
        raise Skipped(spec.unbuildable)
    if run.tuple_output:
        raise Skipped(
            "the model returns a tuple and your loss unpacks it, but update_ratio hands the loss "
            "only its first tensor"
        )
    budget = run.budget
    loss_fn = run.step_loss_fn or run.loss_fn
    record = run.yours_ratios if budget.is_shortened and budget.ratio_from_overfit else None
    reused = record is not None and record.checks is not None and run.yours_run is not None

    def ratio() -> UpdateRatioReport:
        if reused and record is not None and record.checks is not None and run.yours_run:
            return _recorded_ratio(run, record.checks, record.names, run.yours_run.losses)
        return update_ratio(
            run.model,
            run.batch,
            loss_fn,
            steps=budget.steps("ratio"),
            lr=spec.lr if spec.lr is not None else 1e-3,  # the rebuilt optimizer sets its own
            optimizer=spec.build,
        )

    report = probe_and_judge(
        run.model,
        run.batch,
        loss_fn,
        spec,
        ratio,
        lambda: budget.steps("probe"),
        yours=run.yours_run if budget.is_shortened and run.step_loss_fn is None else None,
        plan=budget.plan("probe", "the step-size probe"),
        fits_at_your_lr=run.fits_at_your_lr,
        is_shortened=lambda: budget.is_shortened,
    )
    if run.step_loss_fn is not None:
        undone = (
            "the step size was judged with output_vs_loss's output-form bug undone (the loss "
            "given the logits the fixed model will output), as the fixed model will train"
        )
        report = dataclasses.replace(report, disclosures=(*report.disclosures, undone))
    if not budget.is_shortened:
        return report
    ratio_steps = (
        f"update_ratio read from overfit_one_batch's {len(run.yours_run.losses)} steps"
        if reused and run.yours_run is not None
        else f"update_ratio {budget.steps('ratio')} of {STEP_SIZE_STEPS} steps"
    )
    note = (
        f" (runs shortened by the time budget: {ratio_steps}, the probe "
        f"{budget.steps('probe')} of {PROBE_STEPS})"
    )
    return dataclasses.replace(report, lead=report.lead.rstrip(".") + note + ".")


def _recorded_ratio(
    run: TriageRun, checks: Report, names: dict[int, str], losses: tuple[float, ...]
) -> UpdateRatioReport:
    """update_ratio judged on the ratios overfit_one_batch's run at your lr recorded (its loop
    stops at a non-finite loss before the backward, as update_ratio's own does)."""
    nonfinite = next(((i, v) for i, v in enumerate(losses) if not math.isfinite(v)), None)
    report = recorded_update_ratio(
        checks, names, f"{type(run.model).__name__}, {len(losses)} steps", nonfinite
    )
    note = (
        f"the update ratios are overfit_one_batch's run's ({len(losses)} steps of your "
        "optimizer at your lr on the same batch and loss, dropout off), read instead of a "
        "run of update_ratio's own to fit the time budget"
    )
    return dataclasses.replace(report, disclosures=(*report.disclosures, note))


def _data_sanity(run: TriageRun) -> Report:
    """data_sanity; inputs whose first dims differ are a note when the model gives one output
    per target (EmbeddingBag's flat token tensor beside its offsets is such a batch)."""
    report = data_sanity(run.batch, num_classes=run.num_classes)
    mismatch = next((f for f in report.findings if f.code == "batch_size_mismatch"), None)
    if mismatch is None:
        return report
    inputs, targets = split_batch(run.batch)
    with preserved(run.model, mode="eval"), torch.no_grad():
        output = primary_output(call_model(run.model, inputs))
    if not isinstance(targets, torch.Tensor) or output.dim() == 0 or targets.dim() == 0:
        return report
    if output.shape[0] != targets.shape[0]:
        return report
    note = (
        f"the model gives one output per target ({output.shape[0]}), so it reads them as one batch"
    )
    rest = [f for f in report.findings if f is not mismatch]
    return _downgraded(report, mismatch, note, recipe_status(rest))


def _gradient_flow(run: TriageRun) -> Report:
    """gradient_flow; a loss with no autograd graph back to outputs that have one (a cut the
    caller hid with ``loss.requires_grad = True``) is itself the finding: nothing of the model
    reaches the loss, so no gradient can flow. gradient_flow refuses exactly that loss
    (``check_loss_follows_outputs``), so the forward that tells it apart runs only after a
    refusal (GPT-2 small: one forward fewer, about 3 s of 2 CPU threads)."""
    try:
        report = gradient_flow(run.model, run.batch, run.loss_fn)
    except DiagnosticArgumentError:
        value = _detached_loss(run)
        if value is None:
            raise
        return _loss_detached(run, value)
    return with_saturating_stack(report, run.model, run.batch, run.loss_fn)


def _detached_loss(run: TriageRun) -> float | None:
    """The loss's value when it has no autograd graph while the outputs have one, else None
    (one forward of the working copy in train mode; modes, buffers and RNG restored)."""
    inputs, targets = split_batch(run.batch)
    with preserved(run.model, mode="train"):
        raw = call_model(run.model, inputs)
        output = primary_output(raw)
        loss = run.loss_fn(loss_input(raw), targets)
        detached = output.requires_grad and isinstance(loss, torch.Tensor) and loss.grad_fn is None
        value = float(loss.detach()) if isinstance(loss, torch.Tensor) else math.nan
        del raw, output, loss
    return value if detached else None


def _loss_detached(run: TriageRun, value: float) -> GradientFlowReport:
    """gradient_flow's row for a detached loss: the cut is the finding (critical)."""
    finding = Finding(
        "loss_detached",
        "critical",
        "the loss has no autograd graph back to the model's outputs (which have one): nothing "
        "of the model reaches the loss, so backward() gives every parameter no gradient. A "
        "leaf loss that requires grad (loss.requires_grad = True) hides the cut.",
        remedy="compute the loss from the outputs with torch operations only: no .detach(), "
        ".item(), .tolist(), torch.tensor(...) or numpy round trip on the way.",
        fields={"loss": value},
    )
    return GradientFlowReport(
        subject=f"{type(run.model).__name__}: the loss is detached",
        status="fail",
        lead=finding.message,
        findings=(finding,),
        loss=value,
        params=(),
        frontier=(),
        vanishing_threshold=math.nan,
        exploding_threshold=math.nan,
        spread_decades=None,
    )


def _output_vs_loss(run: TriageRun) -> Report:
    """output_vs_loss; an output form the fix removes sets the loss update_ratio judges with."""
    report = output_vs_loss(run.model, run.batch, run.loss_fn, loss_kind=run.loss_kind)
    run.step_loss_fn = loss_as_fixed(report, run.loss_fn)
    return report


def _setup(run: TriageRun) -> Report:
    """training_setup's report, plus what needs a forward of the working copy: parameters the
    forward uses that the model does not register, and the state the loop left."""
    if run.setup is None:
        raise Skipped("the caller's model was not read")
    extra = unregistered_findings(run.model, run.batch, run.loss_fn)
    if run.held is not None:
        extra += loop_findings(run.held, run.model, run.batch, run.loss_fn)
    if not extra:
        return run.setup
    findings = (*run.setup.findings, *extra)
    return dataclasses.replace(
        run.setup,
        findings=findings,
        status=recipe_status(list(findings)),
        lead=worst_finding(list(findings)).message,
    )


ADAPTERS: dict[str, Callable[[TriageRun], Report]] = {
    "training_setup": _setup,
    "data_sanity": _data_sanity,
    "init_loss": _init_loss,
    "output_vs_loss": _output_vs_loss,
    "gradient_flow": _gradient_flow,
    "batch_independence": lambda run: _dependency(run, "batch_independence"),
    "causal_dependency": lambda run: _dependency(run, "causal_dependency"),
    "padding_dependency": lambda run: padding_dependency(run.model, run.batch),
    "overfit_one_batch": _overfit,
    "random_input_test": lambda run: _random_input(run),
    "update_ratio": _update_ratio,
    "weight_distribution": lambda run: weight_distribution(run.model),
}


def run_check(check: str, run: TriageRun) -> Report:
    """The report of ``check``; :class:`Skipped` when it cannot apply.

    A typed refusal from the recipe (its arguments do not fit this model: an output with no
    batch axis, no weight matrix to judge) becomes the skip reason; a forward that raises is
    not a reason to skip (ForwardError propagates), nor is an error of our own code.
    """
    try:
        return ADAPTERS[check](run)
    except ForwardError:
        raise
    except TorchlensNbError as exc:
        raise Skipped(str(exc)) from exc


def key_of(report: Report) -> tuple[str | None, float | None]:
    """The key number of a check's report: its text, and the number when it is one."""
    if isinstance(report, DataSanityReport):
        inputs = [f for f in report.fields if f.stats is not None and f.role == "input"]
        field = next((f for f in inputs if f.distinct is None), inputs[0] if inputs else None)
        if field is None or field.stats is None:
            return None, None
        stats = field.stats
        if field.distinct is not None:  # ids or other integers: their range, not moments
            return f"{field.name}: {field.distinct} values in [{stats.min:g}, {stats.max:g}]", None
        bad = stats.nan_count + stats.inf_count
        extra = f", {stats.nan_count} NaN, {stats.inf_count} Inf" if bad else ""
        return f"input mean {stats.mean:.3g}, std {stats.std:.3g}{extra}", stats.mean
    if isinstance(report, SetupReport):
        return f"{len(report.findings)} setup finding(s)", float(len(report.findings))
    if isinstance(report, InitLossReport):
        if report.expected is None:
            return f"loss {report.loss:.4g}", report.loss
        return f"{report.loss:.4g} vs {report.expected:.4g} expected", report.loss
    if isinstance(report, OutputLossReport):
        return f"outputs: {report.output_form.replace('_', ' ')}", report.max_row_sum_error
    if isinstance(report, GradientFlowReport):
        flagged = sum(p.verdict not in ("ok", "frozen") for p in report.params)
        if report.frontier:
            first = report.frontier[0]
            return f"frontier {first.op} in {first.module or '(root)'}", float(flagged)
        return f"{flagged} of {len(report.params)} parameters flagged", float(flagged)
    if isinstance(report, DependencyReport):
        return f"{len(report.leaks)} of {report.size} indices leak", float(len(report.leaks))
    if isinstance(report, OverfitReport):
        initial, final = report.losses[0], report.losses[-1]
        share = f" ({100 * final / initial:.2g}% of {initial:.3g})" if initial else ""
        return f"final loss {final:.3g}{share}", final
    if isinstance(report, RandomInputReport):
        return f"real {report.real_loss:.3g} vs noise {report.noise_loss:.3g}", report.relative_gap
    if isinstance(report, UpdateRatioReport):
        medians = [layer.median for layer in report.layers if not math.isnan(layer.median)]
        if not medians:
            return None, None
        median = statistics.median(medians)
        return f"median log10 ratio {median:+.2f} (target -3)", median
    if isinstance(report, WeightDistributionReport):
        largest = max((p.stats.abs_max for p in report.params), default=math.nan)
        return f"max |w| {largest:.3g}", largest
    return None, None
