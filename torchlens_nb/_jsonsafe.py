"""NaN/Inf-safe conversion of report data into JSON-ready values.

``json.dumps(to_jsonable(x), allow_nan=False)`` succeeds for every ``x`` this module accepts:
non-finite floats become ``{"$float": "nan" | "inf" | "-inf"}``, ``-0.0`` stays a number (JSON
allows it), numpy and torch scalars become Python numbers, small tensors and arrays become nested
lists of encoded numbers, and anything unknown becomes its ``repr`` string. The JS decoder in
``js/shared/payload.js`` reverses the float encoding.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Mapping
from typing import Any

FLOAT_TAG = "$float"
"""Key of the object that stands in for a non-finite float in a payload."""

MAX_INLINE_ELEMENTS = 4096
"""Tensors/arrays above this many elements are summarised instead of listed: a payload must stay
small enough to ship to a browser (the widget layer sends large arrays as binary buffers)."""


def encode_float(value: float) -> float | dict[str, str]:
    """Return ``value`` itself when finite, else the tagged stand-in object."""
    if math.isfinite(value):
        return value
    if math.isnan(value):
        return {FLOAT_TAG: "nan"}
    return {FLOAT_TAG: "inf" if value > 0 else "-inf"}


def decode_float(value: Any) -> Any:
    """Inverse of :func:`encode_float` (used by tests and by Python-side payload readers)."""
    if isinstance(value, Mapping) and set(value) == {FLOAT_TAG}:
        return float(value[FLOAT_TAG])
    return value


def to_jsonable(value: Any) -> Any:
    """Convert ``value`` into plain JSON-safe data (see the module docstring for the rules)."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, enum.Enum):
        return to_jsonable(value.value)
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return encode_float(value)
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple, set, frozenset)):
        items = sorted(value, key=repr) if isinstance(value, (set, frozenset)) else value
        return [to_jsonable(v) for v in items]
    return _array_like(value)


def _array_like(value: Any) -> Any:
    """Handle numpy/torch scalars and arrays without importing either library."""
    kind = type(value).__module__.split(".")[0]
    if kind in ("numpy", "torch"):
        shape = tuple(getattr(value, "shape", ()))
        if shape == ():
            item = value.item()
            return to_jsonable(item)
        numel = math.prod(shape)
        if numel <= MAX_INLINE_ELEMENTS:
            data = value.detach().cpu() if kind == "torch" else value
            return to_jsonable(data.tolist())
        return {
            "$array": "summary",
            "shape": list(shape),
            "dtype": str(getattr(value, "dtype", "")),
        }
    if isinstance(value, (bytes, bytearray)):
        return {"$bytes": len(value)}
    return repr(value)
