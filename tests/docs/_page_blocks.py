"""The Python blocks of a Markdown page, and the values its comments state.

A page's ```` ```python ```` fences are read in page order. A top-level expression line whose
trailing comment is a Python literal (``report.frontier  # ('linear_3',)``) states a value: the
runner checks it against what the line evaluates to, so the prose's numbers come from the code
the page runs. Any other comment (``# the panel``) is prose and is not checked.
"""

from __future__ import annotations

import ast
import dataclasses
import io
import pathlib
import re
import tokenize

_FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>[^\s`]*)\s*$")


@dataclasses.dataclass(frozen=True)
class Block:
    """One fenced Python block: its source and the page line its first source line is on."""

    source: str
    line: int


def python_blocks(text: str) -> list[Block]:
    """Every ```` ```python ```` block of a Markdown text, in order (other languages skipped)."""
    blocks: list[Block] = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        end = index + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        if opening["lang"] in ("python", "py"):
            indent = len(opening["indent"])
            body = "\n".join(line[indent:] for line in lines[index + 1 : end])
            blocks.append(Block(source=body + "\n", line=index + 2))
        index = end + 1
    return blocks


def stated_values(source: str) -> dict[int, str]:
    """Line number (1-based, in ``source``) -> the literal (as source) its trailing comment states.

    Only lines that hold a whole top-level expression statement count.
    """
    comments: dict[int, str] = {}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            comments[token.start[0]] = token.string[1:].strip()
    stated: dict[int, str] = {}
    for statement in ast.parse(source).body:
        if not isinstance(statement, ast.Expr) or statement.lineno != statement.end_lineno:
            continue
        comment = comments.get(statement.lineno)
        if comment is None:
            continue
        try:
            ast.literal_eval(comment)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
        stated[statement.lineno] = comment
    return stated


def with_checks(source: str, check_name: str) -> str:
    """``source`` with each stated-value line wrapped as ``check_name(expr, literal, line)``.

    The call returns the expression's value, so a checked last line still displays it.
    """
    stated = stated_values(source)
    tree = ast.parse(source)
    for statement in tree.body:
        if isinstance(statement, ast.Expr) and statement.lineno in stated:
            statement.value = ast.Call(
                func=ast.Name(id=check_name, ctx=ast.Load()),
                args=[
                    statement.value,
                    ast.Constant(value=stated[statement.lineno]),
                    ast.Constant(value=statement.lineno),
                ],
                keywords=[],
            )
    return ast.unparse(ast.fix_missing_locations(tree)) + "\n"


def page_blocks(path: pathlib.Path) -> list[Block]:
    """The Python blocks of the page at ``path``."""
    return python_blocks(path.read_text(encoding="utf-8"))
