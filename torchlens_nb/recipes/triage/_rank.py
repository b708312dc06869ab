"""The root-cause ranking of ``tl.recipes.triage``, as data: which finding explains which.

When a model will not train, several checks fire at once: a dead layer makes gradient_flow
warn, overfit_one_batch fail, the update ratios of the dead layer flat, and random_input_test
see an output that ignores its input. Only one of them names the cause. :data:`CAUSES` lists the
findings that can be a cause, in causal order (the spec's order: the data, then the loss at
init, then whether the gradient reaches every layer, then memorising one batch, then the step
size), each with the findings of other checks it explains and why.

:func:`rank` applies them:

1. Only warnings and critical findings take part (info findings stay in their check's report).
2. Causes are visited in :data:`CAUSES` order; each finding that matches a cause and is not
   yet explained becomes the head of a chain, and claims every unexplained finding the cause
   explains (a claimed finding is never a cause itself).
3. Findings no cause claims or matches are chains of their own.
4. Chains are ordered by the worst severity in the chain (a dead layer's warning that makes
   overfitting fail leads a critical chain), then by the cause's place in :data:`CAUSES`, then
   by run order. The first chain's head is the root cause; its severity becomes the chain's
   worst, so it sorts first in the report.

Every finding comes back with ``fields["check"]``; heads carry ``cause`` and ``explains``, the
others ``follows_from`` (``"check.code"`` of their head) and a sentence saying so.
tests/recipes/test_triage_rank.py exercises each rule; tests/recipes/test_triage.py the bug zoo.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ...report import Finding
from ...report._base import SEVERITY_ORDER, Severity
from ...report._triage import RootCause

EVERY = frozenset({"*"})
"""In :attr:`Cause.explains`: every finding of that check."""
ALL_CHECKS = "*"
"""In :attr:`Cause.explains`: every check (the cause breaks everything downstream)."""


@dataclass(frozen=True)
class Cause:
    """A kind of root cause: the findings that are it, and the findings it explains."""

    name: str
    matches: tuple[tuple[str, frozenset[str]], ...]
    """``(check, codes)`` that are this cause, in order of preference for the chain's head."""
    explains: Mapping[str, frozenset[str]]
    """check -> codes it explains (:data:`EVERY`: all of them; key :data:`ALL_CHECKS`: every
    check). A cause also explains the other findings that match it."""
    because: str
    """Why the explained findings follow from it (one clause, shown with each of them)."""
    needs_where: frozenset[tuple[str, str]] = frozenset()
    """``(check, code)`` that count only when the finding points somewhere (``where``)."""

    def is_cause(self, check: str, finding: Finding) -> bool:
        if (check, finding.code) in self.needs_where and finding.where is None:
            return False
        return any(
            check == c and (codes is EVERY or finding.code in codes) for c, codes in self.matches
        )

    def explains_finding(self, check: str, finding: Finding) -> bool:
        if self.is_cause(check, finding):
            return True
        for key in (check, ALL_CHECKS):
            codes = self.explains.get(key, frozenset())
            if codes is EVERY or finding.code in codes:
                return True
        return False


def _codes(*codes: str) -> frozenset[str]:
    return frozenset(codes)


DEPENDENCY_BLIND = _codes("no_input_gradient", "ignores_own_input")
CAUSES: tuple[Cause, ...] = (
    Cause(
        "bad_data",
        (
            (
                "data_sanity",
                _codes(
                    "nonfinite_values",
                    "batch_size_mismatch",
                    "negative_labels",
                    "labels_out_of_range",
                ),
            ),
        ),
        {ALL_CHECKS: EVERY},
        "every later check reads this batch",
    ),
    Cause(
        "training_setup",
        (
            (
                "training_setup",
                _codes(
                    "model_in_eval",
                    "frozen_params_in_optimizer",
                    "trainable_params_not_in_optimizer",
                    "weight_decay_on_norm",
                    "params_not_registered",
                    "stale_grad",
                    "zero_grad_before_step",
                    "lr_decayed",
                ),
            ),
        ),
        {
            "update_ratio": _codes("update_ratio_too_low", "lr_too_low"),
            "weight_distribution": _codes("weights_collapsed"),
            "overfit_one_batch": _codes("cannot_overfit", "loss_not_near_zero"),
            "random_input_test": _codes("loss_same_as_noise"),
        },
        "what the model and optimizer were handed decides what can train (a frozen layer "
        "cannot fit the batch)",
    ),
    Cause(
        "nonfinite_weights",
        (("weight_distribution", _codes("param_nonfinite")),),
        {ALL_CHECKS: EVERY},
        "a NaN or Inf weight makes every output and gradient after it non-finite",
    ),
    Cause(
        "loss_detached",
        (("gradient_flow", _codes("loss_detached")),),
        {ALL_CHECKS: EVERY},
        "no gradient reaches the model, so nothing can train or be judged by training",
    ),
    Cause(
        "reads_padding",
        (("padding_dependency", _codes("reads_padding")),),
        {
            "overfit_one_batch": EVERY,
            "random_input_test": EVERY,
            "update_ratio": _codes("update_ratio_too_low", "lr_too_low"),
        },
        "the output is read after the padding, so every sequence's prediction carries its pads",
    ),
    Cause(
        "no_signal",
        (
            ("data_sanity", _codes("constant_field")),
            ("random_input_test", _codes("input_carries_no_signal")),
        ),
        {
            "random_input_test": EVERY,
            "overfit_one_batch": EVERY,
            "batch_independence": DEPENDENCY_BLIND,
            "causal_dependency": DEPENDENCY_BLIND,
            "gradient_flow": _codes("grad_zero", "grad_vanishing"),
            "update_ratio": _codes("update_ratio_too_low", "lr_too_low"),
        },
        "an input without signal leaves nothing to learn or to depend on",
    ),
    Cause(
        "unscaled_inputs",
        (("data_sanity", _codes("input_not_standardized")),),
        {
            "init_loss": _codes("loss_far_above_expected"),
            "gradient_flow": _codes(
                "grad_exploding", "grad_vanishing", "grad_spread", "grad_nonfinite"
            ),
            "overfit_one_batch": EVERY,
            "update_ratio": EVERY,
            "random_input_test": _codes(
                "loss_same_as_noise", "real_worse_than_noise", "loss_nonfinite"
            ),
        },
        "the raw input scale sets the scale of every activation and gradient after it",
    ),
    Cause(
        "label_alignment",
        (("output_vs_loss", _codes("labels_not_shifted", "labels_shifted_twice")),),
        {
            "init_loss": EVERY,
            "overfit_one_batch": EVERY,
            "random_input_test": EVERY,
            "causal_dependency": EVERY,
        },
        "the loss scores each position on the wrong token",
    ),
    Cause(
        "batch_normalised_output",
        (("output_vs_loss", _codes("normalised_over_batch")),),
        {
            "batch_independence": _codes("batch_leak"),
            "init_loss": EVERY,
            "overfit_one_batch": EVERY,
            "gradient_flow": EVERY,
            "update_ratio": EVERY,
            "random_input_test": EVERY,
        },
        "normalising over the batch axis makes every output depend on the whole batch",
    ),
    Cause(
        "loss_input_form",
        (("output_vs_loss", EVERY),),
        {
            "init_loss": EVERY,
            "overfit_one_batch": EVERY,
            "gradient_flow": _codes("grad_vanishing", "grad_spread"),
            "update_ratio": _codes("update_ratio_too_low", "lr_too_low"),
            "random_input_test": _codes("loss_same_as_noise"),
        },
        "the loss reads the outputs in the wrong form, so it can barely fall",
    ),
    Cause(
        "head_mismatch",
        (("init_loss", _codes("labels_logits_mismatch", "target_broadcast")),),
        {
            "overfit_one_batch": EVERY,
            "random_input_test": EVERY,
            "gradient_flow": EVERY,
            "update_ratio": EVERY,
            "output_vs_loss": EVERY,
        },
        "the outputs do not match the targets, so the loss measures the wrong thing",
    ),
    Cause(
        "nonfinite_loss",
        (
            ("init_loss", _codes("loss_nonfinite")),
            ("gradient_flow", _codes("grad_nonfinite")),
            ("random_input_test", _codes("loss_nonfinite")),
            ("update_ratio", _codes("loss_nonfinite")),
        ),
        {
            "gradient_flow": EVERY,
            "overfit_one_batch": EVERY,
            "update_ratio": EVERY,
            "random_input_test": EVERY,
            "batch_independence": EVERY,
            "causal_dependency": EVERY,
        },
        "a non-finite loss makes every gradient non-finite",
    ),
    Cause(
        "bad_weights",
        (("weight_distribution", _codes("suspicious_fill", "weights_collapsed", "weights_huge")),),
        {
            "gradient_flow": _codes("grad_zero", "grad_exploding", "grad_vanishing", "grad_spread"),
            "init_loss": _codes("loss_far_above_expected"),
            "overfit_one_batch": EVERY,
            "update_ratio": _codes("update_ratio_too_low", "lr_too_low"),
            "random_input_test": _codes("model_ignores_input", "loss_same_as_noise"),
            "batch_independence": DEPENDENCY_BLIND,
        },
        "a constant, collapsed or huge weight matrix decides what flows through its layer",
    ),
    Cause(
        "dead_layer",
        (("gradient_flow", _codes("grad_zero", "grad_disconnected")),),
        {
            "overfit_one_batch": EVERY,
            "update_ratio": _codes("update_ratio_too_low", "lr_too_low"),
            "batch_independence": DEPENDENCY_BLIND,
            "causal_dependency": DEPENDENCY_BLIND,
            "random_input_test": _codes("model_ignores_input", "loss_same_as_noise"),
            "weight_distribution": _codes("weights_collapsed"),
        },
        "a layer the gradient does not reach cannot learn, and what it feeds sees a constant",
        needs_where=frozenset({("gradient_flow", "grad_zero")}),
    ),
    Cause(
        "input_unused",
        (
            ("random_input_test", _codes("model_ignores_input")),
            ("batch_independence", _codes("no_input_gradient")),
            ("causal_dependency", _codes("no_input_gradient")),
        ),
        {
            "overfit_one_batch": EVERY,
            "gradient_flow": _codes("grad_zero"),
            "batch_independence": DEPENDENCY_BLIND,
            "causal_dependency": DEPENDENCY_BLIND,
            "random_input_test": _codes("loss_same_as_noise"),
            "update_ratio": _codes("update_ratio_too_low", "lr_too_low"),
        },
        "the output does not depend on the input, so nothing can be learnt from the data",
    ),
    Cause(
        "init_scale",
        (("init_loss", _codes("loss_far_above_expected")),),
        {
            "gradient_flow": _codes("grad_exploding", "grad_spread", "grad_vanishing"),
            "overfit_one_batch": _codes("loss_diverged", "cannot_overfit", "loss_not_near_zero"),
            "update_ratio": _codes("update_ratio_too_low", "lr_too_low"),
        },
        "outputs this far from uninformed at init make the first steps undo the init",
    ),
    Cause(
        "shortcut",
        (("init_loss", _codes("loss_far_below_expected")),),
        {},
        "the untrained model already scores better than chance",
    ),
    Cause(
        "dependency_leak",
        (
            ("batch_independence", _codes("batch_leak")),
            ("causal_dependency", _codes("causal_leak")),
        ),
        {},
        "outputs read inputs they must not see",
    ),
    Cause(
        "step_size",
        (
            (
                "update_ratio",
                _codes(
                    "lr_too_high", "lr_too_low", "update_ratio_too_high", "update_ratio_too_low"
                ),
            ),
        ),
        {"update_ratio": _codes("loss_nonfinite")},
        "one learning rate sets every layer's step",
    ),
    Cause(
        "gradient_scale",
        (
            (
                "gradient_flow",
                _codes("grad_exploding", "grad_vanishing", "grad_spread", "grad_zero"),
            ),
        ),
        {"overfit_one_batch": EVERY, "update_ratio": EVERY},
        "gradients of the wrong scale make every optimizer step the wrong size",
    ),
    Cause(
        "cannot_overfit",
        (
            (
                "overfit_one_batch",
                _codes("cannot_overfit", "loss_diverged", "loss_not_near_zero", "no_gradient"),
            ),
        ),
        {"random_input_test": _codes("loss_same_as_noise", "real_worse_than_noise")},
        "a model that cannot fit one batch scores about the same on any input",
    ),
)


@dataclass
class _Chain:
    cause: Cause | None
    priority: int
    head: int
    followers: list[int]


def _worst(severities: Sequence[Severity]) -> Severity:
    return min(severities, key=lambda s: SEVERITY_ORDER[s])


def rank(findings: Sequence[tuple[str, Finding]]) -> tuple[tuple[Finding, ...], RootCause | None]:
    """Rank ``(check, finding)`` pairs given in run order (see the module docstring).

    Returns:
        The warning and critical findings, root cause first, each with ``fields["check"]``,
        and the :class:`~torchlens_nb.report.RootCause` summary (None when nothing was found).
    """
    items = [(check, f) for check, f in findings if f.severity != "info"]
    assigned: set[int] = set()
    chains: list[_Chain] = []
    for priority, cause in enumerate(CAUSES):
        for match_check, _ in cause.matches:
            for i, (check, finding) in enumerate(items):
                if i in assigned or check != match_check or not cause.is_cause(check, finding):
                    continue
                assigned.add(i)
                chain = _Chain(cause, priority, i, [])
                for j, (other_check, other) in enumerate(items):
                    if j not in assigned and cause.explains_finding(other_check, other):
                        assigned.add(j)
                        chain.followers.append(j)
                chains.append(chain)
    chains += [_Chain(None, len(CAUSES), i, []) for i in range(len(items)) if i not in assigned]

    def severity(chain: _Chain) -> Severity:
        return _worst([items[k][1].severity for k in (chain.head, *chain.followers)])

    chains.sort(key=lambda c: (SEVERITY_ORDER[severity(c)], c.priority, c.head))
    ranked: list[Finding] = []
    for number, chain in enumerate(chains):
        check, head = items[chain.head]
        explains = [f"{items[k][0]}.{items[k][1].code}" for k in chain.followers]
        ranked.append(
            dataclasses.replace(
                head,
                severity=severity(chain),
                fields={
                    **head.fields,
                    "check": check,
                    "cause": chain.cause.name if chain.cause else None,
                    "explains": explains,
                    "is_root_cause": number == 0,
                },
            )
        )
        for k in chain.followers:
            follower_check, follower = items[k]
            because = chain.cause.because if chain.cause else "the same cause"
            ranked.append(
                dataclasses.replace(
                    follower,
                    message=f"{follower.message} Follows from {check}'s {head.code}: {because}.",
                    fields={
                        **follower.fields,
                        "check": follower_check,
                        "follows_from": f"{check}.{head.code}",
                    },
                )
            )
    if not chains:
        return (), None
    first = chains[0]
    check, head = items[first.head]
    root = RootCause(
        check=check,
        code=head.code,
        severity=ranked[0].severity,
        message=head.message,
        remedy=head.remedy,
        cause=first.cause.name if first.cause else head.code,
        because=first.cause.because if first.cause else "",
        explains=tuple(f"{items[k][0]}.{items[k][1].code}" for k in first.followers),
    )
    return tuple(ranked), root
