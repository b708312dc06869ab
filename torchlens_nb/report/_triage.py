"""Reports of ``tl.recipes.triage``: one row per check in run order, the root cause first.

:class:`TriageReport` holds the recipes' own reports (each row expands into its panel), one
:class:`TriageRow` per check with the key number, and the findings of every check ranked by
``recipes/triage/_rank.py`` so that the first finding is the root cause and the others name the
finding they follow from (``fields["follows_from"]``). :class:`OutputLossReport` is the check
that sees more than one recipe: the model's outputs against what its loss expects (the
double-softmax bug). Tones are decided here, per status, and travel in the payload.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ._base import MAX_CARD_FINDINGS, Report, Severity, _clip, frozen_mapping, payload_as
from ._recipes_data import LossKind, RecipeReport
from ._status import Tone, tones

TriageStatus = Literal["pass", "warn", "fail", "incomplete", "running", "interrupted"]
"""``fail`` / ``warn``: the worst finding is critical / a warning (the root cause leads);
``pass``: every check ran and passed; ``incomplete``: none failed, but a check was skipped or
could not decide (never counted as a pass); ``running``: an interim report;
``interrupted``: the partial report of the checks that finished before a KeyboardInterrupt."""

TRIAGE_TONES = tones(
    {
        "pass": "ok",
        "warn": "warning",
        "fail": "critical",
        "incomplete": "warning",
        "running": "info",
        "interrupted": "warning",
    }
)

RowStatus = Literal["pass", "warn", "fail", "inconclusive", "skipped", "pending", "running"]
"""A check's status: its recipe's status, or ``skipped`` (it cannot apply here, or the run was
interrupted; ``reason`` says which), ``pending`` (not run yet) and ``running``."""

ROW_TONES: Mapping[str, Tone] = frozen_mapping(
    {
        "pass": "ok",
        "warn": "warning",
        "fail": "critical",
        "inconclusive": "warning",
        "skipped": "info",
        "pending": "info",
        "running": "info",
    }
)
"""The tone each row status is shown in (the panel maps no words)."""


@dataclass(frozen=True)
class TriageRow:
    """One check of the triage, in run order."""

    index: int
    """Position in the run order (0-based)."""
    check: str
    """The recipe's name (``"gradient_flow"``), or ``"output_vs_loss"``."""
    status: RowStatus
    lead: str
    """The recipe report's lead, or why it was skipped."""
    key: str | None
    """The key number as text, e.g. ``"2.31 vs 2.30 expected"``."""
    value: float | None
    """The key number itself (None when it is not one number)."""
    elapsed_s: float | None
    reason: str | None = None
    """Why the check was skipped, or why the row shows another status than the check's own
    report (the root cause's row is shown at the severity of the chain it explains)."""
    is_root_cause: bool = False
    """The root cause (the triage's first finding) comes from this check."""
    tone: Tone = field(init=False)
    """How the status is shown, from :data:`ROW_TONES` (travels in the payload)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "tone", ROW_TONES[self.status])


@dataclass(frozen=True)
class RootCause:
    """The first finding of the ranking, summarised for the panel's header."""

    check: str
    code: str
    severity: Severity
    message: str
    remedy: str | None
    cause: str
    """The ranking rule that made it a cause, e.g. ``"dead_layer"``."""
    because: str
    """Why the findings it explains follow from it."""
    explains: tuple[str, ...]
    """``"check.code"`` of every finding that follows from it."""


@dataclass(frozen=True)
class HandCheck:
    """Something one triage call cannot see, with the one-line check to do by hand."""

    what: str
    """E.g. ``"the loop's zero_grad"``."""
    how: str
    """The hand check, or the tool that sees it (``tl.debug.ChecksSession``)."""


NOT_CHECKED: tuple[HandCheck, ...] = (
    HandCheck(
        "label alignment for sequence models",
        "print labels[0, :8] beside input_ids[0, :8]: a causal LM's loss must predict token "
        "t+1 from tokens <= t, shifted exactly once (in the model or in the loss, not both)",
    ),
    HandCheck(
        "the loop's zero_grad",
        "train under tl.debug.ChecksSession: gradients that grow by accumulation with no "
        "accumulation declared are flagged",
    ),
    HandCheck(
        "input/label pairing",
        "show a few inputs beside their labels after the loader's shuffling and collation",
    ),
    HandCheck(
        "loss masking of padding",
        "count the label positions the loss averages over against the non-pad tokens "
        "(padding labels set to -100, or the attention mask applied)",
    ),
)
"""What one call on (model, batch, loss_fn, optimizer) cannot see: the training loop, the
loader, and sequence labels beyond the batch's form. Every triage report lists them."""


@dataclass(frozen=True, kw_only=True, repr=False)
class TriageReport(Report):
    """The triage checks in run order, each with its recipe report, root cause first."""

    report_type = "triage"
    status_tones = TRIAGE_TONES
    payload_properties = ("progress",)
    status: TriageStatus
    rows: tuple[TriageRow, ...]
    root_cause: RootCause | None = None
    reports: Mapping[str, Report] = field(
        default_factory=frozen_mapping, metadata=payload_as("report_payloads")
    )
    """check -> its recipe's report (finished checks only; an interim report carries none)."""
    current: str | None = None
    """The check running now (interim reports)."""
    live_chart: Mapping[str, Any] | None = None
    """The overfit run's loss chart while it trains (interim reports)."""
    elapsed_s: float = 0.0
    not_checked: tuple[HandCheck, ...] = NOT_CHECKED
    """What this call cannot see, each with its hand check (card, ``to_dict``, panel)."""

    def card(self, max_findings: int = MAX_CARD_FINDINGS) -> str:
        """The report card, then the "not checked by this call" list (one line each)."""
        lines = [super().card(max_findings)]
        lines += [_clip(f"  not checked by this call: {h.what}: {h.how}") for h in self.not_checked]
        return "\n".join(lines)

    @property
    def progress(self) -> dict[str, Any]:
        """``done`` (finished checks), ``total`` and ``current`` for the progress bar."""
        done = sum(r.status not in ("pending", "running") for r in self.rows)
        return {"done": done, "total": len(self.rows), "current": self.current}

    @property
    def report_payloads(self) -> dict[str, dict[str, Any]]:
        """Each check's report payload; its follow-ups are this report's actions
        ``"<check>.<action>"``, so the buttons of an expanded row work in the triage panel."""
        payloads = {}
        for check, report in self.reports.items():
            payload = report.to_dict()
            for item in payload["exits"]:
                if item["action"]:
                    item["action"] = f"{check}.{item['action']}"
                    item["runnable"] = item["action"] in self.actions
            payload["actions"] = [f"{check}.{name}" for name in payload["actions"]]
            payloads[check] = payload
        return payloads

    def check_report(self, check: str) -> Report:
        """The report of one finished check (``KeyError`` names the finished ones)."""
        if check not in self.reports:
            raise KeyError(f"no finished check {check!r}; finished: {sorted(self.reports)}")
        return self.reports[check]


# ----- output_vs_loss ----------------------------------------------------------------------
OutputForm = Literal["probabilities", "log_probabilities", "scores", "unknown"]
"""What the outputs look like along the class dimension: rows in [0, 1] summing to 1, rows
whose exp sums to 1 (log-softmax), anything else (``scores``: logits), or ``unknown`` (no
class dimension to read)."""


@dataclass(frozen=True, kw_only=True, repr=False)
class OutputLossReport(RecipeReport):
    """The model's outputs against the input form its loss expects (logits, log-probs)."""

    report_type = "output_vs_loss"
    loss_kind: LossKind
    output_shape: tuple[int, ...]
    output_form: OutputForm
    class_dim: int | None
    """The dimension read as classes (1 for ``(N, C, ...)``, -1 for ``(..., C)``)."""
    value_min: float
    value_max: float
    max_row_sum_error: float | None
    """Largest |sum over the class dimension - 1| (None without a class dimension)."""


# ----- training_setup ----------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True, repr=False)
class SetupReport(RecipeReport):
    """What the model and optimizer handed to triage say before anything runs: modes, frozen
    parameters the optimizer holds, trainable ones it misses, per-group lr and weight decay."""

    report_type = "training_setup"
    model_training: bool
    """``model.training`` as handed over."""
    eval_modules: tuple[str, ...]
    """Dropout and BatchNorm modules in eval mode (their behaviour depends on the mode)."""
    frozen_held: tuple[str, ...]
    """Parameters with ``requires_grad=False`` that the optimizer holds (they never train)."""
    trainable_missing: tuple[str, ...]
    """Parameters with ``requires_grad=True`` that no param group holds (they never train)."""
    decayed_norm_params: tuple[str, ...]
    """Normalisation weights and biases in a group with weight decay > 0."""
