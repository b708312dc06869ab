"""``leakage_poison``: inject dye where information must not come from, run the real pipeline.

Rows ``[cutoff:]`` of X and y (the future, the test set) are the forbidden source; rows
``[:cutoff]`` must come out exactly as they would without them. The pipeline runs four times on
copies of the data (the caller's arrays are never written):

1. undyed: the reference;
2. NaN dye: NaN is absorbing under + - * /, so it spreads like dye. An allowed row that turns
   non-finite (or disappears) marks a crossing;
3. and 4. sentinel, +1e12 and -1e12 in the forbidden rows: an allowed row whose values differ
   from the reference was computed from the forbidden rows. This covers the NaN test's false
   negatives: pandas ``mean``/``std``/``rolling`` (skipna), ``np.nanmean``, ``fillna``, imputers
   and sklearn scalers skip NaN, so the dye vanishes while the statistic still uses the forbidden
   rows. Both signs, so a stage that only looks at a sign or a threshold still moves.

The verdict rests on the sentinel comparison (exact for a deterministic pipeline); a NaN-only
crossing is reported as a suspect false positive. NaN also spreads along legitimate axes: a
softmax over a row holding NaN goes all-NaN even behind a correct additive -inf causal mask
(NaN + -inf = NaN), so this recipe cannot validate masking inside a model; use
``tl.recipes.causal_dependency`` for that.

Row alignment: an output row is "allowed" by its pandas index label when the output has an
index drawn from the input's, else by position when the output keeps all N rows, else all rows
when the output has exactly ``cutoff`` rows (a train split). Any other row count cannot be aligned
and that stage's check is reported as not available.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..._validate import check_int, is_number
from ...debug._isolation import keeps_torch_switches
from ...errors import DiagnosticArgumentError, InputFormError
from ...report import Finding, Table
from ...report._recipes_data import RecipeStatus
from ...report._recipes_flow import LeakageReport, LeakageVerdict, StageResult

SENTINEL = 1e12
"""Large enough to dominate any statistic it enters, small enough that sums of ~1e6 of them stay
finite in float64 (the dye must not overflow into Inf, which the NaN pass already covers)."""
_PASSES = ("clean", "nan", "plus", "minus")

Stage = tuple[str, Callable[..., Any]]


def _stages(pipeline: Any) -> list[Stage]:
    if callable(pipeline) and not isinstance(pipeline, (list, tuple)):
        return [(getattr(pipeline, "__name__", "pipeline"), pipeline)]
    if isinstance(pipeline, (list, tuple)) and pipeline:
        stages = []
        for i, item in enumerate(pipeline):
            if isinstance(item, tuple) and len(item) == 2 and callable(item[1]):
                stages.append((str(item[0]), item[1]))
            elif callable(item):
                stages.append((getattr(item, "__name__", f"stage_{i}"), item))
            else:
                break
        else:
            return stages
    raise InputFormError(
        f"pipeline must be a callable pipeline(X, y) -> (X, y) or a list of stages "
        f"[('name', fn), ...], got {type(pipeline).__name__}."
    )


def _rows(data: Any) -> int:
    shape = getattr(data, "shape", None)
    if shape is None or len(shape) == 0:
        raise InputFormError(
            f"X and y must be arrays, tensors or pandas objects with rows, got "
            f"{type(data).__name__}."
        )
    return int(shape[0])


def _poison(data: Any, cutoff: int, value: float | None) -> Any:
    """A copy of ``data`` with rows ``[cutoff:]`` set to ``value`` (None: unchanged copy)."""
    if data is None:
        return None
    if type(data).__module__.startswith("pandas"):
        out = data.copy(deep=True)
        if value is None:
            return out
        if out.ndim == 1:
            out = out.astype("float64") if out.dtype.kind in "biu" else out
            if out.dtype.kind == "f":
                out.iloc[cutoff:] = value
            return out
        for column in out.columns:
            if out[column].dtype.kind in "biuf":
                out[column] = out[column].astype("float64")
                out.iloc[cutoff:, out.columns.get_loc(column)] = value
        return out
    if type(data).__module__.startswith("torch"):
        out = data.detach().clone()
        if value is not None:
            out = out if out.is_floating_point() else out.double()
            out[cutoff:] = value
        return out
    out = np.array(data, copy=True)
    if value is not None:
        out = out if out.dtype.kind == "f" else out.astype(np.float64)
        out[cutoff:] = value
    return out


def _matrix(data: Any) -> tuple[np.ndarray, Any, tuple[str, ...]]:
    """(rows x columns float array, pandas index or None, column names)."""
    if type(data).__module__.startswith("pandas"):
        frame = data.to_frame() if data.ndim == 1 else data
        numeric = frame.select_dtypes(include="number")
        return (
            numeric.to_numpy(dtype=np.float64).reshape(len(frame), -1),
            frame.index,
            tuple(str(c) for c in numeric.columns),
        )
    if type(data).__module__.startswith("torch"):
        data = data.detach().cpu().double().numpy()
    array = np.asarray(data, dtype=np.float64)
    array = array.reshape(array.shape[0], -1) if array.ndim else array.reshape(1, 1)
    return array, None, tuple(str(i) for i in range(array.shape[1]))


def _allowed(data: Any, n_rows: int, cutoff: int, past_labels: Any) -> dict[Any, np.ndarray] | None:
    """Allowed rows of a stage output keyed by original row id (None: they cannot be aligned)."""
    values, index, _ = _matrix(data)
    if index is not None and past_labels is not None and index.isin(past_labels).any():
        mask = index.isin(past_labels)
        return {label: row for label, row, keep in zip(index, values, mask) if keep}
    if len(values) == n_rows:
        return dict(enumerate(values[:cutoff]))
    if len(values) == cutoff:
        return dict(enumerate(values))
    return None


def _run(stages: list[Stage], x: Any, y: Any) -> list[tuple[Any, Any] | BaseException]:
    """Each stage's (X, y) output, or the exception that stopped the run at that stage."""
    outputs: list[tuple[Any, Any] | BaseException] = []
    for _, stage in stages:
        try:
            result = stage(x, y)
        except Exception as exc:  # the user's stage failed on dyed data: a fact, not a crash
            outputs.append(exc)
            break
        x, y = result if isinstance(result, tuple) and len(result) == 2 else (result, y)
        outputs.append((x, y))
    return outputs


@keeps_torch_switches
def leakage_poison(
    pipeline: Any, X: Any, y: Any, cutoff: int, *, sentinel: float = SENTINEL
) -> LeakageReport:
    """Find where information from rows ``[cutoff:]`` reaches rows ``[:cutoff]``, stage by stage.

    See the module docstring for the method (NaN dye plus a +/-sentinel differential run), the
    false-negative and false-positive caveats, and row alignment.

    Args:
        pipeline: ``pipeline(X, y) -> (X, y)``, or a list of stages ``[("scale", fn), ...]``
            (or bare functions) each called as ``fn(X, y)`` and returning ``(X, y)`` or just X.
            It must be deterministic (seed any randomness), or every stage looks leaky.
        X: features: numpy array, torch tensor, or pandas DataFrame (numeric columns are dyed;
            integer columns are cast to float64 in the dyed copies).
        y: targets of the same row count, or None.
        cutoff: rows ``[cutoff:]`` are the future / test rows.
        sentinel: magnitude of the sentinel value.

    Returns:
        A :class:`LeakageReport`: verdict, per-stage results (table ``stages``), and a critical
        finding naming the stage (and X columns) where the leak crosses.

    Raises:
        DiagnosticArgumentError: bad ``cutoff``/``sentinel``, or a stage raised on the undyed data.

    Example:
        >>> import numpy as np, torchlens_nb as tl
        >>> X, y = np.random.default_rng(0).normal(size=(10, 2)), np.arange(10.0)
        >>> leaky = lambda X, y: ((X - X.mean(0)) / X.std(0), y)  # fit on train AND test
        >>> tl.recipes.leakage_poison([("scale", leaky)], X, y, cutoff=8).verdict
        'leak'
    """
    stages = _stages(pipeline)
    n_rows = _rows(X)
    if y is not None and _rows(y) != n_rows:
        raise InputFormError(f"X has {n_rows} rows but y has {_rows(y)}; pass aligned X and y.")
    check_int(
        "cutoff",
        cutoff,
        low=1,
        high=n_rows - 1,
        expect=f"an int in [1, {n_rows - 1}] (rows [cutoff:] are poisoned)",
    )
    if not is_number(sentinel) or not 1.0 <= abs(sentinel) < float("inf"):
        raise DiagnosticArgumentError(f"sentinel must be a finite number >= 1, got {sentinel!r}.")
    sentinel = abs(float(sentinel))
    values = {"clean": None, "nan": float("nan"), "plus": sentinel, "minus": -sentinel}
    dyed = {
        name: (_poison(X, cutoff, values[name]), _poison(y, cutoff, values[name]))
        for name in _PASSES
    }
    runs = {name: _run(stages, *dyed[name]) for name in _PASSES}
    clean_error = next((o for o in runs["clean"] if isinstance(o, BaseException)), None)
    if clean_error is not None:
        failed = stages[len(runs["clean"]) - 1][0]
        raise DiagnosticArgumentError(
            f"stage {failed!r} raised {type(clean_error).__name__} on the undyed data: "
            f"{clean_error}; fix the pipeline first."
        ) from clean_error
    index = _matrix(X)[1]
    past_labels = index[:cutoff] if index is not None else None
    results = [
        _stage_result(i, name, runs, dyed["nan"], n_rows, cutoff, past_labels)
        for i, (name, _) in enumerate(stages)
    ]
    results = _mark_crossing(results)
    verdict, findings = _verdict(results, sentinel)
    table = Table.from_dicts(
        "stages",
        [
            {
                "stage": r.name,
                "rows_out": r.rows_out,
                "past_rows": r.past_rows,
                "nan_crossed": r.nan_crossed,
                "sentinel_changed": r.sentinel_changed,
                "dye_vanished": r.dye_vanished,
                "columns": r.columns,
                "crossing": r.is_crossing,
                "note": r.note,
            }
            for r in results
        ],
        (
            "stage",
            "rows_out",
            "past_rows",
            "nan_crossed",
            "sentinel_changed",
            "dye_vanished",
            "columns",
            "crossing",
            "note",
        ),
        {"cutoff": cutoff, "sentinel": sentinel},
    )
    statuses: dict[LeakageVerdict, RecipeStatus] = {
        "leak": "fail",
        "suspect": "warn",
        "clean": "pass",
        "inconclusive": "inconclusive",
    }
    status = statuses[verdict]
    return LeakageReport(
        subject=f"{len(stages)}-stage pipeline, {n_rows} rows, cutoff {cutoff}",
        status=status,
        lead=_lead(verdict, results),
        findings=tuple(findings),
        tables=(table,),
        verdict=verdict,
        stages=tuple(results),
        cutoff=cutoff,
        num_rows=n_rows,
        sentinel=sentinel,
        disclosures=(
            "false positives: NaN spreads along legitimate axes (a softmax behind a correct -inf "
            "causal mask goes all-NaN); check masking inside models with "
            "tl.recipes.causal_dependency",
            "the verdict rests on the +/-sentinel comparison with the undyed run; a stochastic "
            "stage must be seeded",
            "only information flowing from rows [cutoff:] into rows [:cutoff] is tested",
        ),
    )


def _stage_result(
    i: int,
    name: str,
    runs: dict[str, list[Any]],
    nan_inputs: tuple[Any, Any],
    n_rows: int,
    cutoff: int,
    past_labels: Any,
) -> StageResult:
    clean = runs["clean"][i]
    reference = [
        None if part is None else _allowed(part, n_rows, cutoff, past_labels) for part in clean
    ]
    rows_out = len(_matrix(clean[0])[0])
    if any(ref is None for part, ref in zip(clean, reference) if part is not None):
        return StageResult(
            name,
            i,
            rows_out,
            None,
            None,
            None,
            False,
            (),
            False,
            "rows cannot be aligned: the row count changed and the output has no "
            "index from the input; return a pandas object to check this stage",
        )
    notes: list[str] = []
    columns: dict[int, str] = {}
    checks: dict[str, bool | None] = {}
    for run in ("nan", "plus", "minus"):
        if len(runs[run]) <= i or isinstance(runs[run][i], BaseException):
            error = runs[run][i] if len(runs[run]) > i else None
            notes.append(
                f"the {run} run stopped before this stage"
                if error is None
                else f"the {run} run raised {type(error).__name__}: {error}"
            )
            checks[run] = None
            continue
        checks[run] = _crossed(
            runs[run][i], reference, n_rows, cutoff, past_labels, nan=run == "nan", columns=columns
        )
    plus, minus = checks["plus"], checks["minus"]
    sentinel = None if plus is None and minus is None else bool(plus or minus)
    allowed = next(ref for ref in reference if ref is not None)
    return StageResult(
        name,
        i,
        rows_out,
        len(allowed),
        checks["nan"],
        sentinel,
        _dye_vanished(i, runs["nan"], nan_inputs, n_rows),
        tuple(columns[j] for j in sorted(columns)),  # in the output's column order
        False,
        "; ".join(notes) or None,
    )


def _crossed(
    parts: tuple[Any, Any],
    reference: list[Any],
    n_rows: int,
    cutoff: int,
    past_labels: Any,
    *,
    nan: bool,
    columns: dict[int, str],
) -> bool:
    """Whether a dyed run's allowed rows differ from the reference (X columns collected by
    position in the stage's output)."""
    hit = False
    for k, (part, ref) in enumerate(zip(parts, reference)):
        if ref is None:
            continue
        dyed = None if part is None else _allowed(part, n_rows, cutoff, past_labels)
        if dyed is None or set(dyed) != set(ref):
            hit = True  # allowed rows vanished or moved: the dye removed them
            continue
        for key, row in ref.items():
            other = dyed[key]
            if other.shape != row.shape:
                hit = True
                continue
            changed = (
                (~np.isfinite(other) & np.isfinite(row))
                if nan
                else ~((other == row) | (np.isnan(other) & np.isnan(row)))
            )
            if changed.any():
                hit = True
                if k == 0:
                    names = _matrix(part)[2]
                    columns.update((int(j), names[j]) for j in np.nonzero(changed)[0])
    return hit


def _has_nan(part: Any) -> bool:
    return part is not None and bool(np.isnan(_matrix(part)[0]).any())


def _dye_vanished(i: int, nan_run: list[Any], nan_inputs: tuple[Any, Any], n_rows: int) -> bool:
    """Whether X or y entered stage ``i`` dyed and left it undyed with every row still there."""
    if len(nan_run) <= i or isinstance(nan_run[i], BaseException):
        return False
    before = nan_inputs if i == 0 else nan_run[i - 1]
    return any(
        _has_nan(entered)
        and left is not None
        and not _has_nan(left)
        and len(_matrix(left)[0]) == n_rows
        for entered, left in zip(before, nan_run[i])
    )


def _mark_crossing(results: list[StageResult]) -> list[StageResult]:
    for index, result in enumerate(results):
        if result.sentinel_changed or result.nan_crossed:
            return [
                dataclasses.replace(r, is_crossing=True) if j == index else r
                for j, r in enumerate(results)
            ]
    return results


def _verdict(
    results: Sequence[StageResult], sentinel: float
) -> tuple[LeakageVerdict, list[Finding]]:
    findings = []
    for r in results:
        if r.dye_vanished:
            findings.append(
                Finding(
                    "dye_vanished",
                    "info" if r.sentinel_changed is False else "warning",
                    f"stage {r.name!r} received NaN dye and returned none while keeping the "
                    f"forbidden rows: it skips or fills NaN, so the NaN test alone is blind here (the "
                    f"+/-{sentinel:g} sentinel run covers it).",
                    fields={"stage": r.name},
                )
            )
    leak = next((r for r in results if r.sentinel_changed), None)
    if leak is not None:
        how = (
            "the NaN dye and the sentinel both cross"
            if leak.nan_crossed
            else "found only by the sentinel: a NaN-skipping statistic (pandas skipna, nanmean, "
            "imputers) ignored the NaN dye"
        )
        cols = f" in columns {_column_list(leak.columns)}" if leak.columns else ""
        findings.append(
            Finding(
                "leak",
                "critical",
                f"information from rows [cutoff:] reaches rows [:cutoff] at stage {leak.name!r}"
                f"{cols}; {how}.",
                remedy="fit every statistic (scalers, encoders, imputers, target means) on the "
                "training rows only, window with past-only (non-centred) windows, and split "
                "before feature engineering.",
                fields={"stage": leak.name, "index": leak.index, "columns": list(leak.columns)},
            )
        )
        return "leak", findings
    suspect = next((r for r in results if r.nan_crossed), None)
    if suspect is not None:
        findings.append(
            Finding(
                "nan_only_crossing",
                "warning",
                f"NaN dye reached allowed rows at stage {suspect.name!r}, but their values do not "
                "change when the forbidden rows change: NaN spread along a legitimate axis (NaN * 0, "
                "a masked softmax), likely a false positive.",
                remedy="inspect that stage; if it multiplies or masks the forbidden rows away, the "
                "pipeline is clean.",
                fields={"stage": suspect.name},
            )
        )
        return "suspect", findings
    if all(r.sentinel_changed is None for r in results):
        return "inconclusive", findings
    return "clean", findings


MAX_NAMED_COLUMNS = 12
"""The leak finding names up to 12 columns, then the count (the table row lists them all)."""


def _column_list(columns: tuple[str, ...]) -> str:
    """``['0', '1', '2']``, or the first three and the count when there are too many to name."""
    if len(columns) <= MAX_NAMED_COLUMNS:
        return str(list(columns))
    return str(list(columns[:3]))[:-1] + f", ... ({len(columns)} in all)]"


def _lead(verdict: LeakageVerdict, results: Sequence[StageResult]) -> str:
    crossing = next((r.name for r in results if r.is_crossing), None)
    return {
        "leak": f"leak: the future reaches past rows at stage {crossing!r}.",
        "suspect": f"NaN dye crossed at stage {crossing!r}, but the sentinel did not move.",
        "clean": "no stage lets rows [cutoff:] reach rows [:cutoff].",
        "inconclusive": "no stage's rows could be aligned or checked; see the stage notes.",
    }[verdict]
