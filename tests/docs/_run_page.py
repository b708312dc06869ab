"""Run one documentation page's Python blocks in order, in this fresh process, as Jupyter would.

``python tests/docs/_run_page.py PAGE.md``: each block is one cell of an IPython shell (the
last expression is displayed through the report's ``_repr_mimebundle_``, ``display`` is
defined), so a page runs exactly when a reader pasting its blocks into a fresh notebook would
see no error. A stated value (``_page_blocks.stated_values``) that differs from what its line
evaluates to is an error too. Exit status 0 when every block ran; otherwise 1, with the page
line of the failing block and its traceback on stderr.
"""

from __future__ import annotations

import ast
import pathlib
import sys

from IPython.core.interactiveshell import InteractiveShell

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import _page_blocks

CHECK = "_docs_stated_value_"


class StatedValueError(AssertionError):
    """A line's value differs from the literal its comment states."""


def _check(value: object, stated: str, line: int) -> object:
    expected = ast.literal_eval(stated)
    if value != expected:
        raise StatedValueError(f"block line {line}: the comment states {stated}, got {value!r}")
    return value


def main(path: pathlib.Path) -> int:
    shell = InteractiveShell.instance(colors="nocolor")
    shell.user_ns[CHECK] = _check
    for number, block in enumerate(_page_blocks.page_blocks(path), start=1):
        result = shell.run_cell(_page_blocks.with_checks(block.source, CHECK), store_history=False)
        if not result.success:
            print(f"{path.name}: block {number} (page line {block.line}) failed", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(pathlib.Path(sys.argv[1])))
