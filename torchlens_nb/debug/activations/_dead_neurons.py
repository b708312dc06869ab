"""``tl.debug.dead_neurons``: output units that are zero at every position of one trace.

Rows are the ops a module call returned (``trace.module_calls[*].output_labels``) or the
model's forward returned (``trace.output_layers``), once each, in execution order: the units of
a layer are its OUTPUT units, so the ops inside a composite activation (the tanh of a
tanh-approximated GELU written as a module, the sigmoid of ``x * sigmoid(x)``) get no row. A unit
is dead when every element of its slice has ``|x| <= max_activation``; a NaN never counts as
dead. Each layer is judged on its own output, so a live layer fed by a dead one (a Linear whose
bias keeps its outputs non-zero) is never flagged (torchlens 2.36.1 flags every layer downstream
of a dead one; tests/grad_health/test_dead_neurons.py checks that we do not).

Unit axis with ``dim=None``: the channel axis of a convolution, pooling or per-channel norm
(``ndim - k - 1`` for a ``k``-d conv/pool, 1 for batch/instance/group norm) and of every op of
the same shape that such an op feeds (directly or through same-shaped ops); otherwise the last
axis of a 2-D or 3-D output, axis 1 of a 4-D or wider one, and axis 0 of a 1-D one. An int
``dim`` forces that axis everywhere.
"""

from __future__ import annotations

import math
import re
from typing import Any

import torch

from ..._validate import check_int, check_number
from ...capture import Op, Trace
from ...capture._gc_pause import paused_gc
from ...errors import DiagnosticArgumentError
from ...report import Finding, Table
from ...report._activations import DEAD_NEURONS_COLUMNS, DeadNeuronsReport, DeadNeuronsStatus
from ...report._location import location_text
from .._blind_spots import blind_spot_disclosures, blind_spot_unavailable, unless_blind
from .._host_sync import fetch_floats
from .._values import saved_tensors, where_of
from ..lineage._row_actions import ROW_ACTION_ATTRS, row_actions

MAX_SAMPLE_IDX = 8
"""``sample_dead_idx`` lists at most this many unit indices (``dead_count`` is exact)."""
_SPATIAL = re.compile(
    r"^(?:conv|conv_transpose|max_pool|avg_pool|lp_pool|fractional_max_pool|adaptive_avg_pool|"
    r"adaptive_max_pool)([123])d$"
)
_PER_CHANNEL_NORMS = frozenset({"batch_norm", "instance_norm", "group_norm"})


def dead_neurons_rows(
    trace: Trace, *, dim: int | None = None, max_activation: float = 0.0
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The pandas-free core of :func:`dead_neurons`: ``(rows, attrs)``.

    ``rows`` are dicts with the ``DEAD_NEURONS_COLUMNS`` keys; ``attrs`` hold ``dim``,
    ``max_activation``, ``num_rows``, ``num_counted`` and ``total_dead``. Same arguments,
    errors and cost as :func:`dead_neurons`.
    """
    if not isinstance(trace, Trace):
        raise DiagnosticArgumentError(
            f"dead_neurons reads a tl.trace(...) result, got {type(trace).__name__}."
        )
    if dim is not None:
        check_int("dim", dim, expect="an int axis or None")
    check_number(
        "max_activation",
        max_activation,
        low=0,
        expect="a finite number >= 0 (0.0 means exactly zero)",
    )
    channel_axes = _channel_axes(trace)
    rows: list[dict[str, Any]] = []
    probes: list[tuple[torch.Tensor, int]] = []
    counted: list[tuple[dict[str, Any], int]] = []
    for op in _returned_ops(trace):
        row: dict[str, Any] = {
            "op": op.label,
            "module": op.module,
            "total_units": None,
            "dead_count": None,
            "dead_frac": None,
            "sample_dead_idx": (),
            "reason": "",
            "source_line": f"{op.file}:{op.line}" if op.file else None,
        }
        rows.append(row)
        axis, row["reason"] = _unit_axis(op, dim, channel_axes)
        tensors = saved_tensors(op.out) if op.has_saved else []
        if axis is None or op.shape is None:  # a shapeless op has no unit axis either
            continue
        row["total_units"] = op.shape[axis]
        if not tensors:
            row["reason"] = "not saved" if not op.has_saved else "not floating point"
            continue
        if tensors[0].numel() == 0:
            row["reason"] = "empty output"
            continue
        probes.append((tensors[0], axis))
        counted.append((row, row["total_units"]))
    ranked = [row for row in rows if row["reason"] not in ("scalar output", "")]
    if dim is not None and ranked and all(r["reason"] == "dim out of range" for r in ranked):
        ranks = sorted({len(trace[r["op"]].shape or ()) for r in ranked})
        raise DiagnosticArgumentError(
            f"dim={dim} is out of range for every layer output of this trace (ranks "
            f"{', '.join(map(str, ranks))}); pass an axis in [-{ranks[0]}, {ranks[0] - 1}], or "
            "dim=None for the per-op unit axis."
        )
    for (row, units), values in zip(counted, _dead_probes(probes, max_activation)):
        dead = int(values[0])
        row["dead_count"] = dead
        row["dead_frac"] = dead / units
        row["sample_dead_idx"] = tuple(int(i) for i in values[1 : 1 + min(dead, MAX_SAMPLE_IDX)])
    attrs = {
        "dim": dim,
        "max_activation": float(max_activation),
        "num_rows": len(rows),
        "num_counted": len(counted),
        "total_dead": sum(row["dead_count"] for row, _ in counted),
    }
    return rows, attrs


@paused_gc()
def dead_neurons(
    trace: Trace, *, dim: int | None = None, max_activation: float = 0.0
) -> DeadNeuronsReport:
    """Report, for every layer output, the units that are zero at every position.

    Args:
        trace: a trace whose module outputs were saved (``save=True`` or a selector).
        dim: force this unit axis on every op (negative counts from the end); None applies the
            per-op rules of the module docstring.
        max_activation: a unit is dead when every ``|x|`` of its slice is ``<=`` this
            (absolute, on the op's output; 0.0 means exactly zero).

    Returns:
        A :class:`~torchlens_nb.report.DeadNeuronsReport` whose table has the columns
        ``op, module, total_units, dead_count, dead_frac, sample_dead_idx, reason,
        source_line``. ``reason`` names the unit axis rule, or why a row has no count
        (``not saved``, ``not floating point``, ``scalar output``, ``dim out of range``,
        ``empty output``).

    Raises:
        DiagnosticArgumentError: ``dim`` is not an int or is out of range for every layer
            output, ``max_activation`` negative or NaN.

    Cost: one ``abs().amax`` and one sort of the unit flags per row, one host sync per device.
    One trace is one sample: aggregate runs (``tl.dead``) before a dataset-level claim.

    Example:
        >>> import torch, torchlens_nb as tl
        >>> t = tl.trace(torch.nn.ReLU(), torch.tensor([[-1.0, 2.0], [-3.0, 4.0]]))
        >>> frame = tl.debug.dead_neurons(t).to_pandas()
        >>> frame[["op", "dead_count", "sample_dead_idx"]].values.tolist()
        [['relu_1', 1, (0,)]]
    """
    rows, attrs = dead_neurons_rows(trace, dim=dim, max_activation=max_activation)
    findings = [
        Finding(
            code="dead_units",
            severity="warning",
            message=(
                f"{row['dead_count']} of {row['total_units']} units of {row['op']} "
                f"({row['reason']}) are {_zero_text(attrs)} at every position of "
                "this trace."
            ),
            where=where_of(trace[row["op"]]),
            remedy=(
                "check what drives these units negative (ReLU) or to zero; confirm on "
                "more batches with tl.dead([trace_1, trace_2, ...])."
            ),
            fields={
                "dead_count": row["dead_count"],
                "total_units": row["total_units"],
                "sample_dead_idx": row["sample_dead_idx"],
            },
        )
        for row in rows
        if row["dead_count"]
    ]
    status: DeadNeuronsStatus
    if findings:
        status = "found"
        lead = (
            f"{attrs['total_dead']} dead units in {len(findings)} of "
            f"{attrs['num_counted']} counted layer outputs."
        )
    elif attrs["num_counted"]:
        status, lead = "clean", f"no dead unit in the {attrs['num_counted']} counted layer outputs."
    else:
        status, lead = "unknown", "no layer output was saved, so no unit was counted."
    status, lead = unless_blind(status, lead, trace, "unknown")
    disclosures = [
        "one trace is one sample: a unit zero on this batch may fire on another.",
        *blind_spot_disclosures(trace),
    ]
    uncounted = attrs["num_rows"] - attrs["num_counted"]
    if uncounted:
        disclosures.append(
            f"{uncounted} of {attrs['num_rows']} layer outputs were not counted "
            "(see the reason column)."
        )
    shared = _shared_source(rows, trace)
    if shared is not None:
        disclosures.append(shared)
    return DeadNeuronsReport(
        subject=f"{trace.model_type} ({attrs['num_rows']} layer outputs)",
        status=status,
        lead=lead,
        findings=tuple(findings),
        tables=(
            Table.from_dicts(
                "dead_neurons", rows, DEAD_NEURONS_COLUMNS, {**attrs, **ROW_ACTION_ATTRS}
            ),
        ),
        disclosures=tuple(disclosures),
        unavailable=blind_spot_unavailable(trace, "dead-unit count"),
        actions=row_actions(trace),
        dim=dim,
        max_activation=attrs["max_activation"],
        num_rows=attrs["num_rows"],
        num_counted=attrs["num_counted"],
        total_dead=attrs["total_dead"],
    )


def _shared_source(rows: list[dict[str, Any]], trace: Trace) -> str | None:
    """A note when every row has the same source line, or None.

    The line recorded for an op is the first frame of the user's code; ops that run inside
    library modules (``nn.Sequential`` of ``nn.Linear``/``nn.ReLU``) all get the line that
    called the model (the ``tl.trace`` call), which names no layer: the module column does.
    """
    lines = {row["source_line"] for row in rows}
    if len(rows) < 2 or len(lines) != 1 or None in lines:
        return None
    op = trace[rows[0]["op"]]
    where = location_text(op.file, op.line) if op.file else "unknown"
    return (
        f"every row's source is {where}, the first line of your code on the way to each op "
        "(the call that ran the model): these layers run inside library modules, so the module "
        "column, not the source, says where each one runs."
    )


def _zero_text(attrs: dict[str, Any]) -> str:
    limit = attrs["max_activation"]
    return "exactly zero" if limit == 0 else f"within ±{limit:g}"


def _returned_ops(trace: Trace) -> list[Op]:
    labels = {label for call in trace.module_calls for label in call.output_labels}
    labels.update(trace.output_layers)
    return [op for op in trace.ops if op.label in labels]


def _spatial_channel_axis(op: Op) -> int | None:
    ndim = len(op.shape or ())
    match = _SPATIAL.match(op.func)
    if match:
        axis = ndim - int(match.group(1)) - 1
        return axis if axis >= 0 else None
    if op.func in _PER_CHANNEL_NORMS and ndim >= 2:
        return 1
    return None


def _channel_axes(trace: Trace) -> dict[str, int]:
    """Op label -> channel axis, for channel ops and the same-shaped ops they feed."""
    axes: dict[str, int] = {}
    for op in trace.ops:
        axis = _spatial_channel_axis(op)
        if axis is None:
            axis = next(
                (axes[p] for p in op.parents if p in axes and trace[p].shape == op.shape), None
            )
        if axis is not None:
            axes[op.label] = axis
    return axes


def _unit_axis(op: Op, dim: int | None, channel_axes: dict[str, int]) -> tuple[int | None, str]:
    ndim = len(op.shape or ())
    if ndim == 0:
        return None, "scalar output"
    if dim is not None:
        if not -ndim <= dim < ndim:
            return None, "dim out of range"
        return dim % ndim, f"axis {dim % ndim} (dim={dim})"
    if op.label in channel_axes:
        return channel_axes[op.label], f"channel axis {channel_axes[op.label]}"
    if ndim in (2, 3):
        return ndim - 1, f"last axis of {ndim}-D"
    if ndim == 1:
        return 0, "axis 0 of 1-D"
    return 1, f"axis 1 of {ndim}-D"


STACK_ELEMENTS = 1 << 22
"""Elements stacked per reduction pass (16 MiB of float32): the temporary copy stays small."""


def _dead_probes(
    probes: list[tuple[torch.Tensor, int]], max_activation: float
) -> list[list[float]]:
    """Per ``(tensor, unit axis)``: ``[dead count, first MAX_SAMPLE_IDX unit indices, dead units
    first]``. Tensors of one (device, dtype, shape, axis) are stacked and reduced together, a
    few kernels per group instead of per op (the 48-layer per-head attention trace of
    benchmarks/bench_audit.py has 9,504 layer outputs in 12 groups); one host sync per device."""
    groups: dict[tuple[Any, ...], list[int]] = {}
    for position, (tensor, axis) in enumerate(probes):
        key = (tensor.device, tensor.dtype, tuple(tensor.shape), axis)
        groups.setdefault(key, []).append(position)
    batches: list[tuple[list[int], torch.Tensor]] = []
    with torch.no_grad():
        for (_, _, shape, axis), positions in groups.items():
            size = max(math.prod(shape), 1)
            step = max(STACK_ELEMENTS // size, 1)
            for start in range(0, len(positions), step):
                chunk = positions[start : start + step]
                stacked = torch.stack([probes[p][0].detach() for p in chunk])
                others = tuple(d + 1 for d in range(len(shape)) if d != axis)
                peak = stacked.abs().amax(dim=others) if others else stacked.abs()
                dead = peak <= max_activation  # NaN compares False: never dead
                order = torch.sort(dead.to(torch.uint8), dim=1, descending=True, stable=True)
                batches.append(
                    (
                        chunk,
                        torch.cat(
                            [dead.sum(1, keepdim=True), order.indices[:, :MAX_SAMPLE_IDX]], 1
                        ),
                    )
                )
    result: list[list[float]] = [[] for _ in probes]
    for (chunk, values), flat in zip(batches, fetch_floats([v for _, v in batches])):
        width = values.shape[1]
        for row, position in enumerate(chunk):
            result[position] = flat[row * width : (row + 1) * width]
    return result
