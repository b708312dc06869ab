"""Hostile tensors and the reports built from them (shared by the Python and browser payload
tests): NaN, +/-Inf, -0.0, subnormals, 1e38, int64 extremes, empty and 0-d tensors, in fp32,
fp64, fp16, bf16 and int64.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from hypothesis import strategies as st
from torch import nn

import torchlens_nb as tl
from torchlens_nb.report import Finding, Report, Table, Where

FLOAT_SPECIALS = (
    math.nan,
    math.inf,
    -math.inf,
    -0.0,
    0.0,
    1e-45,
    5e-324,
    1e-40,
    1e38,
    -1e38,
    3.4e38,
    65504.0,
    1.0,
    -2.5,
)
"""Values that break naive encoders: non-finite, signed zero, subnormal, near-max magnitudes."""
INT_SPECIALS = (2**63 - 1, -(2**63), 0, -1, 1, 2**53 + 1)
"""int64 extremes (JSON numbers, but beyond a JavaScript double's exact range)."""
FLOAT_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
SHAPES = ((), (0,), (0, 4), (1,), (3,), (2, 3), (4, 2))


@st.composite
def hostile_tensors(draw: st.DrawFn) -> torch.Tensor:
    """A tensor of one of the dtypes above, of a shape in ``SHAPES``, filled with specials."""
    shape = draw(st.sampled_from(SHAPES))
    numel = math.prod(shape)
    if draw(st.booleans()) and numel:
        values = draw(st.lists(st.sampled_from(INT_SPECIALS), min_size=numel, max_size=numel))
        return torch.tensor(values, dtype=torch.int64).reshape(shape)
    dtype = draw(st.sampled_from(FLOAT_DTYPES))
    values = draw(
        st.lists(
            st.sampled_from(FLOAT_SPECIALS) | st.floats(width=32), min_size=numel, max_size=numel
        )
    )
    return torch.tensor(values, dtype=torch.float64).to(dtype).reshape(shape)


def _trace(tensor: torch.Tensor) -> tl.Trace:
    return tl.trace(nn.Identity(), tensor.clone())


def _values_table(tensor: torch.Tensor) -> Report:
    """A generic tabular report whose cells and finding fields ARE the hostile values."""
    values = tensor.reshape(-1).tolist()
    rows = [{"index": i, "value": v, "negated": -v} for i, v in enumerate(values)]
    first = values[0] if values else None
    return Report(
        subject=f"{tuple(tensor.shape)} {tensor.dtype}",
        status="found",
        lead=f"{len(values)} values",
        tables=(
            Table.from_dicts(
                "values", rows, ("index", "value", "negated"), {"first": first, "all": values[:16]}
            ),
        ),
        findings=(
            Finding(
                "value",
                "info",
                f"first value {first!r}",
                where=Where(op="input_1"),
                fields={"first": first},
            ),
        ),
    )


def _float_param(tensor: torch.Tensor) -> nn.Module:
    return nn.ParameterDict({"w": nn.Parameter(tensor.clone(), requires_grad=False)})


BUILDERS: dict[str, Callable[[torch.Tensor], Report]] = {
    "find_nan": lambda t: _trace(t).find_nan(),
    "find_nan-live": lambda t: tl.debug.find_nan(nn.Identity(), t.clone()),
    "nonfinite_origin": lambda t: tl.debug.nonfinite_origin(_trace(t)),
    "bisect_nan": lambda t: tl.debug.bisect_nan(_trace(t)),
    "dtype_range": lambda t: tl.debug.dtype_range(_trace(t)),
    "dead_neurons": lambda t: tl.debug.dead_neurons(_trace(t)),
    "hot_path": lambda t: tl.debug.hot_path(_trace(t), by="memory"),
    "threshold": lambda t: tl.threshold(_trace(t), within=(-1.0, 1.0)),
    "dead": lambda t: tl.dead([_trace(t), _trace(t)]),
    "lineage": lambda t: tl.debug.lineage(_trace(t), "input_1"),
    "compare": lambda t: tl.debug.compare(_trace(t), _trace(torch.zeros_like(t))),
    "audit": lambda t: _trace(t).audit(),
    "param_health": lambda t: tl.debug.param_health({"t": t, "twice": t.clone()}),
    "data_sanity": lambda t: tl.recipes.data_sanity(
        (t, torch.zeros(t.shape[0] if t.dim() else 1, dtype=torch.long))
    ),
    "values_table": _values_table,
}
"""Report builders that take any hostile tensor."""

FLOAT_BUILDERS: dict[str, Callable[[torch.Tensor], Report]] = {
    "compare_params": lambda t: tl.debug.compare_params(
        _float_param(t), _float_param(torch.zeros_like(t))
    ),
    "weight_distribution": lambda t: tl.recipes.weight_distribution(_float_param(t)),
}
"""Builders that need a floating-point tensor (a parameter)."""


def reports_of(tensor: torch.Tensor) -> dict[str, Report]:
    """Every report the builders make from ``tensor``."""
    builders = dict(BUILDERS)
    if tensor.numel() == 0:  # refused: no values, no verdict (test_bad_inputs_issue29.py)
        del builders["data_sanity"]
    if tensor.is_floating_point():
        builders.update(FLOAT_BUILDERS)
    return {name: build(tensor) for name, build in builders.items()}
