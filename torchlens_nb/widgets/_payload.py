"""What a panel receives: the report's payload with bounded tables, and its arrays as bytes.

``panel_payload(report)`` is ``report.to_dict()`` with every table cut to :data:`MAX_TABLE_ROWS`
rows (``total_rows`` keeps the true count; the panel pages the rest through the kernel) and the
findings cut to :data:`MAX_FINDINGS` (``findings_total`` keeps the count), plus ``locations``:
the notebook cells among the payload's source files, by the name IPython gives them in
tracebacks (``{"/tmp/ipykernel_1/123.py": "Cell In[3]"}``), so a panel shows "Cell In[3], line 9"
where the payload keeps the real file (``report/_location.py``).

Arrays travel as binary buffers, never JSON lists. A report that has arrays for its panel
defines ``panel_arrays(self) -> Mapping[str, array-like]`` (numpy arrays, nested sequences, or
``{"dtype", "shape", "data": bytes}``); :func:`encode_array` turns each into
``{"dtype", "shape", "data": bytes}`` with dtype ``float32``, ``float16`` or ``uint8`` (numpy
arrays of any other dtype are cast to float32).
Above :data:`MAX_ARRAY_BYTES` in all, :func:`panel_arrays` warns and downsamples by block means.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from ..errors import ReportOptionError, TorchlensNbWarning
from ..report import Table
from ..report._location import cell_names

if TYPE_CHECKING:
    import numpy

    from ..report import Report

MAX_TABLE_ROWS = 200
"""Rows of each table inside a payload. 200 rows of 8 columns is ~40 KB of JSON and draws in a
few milliseconds; more is paged from pandas on request, so 100k rows never travel at once."""

MAX_FINDINGS = 200
"""Findings inside a payload; the card and ``report.findings`` keep them all."""

MAX_ARRAY_BYTES = 8 * 2**20
"""All arrays of one panel together. 8 MiB is a 1448x1448 float32 map: more is more pixels than
a notebook cell shows, and every view of the widget re-sends its state."""

ARRAY_DTYPES = ("float32", "float16", "uint8")
"""The dtypes panels decode (JavaScript typed arrays; float16 is widened in the browser)."""


def panel_payload(report: Report) -> dict[str, Any]:
    """``report.to_dict()`` bounded for a panel (see the module docstring).

    A report with a table over the bound is copied with the shipped rows only before encoding
    (``dataclasses.replace``), so a subclass's ``_data()`` must not depend on its tables' rows.
    """
    if any(len(t.rows) > MAX_TABLE_ROWS for t in report.tables):
        # Encode only the rows that ship: to_dict() of a 100k-row table costs ~0.5 s.
        slim = tuple(
            Table(t.name, t.columns, t.rows[:MAX_TABLE_ROWS], t.attrs) for t in report.tables
        )
        payload = dataclasses.replace(report, tables=slim).to_dict()
        for entry, table in zip(payload["tables"], report.tables):
            entry["total_rows"] = len(table.rows)
    else:
        payload = report.to_dict()
    if len(payload["findings"]) > MAX_FINDINGS:
        payload["findings_total"] = len(payload["findings"])
        payload["findings"] = payload["findings"][:MAX_FINDINGS]
    payload["locations"] = cell_names(_file_candidates(payload))
    return payload


def _file_candidates(value: Any) -> Iterator[str]:
    """Every string of a payload that could name a source file: the string itself, and the
    part before ``:<line>`` (tables spell locations ``file:line``). Lazy: outside IPython
    ``cell_names`` reads none of it."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            yield item
            head, _, tail = item.rpartition(":")
            if head and tail.isdigit():
                yield head
        elif isinstance(item, dict):
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)


def encode_array(
    values: Any, dtype: str = "float32", shape: tuple[int, ...] | None = None
) -> dict[str, Any]:
    """One array as ``{"dtype", "shape", "data": bytes}`` (little-endian) for a panel.

    Args:
        values: a numpy array, nested sequences of numbers, or raw ``bytes`` (then ``shape``
            is required and the bytes must already be ``dtype``, little-endian).
        dtype: ``"float32"``, ``"float16"`` or ``"uint8"``.
        shape: the shape, when ``values`` is bytes; otherwise taken from the array.

    Raises:
        ReportOptionError: unsupported dtype, or bytes whose length does not match the shape.

    Example:
        >>> encode_array([[0.5, 1.0]], "float32")["shape"]
        [1, 2]
    """
    import numpy as np

    if dtype not in ARRAY_DTYPES:
        raise ReportOptionError(
            f"panel arrays are {ARRAY_DTYPES}, got dtype {dtype!r}; "
            f"cast the data first (e.g. float64 -> float32)."
        )
    if isinstance(values, (bytes, bytearray, memoryview)):
        if shape is None:
            raise ReportOptionError(
                "encode_array(bytes) needs shape=...; the bytes alone do not "
                "say how many dimensions they hold."
            )
        expected = math.prod(shape) * np.dtype(dtype).itemsize
        if len(values) != expected:
            raise ReportOptionError(
                f"{len(values)} bytes for shape {tuple(shape)} {dtype} (expected {expected})."
            )
        return {"dtype": dtype, "shape": list(shape), "data": bytes(values)}
    array = np.asarray(values, dtype=np.dtype(dtype).newbyteorder("<"))
    return {"dtype": dtype, "shape": list(array.shape), "data": array.tobytes()}


def panel_arrays(report: Report) -> dict[str, dict[str, Any]]:
    """The report's ``panel_arrays()`` encoded, downsampled to fit :data:`MAX_ARRAY_BYTES`."""
    declared = getattr(report, "panel_arrays", None)
    if declared is None:
        return {}
    arrays = {name: _spec(value) for name, value in declared().items()}
    total = sum(len(spec["data"]) for spec in arrays.values())
    if total <= MAX_ARRAY_BYTES:
        return arrays
    shrunk = {name: _downsample(spec, MAX_ARRAY_BYTES / total) for name, spec in arrays.items()}
    changes = ", ".join(
        f"{n} {tuple(arrays[n]['shape'])} -> {tuple(s['shape'])}"
        for n, s in shrunk.items()
        if s["shape"] != arrays[n]["shape"]
    )
    warnings.warn(
        f"{report.report_type} panel arrays hold {total} bytes, above MAX_ARRAY_BYTES="
        f"{MAX_ARRAY_BYTES}; downsampled by block means ({changes}). The report keeps the "
        f"full data.",
        TorchlensNbWarning,
        stacklevel=2,
    )
    return shrunk


def _spec(value: Any) -> dict[str, Any]:
    if isinstance(value, Mapping) and "data" in value:
        return encode_array(
            value["data"],
            value.get("dtype", "float32"),
            tuple(value["shape"]) if "shape" in value else None,
        )
    dtype = str(getattr(value, "dtype", "float32"))
    return encode_array(value, dtype if dtype in ARRAY_DTYPES else "float32")


def _downsample(spec: dict[str, Any], fraction: float) -> dict[str, Any]:
    """Shrink every axis by the same whole factor so the array keeps about ``fraction``."""
    import numpy as np

    shape = tuple(spec["shape"])
    if not shape:
        return spec
    factor = math.ceil((1 / fraction) ** (1 / len(shape)))
    array = np.frombuffer(spec["data"], dtype=np.dtype(spec["dtype"]).newbyteorder("<"))
    reduced = _block_mean(array.reshape(shape).astype(np.float32), factor)
    if spec["dtype"] == "uint8":
        reduced = np.rint(reduced)
    out = encode_array(reduced, spec["dtype"])
    out["downsampled_from"] = list(shape)
    return out


def _block_mean(array: numpy.ndarray, factor: int) -> numpy.ndarray:
    """Mean over ``factor``-wide blocks along every axis (edge blocks padded by repetition).

    A mean keeps a NaN visible (it propagates), where striding could step over it.
    """
    import numpy as np

    pad = [(0, (-n) % factor) for n in array.shape]
    padded = np.pad(array, pad, mode="edge")
    blocks = []
    for n in padded.shape:
        blocks += [n // factor, factor]
    return padded.reshape(blocks).mean(axis=tuple(range(1, 2 * array.ndim, 2)))
