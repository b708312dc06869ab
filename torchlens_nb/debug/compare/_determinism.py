"""``check_determinism``: do N isolated same-seed runs agree?

Each run is an :func:`~torchlens_nb.debug._isolation.isolated_capture`: a fresh deep copy (or a
``model_factory()`` build), cloned inputs, every global RNG seeded with ``seed`` inside a
preserved RNG state. Run 0 is the reference; every other run is compared with it op by op in
execution order (``debug/_compare.py``), bitwise by default. The verdict is three-state and
never "deterministic": agreement under test says nothing about other inputs, thread counts or
machines.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch import nn

from ..._validate import MAX_REPEATS, check_bool, check_int, check_number
from ...capture import Trace
from ...errors import ForwardError, ModelCopyError
from ...report import Finding, Table, Where
from ...report._compare import (
    COMPARE_COLUMNS,
    DIVERGED_STATUSES,
    VALUE_STATS_COLUMNS,
    DeterminismReport,
    RngOp,
    SeedVerdict,
    Verdict,
)
from .._blind_spots import blind_spot_disclosures, blind_spot_unavailable, unless_blind
from .._isolation import ModelFactory, check_isolation_args, isolated_capture
from ._compare import aligned_ops, compare_ops, source_line
from ._precision import is_stochastic


def environment_witnesses() -> dict[str, Any]:
    """The global settings that decide whether kernels may be nondeterministic."""
    return {
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "deterministic_warn_only": torch.is_deterministic_algorithms_warn_only_enabled(),
        "cudnn_available": torch.backends.cudnn.is_available(),
        "cudnn_deterministic": torch.backends.cudnn.deterministic,
        "cudnn_benchmark": torch.backends.cudnn.benchmark,
        "CUBLAS_WORKSPACE_CONFIG": os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
        "num_threads": torch.get_num_threads(),
        "num_interop_threads": torch.get_num_interop_threads(),
        "torch_version": torch.__version__,
    }


def _check_args(runs: Any, seed: Any, rtol: Any, atol: Any, seed_sensitivity: Any) -> None:
    check_int(
        "runs",
        runs,
        low=2,
        high=MAX_REPEATS,
        expect=f"an int in [2, {MAX_REPEATS}] (run 0 is the reference)",
    )
    check_int("seed", seed)
    for name, value in (("rtol", rtol), ("atol", atol)):
        if value is not None:
            check_number(name, value, low=0, expect="None (bitwise) or a finite number >= 0")
    check_bool("seed_sensitivity", seed_sensitivity)


def _compare_runs(
    run: Trace,
    reference: Trace,
    rtol: float,
    atol: float,
    stats: list[dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    return [
        compare_ops(a, b, lambda op: (rtol, atol), stats) for a, b in aligned_ops(run, reference)
    ]


def _first_diverged(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    return next((row for row in rows if row["status"] in DIVERGED_STATUSES), None)


def _inconclusive(
    subject: str,
    code: str,
    message: str,
    remedy: str,
    runs: int,
    seed: int,
    environment: dict[str, Any],
) -> DeterminismReport:
    return DeterminismReport(
        subject=subject,
        status="inconclusive",
        lead=f"inconclusive: {message}",
        findings=(Finding(code, "warning", message, remedy=remedy),),
        verdict="inconclusive",
        seed_verdict="not_run",
        runs=runs,
        seed=seed,
        total_runs=0,
        environment=environment,
    )


def check_determinism(
    model: nn.Module | None,
    inputs: Any,
    *,
    runs: int = 2,
    seed: int = 0,
    rtol: float | None = None,
    atol: float | None = None,
    seed_sensitivity: bool = False,
    model_factory: ModelFactory | None = None,
) -> DeterminismReport:
    """Run ``runs`` isolated same-seed captures and report whether they agree.

    Args:
        model: the module (deep-copied per run; may be None with ``model_factory``).
        inputs: every form ``tl.trace`` takes (cloned per run).
        runs: number of same-seed runs (>= 2; run 0 is the reference).
        seed: the seed every run starts from.
        rtol, atol: tolerance of the comparison; None (both) means bitwise, NaN equal to NaN.
        seed_sensitivity: add exactly ONE run seeded ``seed + 1`` (total cost ``runs + 1``) whose
            answer lands in the second slot ``seed_verdict``.
        model_factory: zero-argument callable building a fresh model per run, for models
            ``copy.deepcopy`` refuses.

    Returns:
        A :class:`~torchlens_nb.report._compare.DeterminismReport`: ``verdict``
        (``repeatable_under_test`` / ``nondeterminism_observed`` / ``inconclusive``),
        ``seed_verdict``, ``first_divergence`` (execution order), ``divergent_runs``,
        ``environment`` witnesses and ``rng_ops`` (ops that draw from the RNG, attributed to
        themselves). The ``comparison`` table is the first divergent run (else run 1) vs run 0.
        The caller's model, inputs and RNG streams are untouched. A model ``copy.deepcopy``
        refuses, or a forward that raises, gives ``inconclusive`` with the remedy.

    Example:
        >>> torch.manual_seed(0) and None
        >>> check_determinism(nn.Linear(4, 2), torch.randn(3, 4)).verdict
        'repeatable_under_test'
    """
    _check_args(runs, seed, rtol, atol, seed_sensitivity)
    check_isolation_args(model, inputs, model_factory)
    environment = environment_witnesses()
    environment["model_training"] = None if model is None else model.training
    name = type(model).__name__ if model is not None else "model_factory()"
    subject = f"{name}, {runs} runs, seed {seed}"
    traces: list[Trace] = []
    try:
        for _ in range(runs):
            traces.append(isolated_capture(model, inputs, seed=seed, model_factory=model_factory))
        extra = (
            isolated_capture(model, inputs, seed=seed + 1, model_factory=model_factory)
            if seed_sensitivity
            else None
        )
    except ModelCopyError as exc:
        return _inconclusive(
            subject,
            "model_not_copyable",
            str(exc),
            "pass model_factory=lambda: <build the same model> so each run gets a fresh model",
            runs,
            seed,
            environment,
        )
    except ForwardError as exc:
        return _inconclusive(
            subject,
            "forward_raised",
            str(exc),
            "fix the forward (err.partial_trace of tl.trace shows where it failed) and call again",
            runs,
            seed,
            environment,
        )
    cmp_rtol, cmp_atol = rtol or 0.0, atol or 0.0
    reference = traces[0]
    environment["devices"] = sorted({op.device for op in reference if op.device})
    per_run_stats: list[list[dict[str, Any]]] = [[] for _ in traces[1:]]
    per_run = [
        _compare_runs(run, reference, cmp_rtol, cmp_atol, stats)
        for run, stats in zip(traces[1:], per_run_stats)
    ]
    firsts = [(index + 1, _first_diverged(rows)) for index, rows in enumerate(per_run)]
    divergent = [(run, row) for run, row in firsts if row is not None]
    earliest = min(divergent, key=lambda item: _position(item[1]), default=None)
    shown_run, shown_rows = (earliest[0], per_run[earliest[0] - 1]) if earliest else (1, per_run[0])
    compared = sum(1 for row in per_run[0] if row["allclose"] is not None)
    verdict: Verdict = (
        "nondeterminism_observed"
        if divergent
        else "inconclusive"
        if compared == 0
        else "repeatable_under_test"
    )
    seed_verdict = _seed_verdict(extra, reference, cmp_rtol, cmp_atol, bool(divergent))
    rng_ops = tuple(
        RngOp(op.label, op.func, op.module, source_line(op))
        for op in reference
        if is_stochastic(op.func)
    )
    first = earliest[1] if earliest else None
    findings = _findings(first, earliest, reference, compared, rng_ops, environment)
    tolerance = (
        "bitwise" if rtol is None and atol is None else f"rtol={cmp_rtol:g}, atol={cmp_atol:g}"
    )
    lead = _lead(verdict, runs, tolerance, first, [run for run, _ in divergent])
    # agreement inside what the capture could not see is not observed agreement
    verdict, lead = unless_blind(
        verdict, lead, reference, "inconclusive", clean="repeatable_under_test"
    )
    return DeterminismReport(
        subject=subject,
        status=verdict,
        lead=lead,
        findings=findings,
        tables=(
            Table.from_dicts(
                "comparison",
                shown_rows,
                COMPARE_COLUMNS,
                {
                    "run": shown_run,
                    "reference_run": 0,
                    "rtol": cmp_rtol,
                    "atol": cmp_atol,
                    "compared": compared,
                },
            ),
            Table.from_dicts("value_stats", per_run_stats[shown_run - 1], VALUE_STATS_COLUMNS),
        ),
        disclosures=(
            f"{runs} runs in this process on this machine; agreement here does not "
            "cover other inputs, thread counts, devices or library versions",
            "the capture records torch ops only: entropy the forward reads elsewhere "
            "(time, os.urandom, unseeded generators it owns) is visible only through "
            "its effect on values",
            f"seed_sensitivity ran one extra run (total runs: {runs + 1})"
            if seed_sensitivity
            else f"total runs: {runs}",
            *blind_spot_disclosures(reference),
        ),
        unavailable=blind_spot_unavailable(reference, "determinism check"),
        verdict=verdict,
        seed_verdict=seed_verdict,
        runs=runs,
        seed=seed,
        total_runs=runs + (1 if seed_sensitivity else 0),
        rtol=rtol,
        atol=atol,
        first_divergence=None if first is None else first["op"],
        divergent_runs=tuple(run for run, _ in divergent),
        environment=environment,
        rng_ops=rng_ops,
    )


def _position(row: dict[str, Any]) -> int:
    index = row["index_b"] if row["index_b"] is not None else row["index_a"]
    return index if index is not None else 0


def _seed_verdict(
    extra: Trace | None, reference: Trace, rtol: float, atol: float, nondeterministic: bool
) -> SeedVerdict:
    if extra is None:
        return "not_run"
    if nondeterministic:
        return "inconclusive"  # same-seed runs already differ: a seed effect cannot be isolated
    rows = _compare_runs(extra, reference, rtol, atol)
    return "seed_sensitive" if _first_diverged(rows) is not None else "seed_insensitive"


def _lead(
    verdict: Verdict, runs: int, tolerance: str, first: dict[str, Any] | None, divergent: list[int]
) -> str:
    if verdict == "nondeterminism_observed" and first is not None:
        return (
            f"nondeterminism observed: run(s) {divergent} differ from run 0, first at "
            f"{first['op']} ({first['status'].replace('_', ' ')})"
        )
    if verdict == "repeatable_under_test":
        return f"all {runs} same-seed runs agree ({tolerance})"
    return "inconclusive: no op output could be compared"


def _findings(
    first: dict[str, Any] | None,
    earliest: tuple[int, Any] | None,
    reference: Trace,
    compared: int,
    rng_ops: tuple[RngOp, ...],
    environment: dict[str, Any],
) -> tuple[Finding, ...]:
    findings = []
    if first is not None and earliest is not None:
        op = reference[first["op"]] if first["op"] in reference else None  # noqa: SIM401
        findings.append(
            Finding(
                "nondeterminism_first_divergence",
                "warning",
                f"run {earliest[0]} separates from run 0 first at {first['op']} "
                f"({first['reason']}).",
                where=Where(
                    op=first["op"],
                    module=first["module"] or None,
                    file=None if op is None else op.file,
                    line=None if op is None else op.line,
                    code=None if op is None else op.code,
                ),
                remedy="look for unseeded randomness, Python-side state that changes across calls, "
                "or nondeterministic kernels (torch.use_deterministic_algorithms(True)).",
                fields={"run": earliest[0], "status": first["status"]},
            )
        )
    if compared == 0:
        findings.append(
            Finding(
                "determinism_nothing_compared",
                "warning",
                "no op output of the runs could be compared.",
                remedy="check that the forward records torch ops.",
            )
        )
    if rng_ops:
        findings.append(
            Finding(
                "rng_consuming_ops",
                "info",
                f"{len(rng_ops)} op(s) draw from the RNG: "
                f"{', '.join(r.op for r in rng_ops[:5])}{' ...' if len(rng_ops) > 5 else ''}.",
                fields={"ops": [r.op for r in rng_ops]},
            )
        )
    if (
        any(d.startswith("cuda") for d in environment.get("devices", ()))
        and not environment["deterministic_algorithms"]
    ):
        findings.append(
            Finding(
                "deterministic_algorithms_off",
                "info",
                "CUDA ops ran with torch.use_deterministic_algorithms off.",
                remedy="torch.use_deterministic_algorithms(True) and "
                "CUBLAS_WORKSPACE_CONFIG=:4096:8 to rule out nondeterministic kernels.",
            )
        )
    return tuple(findings)
