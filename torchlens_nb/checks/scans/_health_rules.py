"""The rules that turn scan rows into findings (shared by ``param_health`` and ``param_scan``).

Pure functions of :class:`~torchlens_nb.report._checks.ParamHealthRow` values: no tensor is read
here. The rules and their thresholds are documented in ``_param_health``.
"""

from __future__ import annotations

from ...report import Finding, Where
from ...report._checks import ParamHealthRow


def health_findings(
    rows: list[ParamHealthRow], max_fraction: float, subnormal_fraction_threshold: float
) -> list[Finding]:
    """Findings for scanned rows, in row order, one per (tensor, rule) that fires."""
    found: list[Finding] = []
    for row in rows:
        if row.status != "scanned":
            continue
        where = Where(module=row.name.rpartition(".")[0]) if row.kind != "tensor" else None
        base = {"tensor": row.name, "dtype": row.dtype, "numel": row.numel}
        nonfinite = row.nan_count + row.posinf_count + row.neginf_count
        if nonfinite:
            found.append(
                Finding(
                    "param_nonfinite",
                    "critical",
                    f"{row.name} holds {row.nan_count} NaN, {row.posinf_count} +Inf and "
                    f"{row.neginf_count} -Inf of {row.numel} values.",
                    where=where,
                    remedy="Restore this tensor from the last clean checkpoint; to find where the "
                    "value was born, use tl.debug.nonfinite_origin on the batch that made it.",
                    fields={
                        **base,
                        "code": "param_nonfinite",
                        "nan_count": row.nan_count,
                        "posinf_count": row.posinf_count,
                        "neginf_count": row.neginf_count,
                    },
                )
            )
        if row.out_of_bounds_count:
            low, high = row.bounds or (None, None)
            found.append(
                Finding(
                    "param_out_of_bounds",
                    "warning",
                    f"{row.name} has {row.out_of_bounds_count} finite value(s) outside the declared "
                    f"[{low:g}, {high:g}] (range seen {row.finite_min:g} .. {row.finite_max:g}).",
                    where=where,
                    remedy="Check the update that moved it, or widen the declaration.",
                    fields={
                        **base,
                        "code": "param_out_of_bounds",
                        "bounds": [low, high],
                        "out_of_bounds_count": row.out_of_bounds_count,
                    },
                )
            )
        if row.headroom_fraction is not None and row.headroom_fraction > max_fraction:
            found.append(
                Finding(
                    "dtype_headroom_low",
                    "warning",
                    f"{row.name}: largest magnitude {row.absmax:.4g} is "
                    f"{row.headroom_fraction:.1%} of {row.dtype}'s max {row.dtype_max:.4g}; "
                    f"a {1 / row.headroom_fraction:.3g}x growth overflows.",
                    where=where,
                    remedy="Keep this tensor in a wider dtype (float32 master weights) or rescale it.",
                    fields={
                        **base,
                        "code": "dtype_headroom_low",
                        "absmax": row.absmax,
                        "headroom_fraction": row.headroom_fraction,
                        "max_fraction": max_fraction,
                    },
                )
            )
        if row.numel and row.subnormal_count / row.numel > subnormal_fraction_threshold:
            fraction = row.subnormal_count / row.numel
            found.append(
                Finding(
                    "subnormal_heavy",
                    "warning",
                    f"{row.name}: {fraction:.1%} of its values are subnormal ({row.dtype}); they are "
                    "slow on many CPUs and flushed to zero where FTZ is on.",
                    where=where,
                    remedy="Check for a collapsing scale (weight decay on an unused tensor) or "
                    "store it in a wider dtype.",
                    fields={
                        **base,
                        "code": "subnormal_heavy",
                        "subnormal_fraction": fraction,
                        "threshold": subnormal_fraction_threshold,
                    },
                )
            )
        if row.fill is not None and row.shape is not None and len(row.shape) >= 2:
            value = 0.0 if row.fill == "all_zero" else row.finite_min
            found.append(
                Finding(
                    "suspicious_fill",
                    "warning",
                    f"{row.name} ({'x'.join(map(str, row.shape))}) holds one value everywhere "
                    f"({row.fill}, {value}).",
                    where=where,
                    remedy="A matrix with one value has no symmetry broken: check its "
                    "initialisation or the step that wrote it.",
                    fields={**base, "code": "suspicious_fill", "fill": row.fill, "value": value},
                )
            )
    return found
