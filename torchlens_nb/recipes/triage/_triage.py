"""``tl.recipes.triage``: the cheap checks in order on copies, the root cause first, one panel.

The run: validate everything, take a deep copy of the model and a clone of the first batch
(inside ``tl.debug.preserved_rng_state``), run each check of ``_checks.CHECKS`` on them,
showing progress (``_progress``), then rank the findings (``_rank``) and build
one :class:`~torchlens_nb.report.TriageReport`. The caller's model, optimizer, data, ``.grad``
and RNG streams are never handed to a recipe, so they stay bitwise as they were, also on a
KeyboardInterrupt (which returns the partial report of the checks that finished).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import Any

from torch import nn

from ..._validate import MAX_REPEATS, check_int
from ...debug import clone_input_tree, preserved_rng_state
from ...debug._isolation import with_torch_switches_kept
from ...errors import DiagnosticArgumentError
from ...report import Exit, Finding, Report, Table, Unavailable
from ...report._recipes_data import LossKind
from ...report._recipes_training import OverfitReport
from ...report._triage import RootCause, RowStatus, TriageReport, TriageRow, TriageStatus
from .._batches import (
    check_loss_fn,
    check_model,
    first_batch,
    split_batch,
    trainable_copy,
)
from ._args import check_batch_and_loss, check_options
from ._checks import (
    CHECKS,
    OVERFIT_LR,
    Skipped,
    TriageRun,
    key_of,
    run_check,
)
from ._loop_state import read_held
from ._optimizer_spec import read_optimizer
from ._padding import padded_ids
from ._progress import TriageProgress
from ._rank import rank
from ._setup import training_setup

TABLE_COLUMNS = ("check", "status", "lead", "key", "value", "elapsed_s", "root_cause", "reason")


def _selected(
    checks: Sequence[str] | None, seq_dim: int | None, padded: bool = False
) -> tuple[str, ...]:
    """The checks to run: ``checks`` in run order, or every check, with causal_dependency
    only given ``seq_dim`` and padding_dependency only on right-padded token ids."""
    if checks is None:
        return tuple(
            c
            for c in CHECKS
            if (c != "causal_dependency" or seq_dim is not None)
            and (c != "padding_dependency" or padded)
        )
    if not isinstance(checks, (list, tuple)) or not all(isinstance(c, str) for c in checks):
        raise DiagnosticArgumentError(
            f"checks must be a list of check names, got {checks!r}; e.g. "
            "checks=['init_loss', 'overfit_one_batch']."
        )
    unknown = sorted(set(checks) - set(CHECKS))
    if unknown or not checks:
        raise DiagnosticArgumentError(
            f"unknown checks {unknown} (or none given); the checks are {list(CHECKS)}."
        )
    return tuple(c for c in CHECKS if c in checks)  # always in run order


def triage(
    model: nn.Module,
    batch: Any,
    loss_fn: Any,
    *,
    optimizer: Any = None,
    lr: float | None = None,
    steps: int = 200,
    checks: Sequence[str] | None = None,
    live: bool | None = None,
    seq_dim: int | None = None,
    num_classes: int | None = None,
    loss_kind: LossKind | None = None,
) -> TriageReport:
    """Run the cheap checks of a model that will not train, in order, and name the root cause.

    The order (``CHECKS``): ``training_setup`` (the model's modes, the optimizer's roster and
    param groups, read from what you handed over), ``data_sanity``, ``init_loss``, ``output_vs_loss`` (outputs already
    probabilities fed to a loss that expects logits: double softmax), ``gradient_flow``,
    ``batch_independence`` (and ``causal_dependency`` with ``seq_dim=``),
    ``overfit_one_batch`` (Adam at ``OVERFIT_LR``), ``random_input_test`` (on the copy that
    memorised the batch: an untrained model scores chance on any input), ``update_ratio``
    (your optimizer and lr, ``STEP_SIZE_STEPS`` steps), ``weight_distribution``. A check that
    cannot apply is a ``skipped`` row with its reason, never a pass. Findings are ranked by
    ``recipes/triage/_rank.py``: the first is the root cause, the others name what they follow
    from. Interrupting (KeyboardInterrupt) returns the partial report.

    Args:
        model: read only: every check runs on a deep copy.
        batch: ``(inputs, targets)``, a dict batch, or a loader (its first batch); cloned.
        loss_fn: ``loss_fn(outputs, targets)``.
        optimizer: your optimizer (read: its class, defaults and lr; never stepped), its class,
            or a factory ``groups -> Optimizer``; None skips the step-size check unless ``lr``
            is given (then Adam).
        lr: the learning rate update_ratio judges (default: the optimizer's).
        steps: overfit_one_batch's steps.
        checks: a subset of ``CHECKS`` (run in run order).
        live: a live panel (True), nothing (False), or None: the panel in a notebook, a
            progress line on stderr elsewhere.
        seq_dim: the sequence axis, to run causal_dependency.
        num_classes, loss_kind: passed to data_sanity / init_loss / output_vs_loss.

    Returns:
        A :class:`~torchlens_nb.report.TriageReport`: ``rows`` (table ``checks``,
        ``to_pandas()``), ``root_cause``, ``reports`` (each check's own report).

    Raises:
        ModelTypeError, InputFormError, DiagnosticArgumentError: bad arguments (nothing ran;
            ``_args``): e.g. an unknown ``loss_kind``, a ``seq_dim`` the input lacks,
            an optimizer over another model's parameters, a loss_fn returning a number or an
            integer tensor, an empty batch.
        ForwardError: the model's forward raised on the batch (a copy's; nothing was changed).

    Example:
        >>> import torch, torchlens_nb as tl
        >>> from torch import nn
        >>> _ = torch.manual_seed(0)
        >>> model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4), nn.Softmax(-1))
        >>> batch = (torch.randn(32, 8), torch.randint(0, 4, (32,)))
        >>> report = tl.recipes.triage(model, batch, nn.CrossEntropyLoss(), live=False)
        >>> report.root_cause.check, report.root_cause.code
        ('output_vs_loss', 'double_softmax')

    Cost: about ``steps`` + ``STEP_SIZE_STEPS`` training steps of the model on the batch, one
    forward and backward per batch example (the dependency check), a few forwards. A model
    whose training step takes 1 s or more gets its training runs cut to a budget of 30 s
    (``recipes/triage/_budget.py``; timed on the first run's steps after its first): one
    overfit attempt, judged on what it showed, with the memorisation verdict ``unavailable``,
    update_ratio read from that attempt above 20M parameters, and each shortened run said in
    its row and in ``disclosures``. Memory: up to three copies of the parameters at once (the
    working copy, overfit_one_batch's trained copy until random_input_test has read it,
    update_ratio's copy), plus Adam's state.
    """
    check_model(model)
    check_loss_fn(loss_fn)
    check_int("steps", steps, low=1, high=MAX_REPEATS, hint="the default is 200")
    check_options(seq_dim, num_classes, loss_kind)
    first = first_batch(batch)
    inputs, _ = split_batch(first)  # the batch form is checked before anything runs
    names = _selected(checks, seq_dim, padded_ids(inputs) is not None)
    choice = read_optimizer(optimizer, lr, model)
    held = read_held(model, choice)
    progress = TriageProgress(live)
    started = time.monotonic()

    def run_checks() -> TriageReport:
        with preserved_rng_state():
            working = trainable_copy(model, "triage")
            tuple_output = check_batch_and_loss(working, first, loss_fn, seq_dim)
            run = TriageRun(
                working,
                clone_input_tree(first),
                loss_fn,
                steps,
                choice,
                seq_dim,
                num_classes,
                loss_kind,
                on_overfit=lambda _: None,
                setup=training_setup(model, choice) if "training_setup" in names else None,
                tuple_output=tuple_output,
                held=held,
            )
            runner = _Runner(names, run, progress, type(model).__name__, started)
            return runner.run()

    return with_torch_switches_kept(run_checks)


class _Runner:
    """Runs the checks in order, keeps the rows, and builds the interim and final reports."""

    def __init__(
        self,
        names: tuple[str, ...],
        run: TriageRun,
        progress: TriageProgress,
        model_name: str,
        started: float,
    ) -> None:
        self.names = names
        self.run_state = run
        self.progress = progress
        self.model_name = model_name
        self.started = started
        self.rows: dict[str, TriageRow] = {}
        self.reports: dict[str, Report] = {}
        run.on_overfit = self._overfit_interim

    def run(self) -> TriageReport:
        current = None
        try:
            for current in self.names:
                self.progress.show(self._interim(current))
                began = time.monotonic()
                try:
                    report = run_check(current, self.run_state)
                except Skipped as skipped:
                    self.rows[current] = self._row(current, "skipped", skipped.reason, began)
                    continue
                self.reports[current] = report
                key, value = key_of(report)
                self.rows[current] = self._row(
                    current, report.status, report.lead, began, key, value
                )
            current = None
        except KeyboardInterrupt:
            pass
        except BaseException as error:  # the panel ends in a final state, then the error goes on
            self.progress.show(self._final(current, f"raised {type(error).__name__}: {error}"))
            raise
        final = self._final(interrupted_at=current)
        self.progress.show(final)
        return final

    def _row(
        self,
        check: str,
        status: Any,
        lead: str,
        began: float,
        key: str | None = None,
        value: float | None = None,
    ) -> TriageRow:
        return TriageRow(
            index=self.names.index(check),
            check=check,
            status=status,
            lead=lead,
            key=key,
            value=value,
            elapsed_s=time.monotonic() - began,
            reason=lead if status == "skipped" else None,
        )

    def _pending_rows(
        self, current: str | None, *, stopped: bool = False, how: str = "interrupted"
    ) -> tuple[TriageRow, ...]:
        rows = []
        for index, check in enumerate(self.names):
            if check in self.rows:
                rows.append(self.rows[check])
            elif stopped:
                if how == "interrupted":
                    why = f"{how} while it ran" if check == current else f"{how} before it ran"
                else:  # a raise: the check that raised says so, the others name it
                    why = how if check == current else f"not run: {current} {how}"
                rows.append(TriageRow(index, check, "skipped", why, None, None, None, reason=why))
            else:
                status: RowStatus = "running" if check == current else "pending"
                lead = "running now" if check == current else "not run yet"
                rows.append(TriageRow(index, check, status, lead, None, None, None))
        return tuple(rows)

    def _interim(self, current: str, chart: dict[str, Any] | None = None) -> TriageReport:
        done = len(self.rows)
        return TriageReport(
            subject=self._subject(),
            status="running",
            lead=f"running {current} ({done + 1} of {len(self.names)})",
            rows=self._pending_rows(current),
            current=current,
            live_chart=chart,
            elapsed_s=time.monotonic() - self.started,
        )

    def _overfit_interim(self, report: OverfitReport) -> None:
        if report.status == "running":
            chart = report.chart_specs()[0]
            self.progress.show(self._interim("overfit_one_batch", chart))

    def _subject(self) -> str:
        return f"{self.model_name}, {len(self.names)} checks"

    def _final(self, interrupted_at: str | None, how: str = "interrupted") -> TriageReport:
        """The final report; ``how`` says what stopped the check ``interrupted_at`` (a Ctrl-C,
        or ``"raised ValueError: ..."``)."""
        stopped = interrupted_at is not None
        pairs = [
            (check, finding)
            for check in self.names
            if check in self.reports
            for finding in self.reports[check].findings
        ]
        findings, root = rank(_frozen_judged(pairs, self.reports))
        rows = tuple(
            _mark_root(row, root, findings)
            for row in self._pending_rows(interrupted_at, stopped=stopped, how=how)
        )
        status = _status(rows, findings, stopped)
        actions: dict[str, Callable[..., Report]] = {
            f"{check}.{name}": action
            for check, report in self.reports.items()
            for name, action in report.actions.items()
        }
        exits: tuple[Exit, ...] = ()
        if root is not None and root.check in self.reports and root.cause != "step_size":
            # the root check's follow-ups (a step-size cause has its remedy: the lr factor)
            exits = tuple(
                Exit(e.label, e.code, f"{root.check}.{e.action}" if e.action else None, e.args)
                for e in self.reports[root.check].exits
            )
        return TriageReport(
            subject=self._subject(),
            status=status,
            lead=_lead(status, rows, root, findings, interrupted_at, how),
            findings=findings,
            tables=(_table(rows),),
            unavailable=_unavailable(rows, self.reports),
            disclosures=_disclosures(self.names, self.run_state),
            exits=exits,
            actions=actions,
            rows=rows,
            root_cause=root,
            reports=dict(self.reports),
            elapsed_s=time.monotonic() - self.started,
        )


def _frozen_judged(
    pairs: list[tuple[str, Finding]], reports: dict[str, Report]
) -> list[tuple[str, Finding]]:
    """Frozen parameters the optimizer holds are a note (a frozen backbone is intended) unless
    the run shows they matter: overfit_one_batch could not fit the batch."""
    overfit = reports.get("overfit_one_batch")
    if not isinstance(overfit, OverfitReport) or overfit.verdict not in ("stuck", "decreasing"):
        return pairs
    if any(u.code == "shortened" for u in overfit.unavailable):
        return pairs  # a run shortened by the budget shows nothing about fitting the batch
    if any(f.code == "loss_still_falling" for f in overfit.findings):
        return pairs
    return [
        (
            check,
            dataclasses.replace(
                f,
                severity="warning",
                message=f"{f.message} The model could not fit one batch with them frozen.",
            )
            if f.code == "frozen_params_in_optimizer"
            else f,
        )
        for check, f in pairs
    ]


def _mark_root(row: TriageRow, root: RootCause | None, findings: tuple[Finding, ...]) -> TriageRow:
    """The root cause's row, marked, with its badge at the root finding's severity (the chain's
    worst: a warning whose chain holds a critical finding is shown as fail). When that differs
    from the check's own status, ``reason`` says so and names the finding that lifted it, so the
    row never reads ``fail`` above its own panel's ``warn`` without a word."""
    if root is None or row.check != root.check:
        return row
    status: RowStatus = "fail" if root.severity == "critical" else "warn"
    reason = row.reason
    if status != row.status:
        explained = (f"{f.fields.get('check')}.{f.code}" for f in findings)
        worst = next(
            (
                name
                for name, f in zip(explained, findings)
                if f.severity == root.severity and name in root.explains
            ),
            f"a {root.severity} finding",
        )
        reason = (
            f"{row.lead.rstrip('.')}. Shown as {status}, though the check alone reads "
            f"{row.status}: as the root cause it explains {worst}."
        )
    return TriageRow(
        row.index,
        row.check,
        status,
        row.lead,
        row.key,
        row.value,
        row.elapsed_s,
        reason,
        is_root_cause=True,
    )


def _status(
    rows: tuple[TriageRow, ...], findings: tuple[Finding, ...], stopped: bool
) -> TriageStatus:
    if stopped:
        return "interrupted"
    severities = {f.severity for f in findings}
    if "critical" in severities:
        return "fail"
    if "warning" in severities:
        return "warn"
    return "pass" if all(r.status == "pass" for r in rows) else "incomplete"


def _lead(
    status: TriageStatus,
    rows: tuple[TriageRow, ...],
    root: RootCause | None,
    findings: tuple[Finding, ...],
    interrupted_at: str | None,
    how: str = "interrupted",
) -> str:
    cause = ""
    if root is not None:
        follow = len(root.explains)
        verb = "finding follows" if follow == 1 else "findings follow"
        also = f"; {follow} {verb} from it" if follow else ""
        cause = f"root cause in {root.check}{also}: {root.message}"
    if status == "interrupted":
        done = sum(r.status not in ("skipped", "pending", "running") for r in rows)
        what = (
            f"interrupted during {interrupted_at}"
            if how == "interrupted"
            else f"{interrupted_at} {how}"
        )
        head = f"{what}: {done} of {len(rows)} checks finished"
        return f"{head}; {cause}" if cause else f"{head}."
    if status in ("fail", "warn"):
        return cause
    if status == "pass":
        return f"all {len(rows)} checks passed: {', '.join(r.check for r in rows)}."
    open_rows = [r for r in rows if r.status != "pass"]
    passed = len(rows) - len(open_rows)
    what = ", ".join(f"{r.check} ({r.status})" for r in open_rows)
    return f"{passed} of {len(rows)} checks passed and none failed; not judged: {what}."


def _table(rows: tuple[TriageRow, ...]) -> Table:
    return Table.from_dicts(
        "checks",
        [
            {
                "check": r.check,
                "status": r.status,
                "lead": r.lead,
                "key": r.key,
                "value": r.value,
                "elapsed_s": r.elapsed_s,
                "root_cause": r.is_root_cause,
                "reason": r.reason,
            }
            for r in rows
        ],
        TABLE_COLUMNS,
    )


def _unavailable(
    rows: tuple[TriageRow, ...], reports: dict[str, Report]
) -> tuple[Unavailable, ...]:
    skipped = [
        Unavailable(r.check, r.reason or "skipped", "skipped")
        for r in rows
        if r.status == "skipped"
    ]
    inner = [
        Unavailable(f"{check}: {u.check}", u.reason, u.code)
        for check, report in reports.items()
        for u in report.unavailable
    ]
    return tuple(skipped + inner)


def _disclosures(names: tuple[str, ...], run: TriageRun) -> tuple[str, ...]:
    notes = [
        "every check ran on a deep copy of the model and a clone of the batch: your model, "
        "optimizer, data, .grad and RNG streams are untouched",
        "findings are ranked by written cause rules (torchlens_nb/recipes/triage/_rank.py): "
        "root cause first, the others name the finding they follow from",
    ]
    budget = run.budget
    shortened = budget.note()
    if shortened is not None:
        notes.append(shortened)
    if "overfit_one_batch" in names and shortened is None:
        notes.append(
            f"overfit_one_batch trains {budget.steps('overfit')} steps with your optimizer at "
            f"your lr, then at 10x, then Adam at lr={OVERFIT_LR:g}, stopping at the first that "
            "memorises (it asks whether the model can fit one batch)"
        )
    if "overfit_one_batch" in names:
        notes += [f"overfit_one_batch tried {note}" for note in run.overfit_notes]
    if "random_input_test" in names:
        if not run.random_input_on_trained:
            why = "'s shortened run did not train" if shortened else " did not fit"
            on = f"the untrained copy (overfit_one_batch{why})"
        elif shortened is not None:
            on = f"the copy overfit_one_batch trained for {budget.steps('overfit')} steps"
        else:
            on = "the copy overfit_one_batch trained"
        draws = " with one noise draw (the budget)" if shortened is not None else ""
        notes.append(f"random_input_test ran on {on}{draws}")
    if "update_ratio" in names and run.optimizer is not None:
        notes.append(
            f"update_ratio judged {run.optimizer.label} over {budget.steps('ratio')} steps"
        )
    if "causal_dependency" not in names:
        notes.append("causal_dependency runs when seq_dim= names the sequence axis")
    if "padding_dependency" not in names:
        notes.append("padding_dependency runs when the batch holds right-padded token ids")
    return tuple(notes)
