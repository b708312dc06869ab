"""Live value probes on the capture hook seam: ``RangeProbe`` and ``LivenessProbe``.

A probe is a plain object that holds running statistics; ``probe.hook_plan()`` gives the
``tl.options.HookPlan`` to pass to ``tl.trace(..., capture=CaptureOptions(hooks=...))``. The
callbacks run with recording suspended, so a probed trace has exactly the ops of an unprobed one
and bitwise the same outputs (tests/probes/test_zero_op.py). Statistics accumulate over every
capture the plan is used in until ``reset()``; each observed value costs one host sync (one
``tolist()`` of a handful of reduced scalars).

Only the public seam is used (``HookPlan``, ``Site``, selectors), so these probes double as its
conformance test.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import torch

from ..._validate import check_int, is_number
from ...capture import Selector
from ...errors import DiagnosticArgumentError
from ...options import HookPlan, Site
from ...report import Exit, Finding, Table, Where
from ...report._activations import (
    LIVENESS_COLUMNS,
    RANGE_COLUMNS,
    LivenessReport,
    LivenessStat,
    LivenessStatus,
    RangeReport,
    RangeStat,
    RangeStatus,
    liveness_rows,
    range_rows,
)


def default_unit_dim(ndim: int) -> int:
    """The axis read as "units" for a value with ``ndim`` dimensions (-1: no units).

    1-D: the only axis; 2-D ``(batch, features)``: 1; 3-D ``(batch, tokens, features)``: 2, the
    transformer layout; 4-D and more ``(batch, channels, ...)``: 1. A Conv1d output
    ``(batch, channels, length)`` is 3-D: pass ``unit_dim=1`` for it.
    """
    return {0: -1, 1: 0, 2: 1, 3: 2}.get(ndim, 1)


def check_selector(where: str, selector: Any) -> Selector:
    """Return ``selector`` if it is a ``tl.func``/``tl.module`` selector, else raise."""
    if not isinstance(selector, Selector):
        raise DiagnosticArgumentError(
            f"{where} takes selectors such as tl.func('relu') or tl.module('encoder.*'), "
            f"got {selector!r}."
        )
    return selector


def check_selectors(where: str, items: Any) -> tuple[Selector, ...]:
    """``items`` (one selector or an iterable of them) as a tuple of checked selectors.

    A string is refused whole (iterating it would report its first letter): name the fix.
    """
    if isinstance(items, Selector):
        return (items,)
    if isinstance(items, str):
        raise DiagnosticArgumentError(
            f"{where} takes selectors such as tl.func('relu') or tl.module('encoder.*'), got the "
            f"string {items!r}; write [tl.func({items!r})] or [tl.module({items!r})]."
        )
    if not isinstance(items, Iterable):
        raise DiagnosticArgumentError(
            f"{where} takes a selector or a list of them, such as [tl.func('relu')] or "
            f"[tl.module('encoder.*')], got {type(items).__name__} {items!r}."
        )
    return tuple(check_selector(where, s) for s in items)


def _as_numeric(value: Any) -> torch.Tensor | None:
    if not isinstance(value, torch.Tensor) or value.is_complex() or value.numel() == 0:
        return None
    if value.layout != torch.strided or value.is_quantized or value.device.type == "meta":
        return None  # sparse, quantized or meta: no dense values to compare with bounds
    value = value.detach()
    return value if value.is_floating_point() else value.double()


class _RangeSite:
    """Running range counters of one (site, declared bounds) pair."""

    def __init__(self, site: Site, low: float, high: float) -> None:
        self.label, self.module, self.low, self.high = site.label, site.module, low, high
        self.calls = self.numel = self.below = self.above = self.nonfinite = 0
        self.min, self.max = math.inf, -math.inf

    def observe(self, value: torch.Tensor) -> None:
        finite = torch.isfinite(value)
        inf = torch.tensor(math.inf, dtype=value.dtype)
        counts = torch.stack(
            [
                (value < self.low).sum().double(),
                (value > self.high).sum().double(),
                (~finite).sum().double(),
                torch.where(finite, value, inf).amin().double(),
                torch.where(finite, value, -inf).amax().double(),
            ]
        ).tolist()
        self.calls += 1
        self.numel += value.numel()
        self.below += int(counts[0])
        self.above += int(counts[1])
        self.nonfinite += int(counts[2])
        self.min, self.max = min(self.min, counts[3]), max(self.max, counts[4])

    def stat(self) -> RangeStat:
        seen = self.min <= self.max
        return RangeStat(
            self.label,
            self.module,
            self.low,
            self.high,
            self.calls,
            self.numel,
            self.below,
            self.above,
            self.nonfinite,
            self.min if seen else math.nan,
            self.max if seen else math.nan,
        )


class RangeProbe:
    """Compare live activations with the ranges the caller declares, adding no op to the trace.

    Args:
        bounds: ``{selector: (low, high)}``; inclusive bounds, ``-math.inf``/``math.inf`` for an
            open side. The bounds are the caller's semantic declaration (a ReLU6 stays in
            ``[0, 6]``, a softmax in ``[0, 1]``); the probe never guesses them.

    Raises:
        DiagnosticArgumentError: a key is not a selector, or a bound is not a number pair with
            ``low <= high``.

    Example:
        >>> import torch, torchlens_nb as tl
        >>> from torch import nn
        >>> _ = torch.manual_seed(0); model = nn.Sequential(nn.Linear(8, 16), nn.ReLU())
        >>> probe = tl.debug.RangeProbe({tl.func("relu"): (0.0, 0.5)})
        >>> _ = tl.trace(model, torch.randn(4, 8),
        ...              capture=tl.options.CaptureOptions(hooks=probe.hook_plan()))
        >>> [f.code for f in probe.findings]
        ['activation_range_violated']
    """

    def __init__(self, bounds: Mapping[Any, tuple[float, float]]) -> None:
        if not isinstance(bounds, Mapping) or not bounds:
            raise DiagnosticArgumentError(
                f"RangeProbe takes a non-empty dict {{selector: (low, high)}}, got {bounds!r}; "
                "e.g. RangeProbe({tl.func('relu'): (0.0, 6.0)})."
            )
        self._bounds: list[tuple[Selector, float, float]] = []
        for selector, pair in bounds.items():
            check_selector("RangeProbe", selector)
            low, high = check_bounds(f"RangeProbe bounds for {selector!r}", pair)
            self._bounds.append((selector, low, high))
        self._sites: dict[tuple[str, int], _RangeSite] = {}

    def hook_plan(self) -> HookPlan:
        """The plan to pass as ``CaptureOptions(hooks=...)``; one entry per declared selector."""
        return HookPlan(
            tuple((sel, _RangeHook(self, index)) for index, (sel, _, _) in enumerate(self._bounds))
        )

    def _observe(self, index: int, site: Site, value: Any) -> None:
        tensor = _as_numeric(value)
        if tensor is None:
            return
        key = (site.label, index)
        if key not in self._sites:
            _, low, high = self._bounds[index]
            self._sites[key] = _RangeSite(site, low, high)
        with torch.no_grad():
            self._sites[key].observe(tensor)

    @property
    def stats(self) -> tuple[RangeStat, ...]:
        """Per-site counters, in first-seen order."""
        return tuple(site.stat() for site in self._sites.values())

    @property
    def findings(self) -> tuple[Finding, ...]:
        """One ``activation_range_violated`` warning per site that left its declared range."""
        return tuple(_range_finding(s) for s in self.stats if s.is_violated)

    def reset(self) -> None:
        """Forget every statistic (the selectors and bounds stay)."""
        self._sites.clear()

    def report(self) -> RangeReport:
        """The statistics so far as a :class:`~torchlens_nb.report.RangeReport`."""
        stats = self.stats
        status: RangeStatus
        bad = [s for s in stats if s.is_violated]
        if not stats:
            status, lead = (
                "no_sites",
                (
                    "no selected site produced a value yet (pass "
                    "probe.hook_plan() to tl.trace as CaptureOptions(hooks=...))."
                ),
            )
        elif bad:
            status = "found"
            lead = (
                f"{len(bad)} of {len(stats)} sites left their declared range (first: "
                f"{bad[0].label}, observed [{bad[0].observed_min:.4g}, "
                f"{bad[0].observed_max:.4g}] vs [{bad[0].low:g}, {bad[0].high:g}])."
            )
        else:
            status, lead = "clean", f"all {len(stats)} sites stayed inside their declared range."
        rows, attrs = range_rows(stats)
        return RangeReport(
            subject=f"RangeProbe ({len(stats)} sites)",
            status=status,
            lead=lead,
            findings=self.findings,
            stats=stats,
            tables=(Table.from_dicts("sites", rows, RANGE_COLUMNS, attrs),),
            disclosures=(
                "bounds are the caller's declaration; values were observed live and not saved.",
            ),
            exits=(
                Exit(
                    "Find where values leave the range",
                    "tl.threshold(tl.trace(model, inputs), within=(low, high))",
                ),
            )
            if bad
            else (),
        )


class _RangeHook:
    """Callback bound to one declared selector (a class, so the plan entry is readable)."""

    def __init__(self, probe: RangeProbe, index: int) -> None:
        self.probe, self.index = probe, index

    def __call__(self, site: Site, value: Any) -> None:
        self.probe._observe(self.index, site, value)


def check_bounds(what: str, pair: Any) -> tuple[float, float]:
    if not (isinstance(pair, (tuple, list)) and len(pair) == 2 and all(is_number(x) for x in pair)):
        raise DiagnosticArgumentError(
            f"{what} must be a (low, high) pair of numbers, got {pair!r}."
        )
    low, high = float(pair[0]), float(pair[1])
    if math.isnan(low) or math.isnan(high) or low > high:
        raise DiagnosticArgumentError(
            f"{what} needs low <= high (use math.inf for an open side), got {pair!r}."
        )
    return low, high


def _range_finding(stat: RangeStat) -> Finding:
    nan = f", {stat.nonfinite} non-finite" if stat.nonfinite else ""
    return Finding(
        code="activation_range_violated",
        severity="warning",
        message=(
            f"{stat.label}: {stat.below} values < {stat.low:g} and {stat.above} > "
            f"{stat.high:g}{nan} over {stat.calls} call(s) (observed "
            f"[{stat.observed_min:.4g}, {stat.observed_max:.4g}])."
        ),
        where=Where(op=stat.label, module=stat.module or None),
        remedy=(
            f"for forensics capture with save=True and run tl.threshold(trace, within="
            f"({stat.low:g}, {stat.high:g})): it lists the ops outside the range and the "
            "op where that starts."
        ),
        fields={
            "low": stat.low,
            "high": stat.high,
            "below": stat.below,
            "above": stat.above,
            "nonfinite": stat.nonfinite,
            "numel": stat.numel,
            "calls": stat.calls,
            "observed_min": stat.observed_min,
            "observed_max": stat.observed_max,
        },
    )


class _LivenessSite:
    """Running zero counts and maxima of one site."""

    def __init__(self, site: Site, unit_dim: int | None) -> None:
        self.label, self.module, self.unit_dim = site.label, site.module, unit_dim
        self.calls = self.numel = self.zeros = 0
        self.max = self.max_abs = -math.inf
        self.unit_nonzero: torch.Tensor | None = None
        self.seen_dim = -1

    def observe(self, value: torch.Tensor) -> None:
        dim = default_unit_dim(value.dim()) if self.unit_dim is None else self.unit_dim
        nonzero = value != 0
        finite = torch.isfinite(value)
        zeros, vmax, vabs = torch.stack(
            [
                (~nonzero).sum().double(),
                torch.where(finite, value, -math.inf).amax().double(),
                torch.where(finite, value.abs(), 0.0).amax().double(),
            ]
        ).tolist()
        self.calls += 1
        self.numel += value.numel()
        self.zeros += int(zeros)
        self.max, self.max_abs = max(self.max, vmax), max(self.max_abs, vabs)
        if dim < 0 or dim >= value.dim():
            return
        others = [d for d in range(value.dim()) if d != dim]
        per_unit = nonzero.any(dim=others) if others else nonzero
        self.seen_dim = dim
        if self.unit_nonzero is None:
            self.unit_nonzero = per_unit
        else:
            size = max(len(per_unit), len(self.unit_nonzero))
            merged = torch.zeros(size, dtype=torch.bool)
            merged[: len(self.unit_nonzero)] |= self.unit_nonzero
            merged[: len(per_unit)] |= per_unit
            self.unit_nonzero = merged

    def stat(self) -> LivenessStat:
        units = 0 if self.unit_nonzero is None else len(self.unit_nonzero)
        quiet = 0 if self.unit_nonzero is None else int((~self.unit_nonzero).sum())
        seen = self.max > -math.inf
        return LivenessStat(
            self.label,
            self.module,
            self.calls,
            self.numel,
            self.zeros / self.numel if self.numel else math.nan,
            self.max if seen else math.nan,
            self.max_abs if seen else math.nan,
            self.seen_dim,
            units,
            quiet,
        )


class LivenessProbe:
    """Per-site zero fraction and running maxima, live, adding no op to the trace.

    Statistics only: a unit that was 0 in every value seen so far is counted
    (``units_all_zero``), never judged. The verdict takes several independent samples; the
    report's next step names the multi-sample door for it.

    Args:
        selectors: sites to watch, e.g. ``[tl.func("relu")]``.
        unit_dim: axis read as units; None applies :func:`default_unit_dim` per value.

    Example:
        >>> import torch, torchlens_nb as tl
        >>> from torch import nn
        >>> _ = torch.manual_seed(0); model = nn.Sequential(nn.Linear(8, 16), nn.ReLU())
        >>> probe = tl.debug.LivenessProbe([tl.func("relu")])
        >>> _ = tl.trace(model, torch.randn(4, 8),
        ...              capture=tl.options.CaptureOptions(hooks=probe.hook_plan()))
        >>> [(s.label, s.units) for s in probe.stats]
        [('relu_1', 16)]
    """

    def __init__(self, selectors: Iterable[Any], *, unit_dim: int | None = None) -> None:
        self._selectors = check_selectors("LivenessProbe", selectors)
        if not self._selectors:
            raise DiagnosticArgumentError(
                "LivenessProbe needs at least one selector, e.g. [tl.func('relu')]."
            )
        if unit_dim is not None:
            check_int("unit_dim", unit_dim, low=0, expect="a non-negative axis index or None")
        self._unit_dim = unit_dim
        self._sites: dict[str, _LivenessSite] = {}

    def hook_plan(self) -> HookPlan:
        """The plan to pass as ``CaptureOptions(hooks=...)``."""
        return HookPlan(tuple((sel, self._observe) for sel in self._selectors))

    def _observe(self, site: Site, value: Any) -> None:
        tensor = _as_numeric(value)
        if tensor is None:
            return
        if site.label not in self._sites:
            self._sites[site.label] = _LivenessSite(site, self._unit_dim)
        with torch.no_grad():
            self._sites[site.label].observe(tensor)

    @property
    def stats(self) -> tuple[LivenessStat, ...]:
        """Per-site statistics, in first-seen order."""
        return tuple(site.stat() for site in self._sites.values())

    @property
    def findings(self) -> tuple[Finding, ...]:
        """``units_zero_so_far`` info rows: sites with units that were 0 in every value seen."""
        return tuple(_liveness_finding(s) for s in self.stats if s.units_all_zero)

    def reset(self) -> None:
        """Forget every statistic."""
        self._sites.clear()

    def report(self) -> LivenessReport:
        """The statistics so far as a :class:`~torchlens_nb.report.LivenessReport`."""
        stats = self.stats
        rows, attrs = liveness_rows(stats)
        quiet = [s for s in stats if s.units_all_zero]
        status: LivenessStatus
        if not stats:
            status, lead = "no_sites", "no selected site produced a value yet."
        else:
            status = "measured"
            lead = (
                f"{len(stats)} sites measured; {len(quiet)} have units that were 0 in every "
                f"value seen (highest zero fraction {max(s.zero_fraction for s in stats):.0%}"
                ")."
            )
        return LivenessReport(
            subject=f"LivenessProbe ({len(stats)} sites)",
            status=status,
            lead=lead,
            findings=self.findings,
            stats=stats,
            tables=(Table.from_dicts("sites", rows, LIVENESS_COLUMNS, attrs),),
            disclosures=(
                "statistics over the values seen so far: one batch can never prove a "
                "unit's state for other inputs.",
            ),
            exits=(Exit("Multi-sample verdict", "tl.dead([trace_1, trace_2, trace_3])"),),
        )


def _liveness_finding(stat: LivenessStat) -> Finding:
    return Finding(
        code="units_zero_so_far",
        severity="info",
        message=(
            f"{stat.label}: {stat.units_all_zero} of {stat.units} units (dim "
            f"{stat.unit_dim}) were 0 in every value seen over {stat.calls} call(s); "
            f"zero fraction {stat.zero_fraction:.1%}."
        ),
        where=Where(op=stat.label, module=stat.module or None),
        remedy=(
            "a statistic, not a verdict: capture two or more batches with save=<this "
            "selector> and pass the traces to the multi-sample unit verdict."
        ),
        fields={
            "units": stat.units,
            "units_all_zero": stat.units_all_zero,
            "zero_fraction": stat.zero_fraction,
            "calls": stat.calls,
        },
    )


__all__ = ["LivenessProbe", "RangeProbe", "default_unit_dim"]
