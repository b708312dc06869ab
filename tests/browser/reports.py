"""Real reports the panel tests render (built with torchlens_nb itself, never hand-written dicts).

Shared by the Python display tests (tests/test_display.py) and the browser tiers.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

import torchlens_nb as tl
from tests import models
from torchlens_nb.report import Exit, Finding, Report, Table, Unavailable, Where
from torchlens_nb.widgets._dashboard import live_message


class LiveFeedRecorder:
    """Stands in for ``LiveChecksWidget`` as a session's dashboard view: keeps each increment
    as the widget would send it to the browser, and the final report."""

    def __init__(self) -> None:
        self.messages: list[dict] = []
        self.final: Report | None = None

    def push(self, message: dict) -> None:
        self.messages.append(live_message(message))  # as LiveChecksWidget.push sends it

    def finish(self, report: Report) -> None:
        self.final = report


def traced_ops_report() -> tuple[Report, torch.nn.Module]:
    """A report about a real trace of ``models.mlp()``: findings that point at real ops, an
    ops table, scope notes, and exits (one runnable: ``doctor``; one to type by hand).

    Returns the model too: the ``doctor`` action holds it by weak reference, as actions must,
    so the caller keeps it alive.
    """
    model = models.mlp()
    trace = tl.trace(model, torch.randn(2, 8))
    relu = trace["relu_1"]
    second = trace["linear_2"]
    rows = [
        {
            "label": op.label,
            "func": op.func,
            "module": op.module,
            "shape": str(op.shape),
            "numel": op.numel,
            "ratio": op.numel / 32,
        }
        for op in trace
    ]
    model_ref = weakref.ref(model)
    report = Report(
        subject=f"Sequential ({len(trace)} ops)",
        status="warn",
        lead="relu_1 zeroes part of its input; linear_2 shrinks the width from 16 to 4.",
        findings=(
            Finding(
                "dead_units",
                "warning",
                "relu_1 outputs zero for some units on this batch.",
                where=Where(relu.label, relu.module, relu.file, relu.line, relu.code),
                remedy="Check the init scale of layer 0 or use LeakyReLU.",
                fields={"zero_fraction": 0.25, "units": 16, "worst": math.nan},
            ),
            Finding(
                "width_drop",
                "critical",
                "linear_2 maps 16 features to 4.",
                where=Where(second.label, second.module),
                fields={"in": 16, "out": 4},
            ),
            Finding("traced", "info", f"{len(trace)} ops recorded."),
        ),
        tables=(
            Table.from_dicts(
                "ops",
                rows,
                ("label", "func", "module", "shape", "numel", "ratio"),
                attrs={"model": "mlp", "batch": 2},
            ),
        ),
        disclosures=("One batch of 2 samples; other batches may differ.",),
        unavailable=(Unavailable("backward", "no loss was given, so gradients were not checked"),),
        exits=(
            Exit("Run doctor", "tl.report.doctor(model)", action="doctor"),
            Exit("Trace again", "tl.trace(model, x)"),
        ),
        actions={"doctor": lambda: tl.report.doctor(model_ref())},
    )
    return report, model


def big_table_report(n_rows: int = 100_000) -> Report:
    """One table of ``n_rows`` rows with a NaN in every 97th ``value`` (for kernel paging)."""
    rows = [
        (f"op_{i}", i, math.nan if i % 97 == 0 else ((i * 7919) % 1000) / 10, i % 3 == 0)
        for i in range(n_rows)
    ]
    return Report(
        subject=f"{n_rows} rows",
        status="ok",
        lead=f"{n_rows} rows to page through.",
        tables=(Table("rows", ("label", "index", "value", "even3"), rows),),
    )


@dataclass(frozen=True, kw_only=True)
class ValuesReport(Report):
    """A typed report whose ``_data()`` carries awkward floats, numpy and torch values."""

    report_type = "values"

    def _data(self) -> dict[str, Any]:
        return {
            "tensor": torch.tensor([1.0, math.nan, -math.inf]),
            "scalar": torch.tensor(2.5),
            "np": np.float32(math.inf),
            "count": np.int64(7),
        }


def awkward_values_report() -> Report:
    """NaN, +/-Inf, -0.0, huge and tiny floats, numpy scalars and tensors in every place a
    payload holds values: finding fields, table rows and table attrs, ``_data()``."""
    values = [
        math.nan,
        math.inf,
        -math.inf,
        -0.0,
        1e308,
        5e-324,
        np.float32(math.nan),
        np.int64(3),
        np.float64(-0.0),
        torch.tensor(1.5),
    ]
    rows = [{"name": f"v{i}", "value": v} for i, v in enumerate(values)]
    return ValuesReport(
        subject="awkward",
        status="found",
        lead="every kind of awkward number",
        findings=(
            Finding(
                "nonfinite",
                "critical",
                "NaN and Inf present.",
                fields={
                    "nan": math.nan,
                    "inf": math.inf,
                    "neg_zero": -0.0,
                    "np": np.float64(math.nan),
                    "t": torch.tensor([math.inf]),
                },
            ),
        ),
        tables=(
            Table.from_dicts("values", rows, ("name", "value"), attrs={"threshold": math.inf}),
        ),
    )


@dataclass(frozen=True, kw_only=True)
class MapReport(Report):
    """A report with a 4x4 float32 map for its panel (``panel_arrays``), stored as bytes."""

    report_type = "map"
    values: bytes = np.arange(16, dtype="<f4").tobytes()
    shape: tuple[int, ...] = (4, 4)

    def panel_arrays(self) -> dict[str, Any]:
        return {"map": {"dtype": "float32", "shape": self.shape, "data": self.values}}
