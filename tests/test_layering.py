"""The layering table of the style guide, checked by reading imports with ast."""

from __future__ import annotations

import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "torchlens_nb"

# layer -> the layers of our own code it may import
ALLOWED: dict[str, set[str]] = {
    "errors": set(),
    "_jsonsafe": set(),
    "options": {"errors"},
    "capture": {"options", "errors"},
    "report": {"errors", "_jsonsafe"},
    "debug": {"capture", "report", "options", "errors", "checks", "_jsonsafe"},
    "checks": {"report", "errors", "_jsonsafe"},
    "widgets": {"report", "errors", "_jsonsafe"},
    "recipes": {"capture", "report", "options", "errors", "checks", "debug", "_jsonsafe"},
}
DISPLAY_EDGE = ("report/_display.py", "widgets")  # the one upward edge, inside the display call
# CheckViolationError.investigate() replays the kept batch with tl.debug.investigate: an explicit
# follow-up the user calls on a raised error, so errors.py imports debug inside that method only
# (the session never captures).
INVESTIGATE_EDGE = ("errors.py", "debug")


def _layer(path: pathlib.Path) -> str:
    rel = path.relative_to(PACKAGE)
    return rel.parts[0].removesuffix(".py")


def _imported_layers(path: pathlib.Path) -> list[tuple[str, bool]]:
    """(layer imported, is function-local) for every import of our own package."""
    tree = ast.parse(path.read_text())
    depth = len(path.relative_to(PACKAGE).parts) - 1
    found: list[tuple[str, bool]] = []

    def visit(node: ast.AST, local: bool) -> None:
        for child in ast.iter_child_nodes(node):
            is_local = local or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            if isinstance(child, ast.ImportFrom) and child.level > 0:
                up = child.level - 1
                if up >= depth:  # reaches the package root: from .. import x / from ..x import y
                    parts = (child.module or "").split(".")
                    names = [parts[0]] if child.module else [a.name for a in child.names]
                    found.extend((name, is_local) for name in names)
            elif isinstance(child, ast.ImportFrom) and (child.module or "").startswith(
                "torchlens_nb."
            ):
                found.append((child.module.split(".")[1], is_local))
            visit(child, is_local)

    visit(tree, False)
    return found


SOURCES = sorted(p for p in PACKAGE.rglob("*.py") if p.name != "__init__.py" or p.parent != PACKAGE)


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_module_imports_only_allowed_layers(path: pathlib.Path) -> None:
    layer = _layer(path)
    rel = str(path.relative_to(PACKAGE))
    for imported, is_local in _imported_layers(path):
        if imported == layer:
            continue
        if (rel, imported) == DISPLAY_EDGE:
            assert is_local, "report/_display.py must import widgets inside the display call"
            continue
        if (rel, imported) == INVESTIGATE_EDGE:
            assert is_local, "errors.py must import debug inside CheckViolationError.investigate"
            continue
        assert imported in ALLOWED[layer], f"{rel} ({layer}) imports {imported}"
        assert not is_local, f"{rel} imports {imported} inside a function: fix the layering"


def test_import_installs_no_hooks() -> None:
    import torch.nn.modules.module as nn_module
    from torch.overrides import _get_current_function_mode_stack

    import torchlens_nb  # noqa: F401

    assert not nn_module._global_forward_hooks and not nn_module._global_forward_pre_hooks
    assert _get_current_function_mode_stack() == []
