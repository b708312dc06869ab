"""``weight_distribution``: what every parameter tensor holds, as numbers and histograms.

Non-finite values and constant fills come from the checks kit's one-shot audit
(``tl.debug.param_health``: signed NaN/Inf counts, ``all_zero`` / ``all_same`` fills of tensors
with two or more dimensions); this recipe adds the moments and histograms people print by hand
and the two scale rules the audit does not have: huge values and a collapsed std. Reads only;
four fused passes per finite tensor (``recipes/_stats.py``: ``summary``).
"""

from __future__ import annotations

from typing import Any

from torch import nn

from ..._validate import check_int
from ...debug import param_health
from ...report import Exit, Finding, Table
from ...report._base import Severity
from ...report._recipes_data import recipe_status, worst_finding
from ...report._recipes_training import ParamWeights, WeightDistributionReport, WeightVerdict
from .._batches import check_model
from .._stats import summary

HUGE_ABS = 100.0
"""|w| above 100 is far outside any standard initialisation (Kaiming/Xavier stay below ~3)."""
COLLAPSED_STD = 1e-6
"""A weight matrix whose values differ by less than this has collapsed to (nearly) one value."""
USUAL_STD = (0.01, 1.0)
"""Where weight matrices usually sit after standard inits (information only)."""


def _verdict(param: Any, stats: Any, fill: str | None) -> WeightVerdict:
    if stats.nan_count or stats.inf_count:
        return "nonfinite"
    if fill == "all_zero" and param.dim() >= 2:
        return "all_zero"
    if fill == "all_same" and param.dim() >= 2:
        return "all_same"
    if stats.abs_max > HUGE_ABS:
        return "huge"
    if param.dim() >= 2 and stats.std < COLLAPSED_STD:
        return "collapsed"
    if param.dim() >= 2 and not USUAL_STD[0] <= stats.std <= USUAL_STD[1]:
        return "unusual_scale"
    return "ok"


MAX_BINS = 10_000
"""The most histogram bins per parameter: each bin is a tuple entry in the report and an edge in
the payload (10k bins x 2 floats x every parameter is already far past what a panel draws)."""


def weight_distribution(model: nn.Module, *, bins: int = 30) -> WeightDistributionReport:
    """Per-parameter mean, std, min, max, NaN counts and a histogram, with the usual red flags.

    Findings: every ``tl.debug.param_health`` finding (non-finite values, all-zero / all-same
    weight matrices, dtype headroom, subnormals), plus ``weights_huge`` (|w| > ``HUGE_ABS``;
    warning), ``weights_collapsed`` (std < ``COLLAPSED_STD`` in a weight matrix; warning) and
    ``weights_unusual_scale`` (std outside ``USUAL_STD``; info).

    Args:
        model: read only (parameters, not buffers).
        bins: histogram bins per parameter, 1 to ``MAX_BINS``.

    Returns:
        A :class:`WeightDistributionReport` with table ``parameters``, a std bar chart in its
        panel, a histogram grid from ``figure()``, and the full audit as the action
        ``param_health``.

    Example:
        >>> import torch, torchlens_nb as tl
        >>> layer = torch.nn.Linear(4, 4)
        >>> _ = torch.nn.init.zeros_(layer.weight)
        >>> [f.code for f in tl.recipes.weight_distribution(layer).findings]
        ['suspicious_fill']
    """
    check_model(model)
    check_int("bins", bins, low=1, high=MAX_BINS, hint="the default is 30")
    audit = param_health(model, include_buffers=False)
    fills = {row.name: row.fill for row in audit.rows}
    params = []
    for name, param in model.named_parameters():
        stats, counts = summary(param, bins)
        params.append(
            ParamWeights(
                name,
                tuple(param.shape),
                str(param.dtype).replace("torch.", ""),
                stats,
                counts,
                _verdict(param, stats, fills.get(name)),
            )
        )
    findings = list(audit.findings) + _scale_findings(params)
    table = Table.from_dicts(
        "parameters",
        [
            {
                "name": p.name,
                "shape": p.shape,
                "mean": p.stats.mean,
                "std": p.stats.std,
                "min": p.stats.min,
                "max": p.stats.max,
                "nan": p.stats.nan_count,
                "inf": p.stats.inf_count,
                "zero_fraction": p.stats.zero_fraction,
                "verdict": p.verdict,
            }
            for p in params
        ],
        ("name", "shape", "mean", "std", "min", "max", "nan", "inf", "zero_fraction", "verdict"),
        {"huge_abs": HUGE_ABS, "collapsed_std": COLLAPSED_STD, "usual_std": USUAL_STD},
    )
    flagged = sum(p.verdict not in ("ok", "unusual_scale") for p in params)
    status = recipe_status(findings)
    if status == "pass":
        lead = f"no parameter flagged among {len(params)}: finite, no constant fill, none huge."
    elif flagged:
        lead = f"{flagged} of {len(params)} parameters flagged."
    else:
        lead = worst_finding(findings).message
    return WeightDistributionReport(
        subject=f"{type(model).__name__}, {len(params)} parameters",
        status=status,
        lead=lead,
        findings=tuple(findings),
        tables=(table,),
        params=tuple(params),
        huge_abs=HUGE_ABS,
        collapsed_std=COLLAPSED_STD,
        usual_std=USUAL_STD,
        unavailable=audit.unavailable,
        exits=(Exit("Full parameter audit", "tl.debug.param_health(model)", "param_health"),),
        actions={"param_health": lambda: audit},
        disclosures=(
            "moments are over finite values; constant 1-D tensors (biases, norm scales) "
            "are canonical initialisations and not flagged",
        ),
    )


def _scale_findings(params: list[ParamWeights]) -> list[Finding]:
    rules: tuple[tuple[WeightVerdict, str, Severity, str, str], ...] = (
        (
            "huge",
            "weights_huge",
            "warning",
            f"hold values above {HUGE_ABS:g} in magnitude",
            "an exploding update or a bad checkpoint: lower the learning rate, clip gradients, "
            "check the loading code.",
        ),
        (
            "collapsed",
            "weights_collapsed",
            "warning",
            f"have a std below {COLLAPSED_STD:g}: their values collapsed to about one value",
            "a dead layer or a degenerate init (e.g. constant_): re-initialise it and check its "
            "gradient with tl.recipes.gradient_flow.",
        ),
        (
            "unusual_scale",
            "weights_unusual_scale",
            "info",
            f"have a std outside the usual [{USUAL_STD[0]:g}, {USUAL_STD[1]:g}]",
            "fine for some init schemes (e.g. large fan-in); compare with the layer's intended "
            "init.",
        ),
    )
    findings = []
    for verdict, code, severity, what, remedy in rules:
        hit = [p for p in params if p.verdict == verdict]
        if hit:
            findings.append(
                Finding(
                    code,
                    severity,
                    f"{len(hit)} parameter(s) {what}: "
                    + ", ".join(
                        f"{p.name} (std {p.stats.std:.3g}, max |w| {p.stats.abs_max:.3g})"
                        for p in hit[:4]
                    )
                    + (" ..." if len(hit) > 4 else "")
                    + ".",
                    remedy=remedy,
                    fields={"params": [p.name for p in hit]},
                )
            )
    return findings
