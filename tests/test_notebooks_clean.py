"""Committed notebooks carry no outputs, no execution counts and no widget state.

An executed notebook stores every widget model's state, bundle included (5 MB for one plotly
widget), and outputs that go stale. The one exception is nbval's reference: a cell marked
``# NBVAL_CHECK_OUTPUT`` keeps its printed text (``stdout`` only) and an execution count, which
nbval needs to compare it (``notebooks/strip.py`` writes notebooks in exactly this form).
"""

from __future__ import annotations

import json
import pathlib

import pytest

NOTEBOOKS = sorted((pathlib.Path(__file__).parent.parent / "notebooks").glob("*.ipynb"))
CHECK_MARK = "# NBVAL_CHECK_OUTPUT"
MAX_REFERENCE_CHARS = 2_000
"""A checked cell prints a few stable facts, not a report card."""


def problems(notebook: dict) -> list[str]:
    """Every way ``notebook`` (the parsed JSON) breaks the committed form."""
    found = []
    if "widgets" in notebook.get("metadata", {}):
        found.append("metadata.widgets is present")
    for index, cell in enumerate(notebook["cells"]):
        if cell["cell_type"] != "code":
            continue
        source = "".join(cell["source"])
        outputs = cell.get("outputs", [])
        if CHECK_MARK not in source:
            if outputs:
                found.append(f"cell {index} has {len(outputs)} output(s)")
            if cell.get("execution_count") is not None:
                found.append(f"cell {index} has execution_count {cell['execution_count']}")
            continue
        if not outputs or cell.get("execution_count") is None:
            found.append(
                f"cell {index} is checked but has no reference output (nbval would "
                "skip it): run notebooks/strip.py --execute"
            )
        for output in outputs:
            if (output["output_type"], output.get("name")) != ("stream", "stdout"):
                found.append(
                    f"cell {index} keeps a {output['output_type']} output; only "
                    "printed text is a reference"
                )
            elif len("".join(output["text"])) > MAX_REFERENCE_CHARS:
                found.append(f"cell {index} keeps more than {MAX_REFERENCE_CHARS} characters")
    return found


def test_the_notebook_folder_holds_the_tour_and_a_tutorial_per_capability() -> None:
    names = {path.name for path in NOTEBOOKS}
    assert {
        "00_tour.ipynb",
        "02_nan_forensics.ipynb",
        "03_gradient_health.ipynb",
        "04_training_checks.ipynb",
        "05_attention_sinks.ipynb",
        "06_autograd_graph.ipynb",
        "07_compare_and_cost.ipynb",
        "08_recipes.ipynb",
        "10_trainers.ipynb",
    } <= names


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[path.name for path in NOTEBOOKS])
def test_committed_notebook_is_stripped(path: pathlib.Path) -> None:
    assert problems(json.loads(path.read_text())) == []


def test_problems_names_outputs_counts_widgets_and_unfilled_checks() -> None:
    executed = {
        "metadata": {"widgets": {"application/vnd.jupyter.widget-state+json": {}}},
        "cells": [
            {"cell_type": "markdown", "source": ["# Title"]},
            {
                "cell_type": "code",
                "source": ["report"],
                "execution_count": 3,
                "outputs": [{"output_type": "display_data", "data": {}}],
            },
            {
                "cell_type": "code",
                "source": ["# NBVAL_CHECK_OUTPUT\n", "print(1)"],
                "execution_count": None,
                "outputs": [],
            },
            {
                "cell_type": "code",
                "source": ["# NBVAL_CHECK_OUTPUT\n", "x"],
                "execution_count": 5,
                "outputs": [{"output_type": "execute_result", "data": {}}],
            },
            {
                "cell_type": "code",
                "source": ["# NBVAL_CHECK_OUTPUT\n", "print(2)"],
                "execution_count": 6,
                "outputs": [{"output_type": "stream", "name": "stdout", "text": ["2\n"]}],
            },
        ],
    }
    assert problems(executed) == [
        "metadata.widgets is present",
        "cell 1 has 1 output(s)",
        "cell 1 has execution_count 3",
        "cell 2 is checked but has no reference output (nbval would skip it): run "
        "notebooks/strip.py --execute",
        "cell 3 keeps a execute_result output; only printed text is a reference",
    ]
