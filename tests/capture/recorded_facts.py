"""The facts a capture records, as plain JSON, and the golden files that pin them.

``facts(trace)`` lists, per op, everything the per-op path records (label, func, module and
stack, source line, parents, parameter names, argument shapes and dtypes, output shape, dtype,
device, flags, saved value, grad_fn name) plus the module calls and the trace's input/output
labels. Source lines are written so that they survive edits elsewhere: a file inside this
repository is named by its basename and the line is counted from the ``def`` line of the function
that holds it; any other file (torch, transformers) by basename and absolute line, which is why a
golden file records the transformers version it was made with.

Regenerate (only when a recorded fact is meant to change; say why in the commit)::

    .venv/bin/python -m tests.capture.recorded_facts
"""

from __future__ import annotations

import json
import linecache
import os
import pathlib
import re
from typing import Any

import torch
import transformers

import torchlens_nb as tl
from tests.capture.golden_models import GOLDEN_MODELS

GOLDEN_DIR = pathlib.Path(__file__).resolve().parent / "golden"
REPO_ROOT = str(pathlib.Path(__file__).resolve().parents[2]) + os.sep
CAPTURE = tl.options.CaptureOptions(backward_ready=True)
"""Golden captures keep grad_fns (so ``grad_fn_name`` is pinned) and save every op."""


def _line_fact(file: str | None, line: int | None, code_name: str | None) -> list[Any] | None:
    if file is None or line is None:
        return None
    if not file.startswith(REPO_ROOT) or f"{os.sep}site-packages{os.sep}" in file:
        return [os.path.basename(file), line, code_name]
    definition = re.compile(rf"\s*(async\s+)?def\s+{re.escape(code_name or '')}\s*\(")
    first = next((n for n in range(line, 0, -1) if definition.match(linecache.getline(file, n))), 0)
    return [os.path.basename(file), f"def+{line - first}", code_name]


def op_facts(op: tl.capture.Op) -> dict[str, Any]:
    """Every recorded fact of ``op`` as JSON-ready values."""
    return {
        "label": op.label,
        "func": op.func,
        "module": op.module,
        "module_stack": list(op.module_stack),
        "line": _line_fact(op.file, op.line, op.code_name),
        "parents": list(op.parents),
        "param_names": list(op.param_names),
        "arg_meta": [[list(shape), dtype] for shape, dtype in op.arg_meta],
        "shape": None if op.shape is None else list(op.shape),
        "dtype": op.dtype,
        "device": op.device,
        "num_outputs": op.num_outputs,
        "requires_grad": op.requires_grad,
        "is_view": op.is_view,
        "is_inplace": op.is_inplace,
        "is_input": op.is_input,
        "is_output": op.is_output,
        "has_saved": op.has_saved,
        "grad_fn_name": op.grad_fn_name,
    }


SAVE_FACTS = ("has_saved", "grad_fn_name")
"""Facts that depend on ``save`` / ``backward_ready``; a save=False capture records the rest."""


def facts(trace: tl.capture.Trace) -> dict[str, Any]:
    """The op list and module calls of ``trace`` as plain data."""
    return {
        "ops": [op_facts(op) for op in trace],
        "module_calls": [
            [c.address, c.type_name, c.first_op, c.last_op, list(c.output_labels)]
            for c in trace.module_calls
        ],
        "input_layers": list(trace.input_layers),
        "output_layers": list(trace.output_layers),
    }


def capture_facts(name: str, *, save: bool = True) -> dict[str, Any]:
    """Facts of the golden model ``name`` captured now (``save`` True uses ``CAPTURE``)."""
    model, inputs = GOLDEN_MODELS[name]()
    options = CAPTURE if save else tl.options.CaptureOptions()
    return facts(tl.trace(model, inputs, save=save, capture=options))


def golden_path(name: str) -> pathlib.Path:
    return GOLDEN_DIR / f"{name}.json"


def write_golden(name: str) -> None:
    """Write ``golden/<name>.json``: one op per line so a diff names the op that changed."""
    recorded = capture_facts(name)
    header = {"torch": torch.__version__, "transformers": transformers.__version__}
    lines = ["{", f'"versions": {json.dumps(header)},']
    for key in ("module_calls", "input_layers", "output_layers"):
        lines.append(f'"{key}": {json.dumps(recorded[key])},')
    lines.append('"ops": [')
    lines.append(",\n".join(json.dumps(op) for op in recorded["ops"]))
    lines.append("]}")
    golden_path(name).write_text("\n".join(lines) + "\n")


def read_golden(name: str) -> dict[str, Any]:
    return json.loads(golden_path(name).read_text())


if __name__ == "__main__":
    for case in GOLDEN_MODELS:
        write_golden(case)
        print(f"wrote {golden_path(case)}")
