"""Make notebooks committable: no outputs, no execution counts, no ``metadata.widgets``.

The one exception is the reference output nbval compares: a cell whose source contains
``# NBVAL_CHECK_OUTPUT`` keeps its ``stdout`` outputs (printed text), nothing else, and its
execution count (nbval skips the comparison for a cell without one: "unrun"). With
``--execute`` the notebook is run first (in this environment's ``python3`` kernel, from the
notebook's folder, as nbval runs it), so those references are fresh.

Usage::

    .venv/bin/python notebooks/strip.py notebooks/02_nan_forensics.ipynb          # strip only
    .venv/bin/python notebooks/strip.py --execute notebooks/*.ipynb             # run, then strip

``tests/test_notebooks_clean.py`` checks every committed notebook against the same rules.
"""

from __future__ import annotations

import argparse
import pathlib

import nbformat

CHECK_MARK = "# NBVAL_CHECK_OUTPUT"
EXECUTE_TIMEOUT_S = 600
"""Per-cell limit when executing; the slowest cell (the tour's MiniLM load) takes ~30 s."""


def strip(notebook: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Clear outputs, execution counts and widget state in place; keep checked stdout.

    ``language_info`` is reset to ``{"name": "python"}``: a run writes the interpreter's
    version there, which would change with every machine that strips the notebook.
    """
    notebook.metadata.pop("widgets", None)
    notebook.metadata["language_info"] = {"name": "python"}
    for cell in notebook.cells:
        cell.metadata.pop("execution", None)
        if cell.cell_type != "code":
            continue
        if CHECK_MARK in cell.source:
            cell.outputs = [
                nbformat.v4.new_output("stream", name=out.name, text=out.text)
                for out in cell.outputs
                if out.output_type == "stream" and out.name == "stdout"
            ]
        else:
            cell.outputs = []
        if not cell.outputs:
            cell.execution_count = None
    return notebook


def execute(notebook: nbformat.NotebookNode, folder: pathlib.Path) -> None:
    """Run every cell in a fresh ``python3`` kernel whose working directory is ``folder``."""
    from nbclient import NotebookClient

    NotebookClient(
        notebook,
        timeout=EXECUTE_TIMEOUT_S,
        kernel_name="python3",
        resources={"metadata": {"path": str(folder)}},
    ).execute()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+", type=pathlib.Path)
    parser.add_argument(
        "--execute",
        action="store_true",
        help="run the notebook first to refresh the checked outputs",
    )
    args = parser.parse_args()
    for path in args.paths:
        notebook = nbformat.read(path, as_version=4)
        if args.execute:
            execute(notebook, path.resolve().parent)
        nbformat.write(strip(notebook), path)
        print(f"{path}: stripped{' after a run' if args.execute else ''}")


if __name__ == "__main__":
    main()
