"""The layering table of the style guide, checked by reading imports with ast."""

from __future__ import annotations

import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "torchlens_nb"

# layer -> the layers of our own code it may import
BASE = {"errors", "_jsonsafe", "_validate", "_version", "_hooks", "_interrupts", "_undo"}
"""Layer-free modules every layer may import."""
ALLOWED: dict[str, set[str]] = {
    "errors": set(),
    "_jsonsafe": set(),
    "_validate": {"errors"},
    "_version": set(),
    "_hooks": set(),
    "_interrupts": set(),
    "_undo": {"_interrupts"},
    "options": BASE | {"errors"},
    "capture": BASE | {"options"},
    "report": BASE,
    "debug": BASE | {"capture", "report", "options", "checks"},
    "checks": BASE | {"report"},
    "widgets": BASE | {"report"},
    "recipes": BASE | {"capture", "report", "options", "checks", "debug"},
    "integrations": BASE | {"checks", "report"},
    "bridge": BASE | {"debug"},
}
# The upward edges the layering allows, each imported inside the one function that needs it
# (never at import time), with the reason it exists.
LAZY_EDGES: dict[tuple[str, str], str] = {
    ("report/_display.py", "widgets"): "a report's rich display builds its panel",
    ("capture/_trace.py", "debug"): "the spec spells trace.find_nan() and trace.audit() as Trace "
    "methods; the analyses live in tl.debug",
    ("report/__init__.py", "debug"): "the spec spells tl.report.doctor, tl.report.capabilities "
    "and tl.report.flops_vs_dispatch; the analyses live in tl.debug",
    ("debug/model/_doctor.py", "widgets"): "the doctor's panel_bundles row asks the panel "
    "registry which bundles are installed (widgets/_registry.py imports no torch)",
    (
        "checks/session/_replay.py",
        "debug",
    ): "Replay.investigate() (err.investigate(), the dashboard's "
    "'Find where it was born') replays the kept batch with tl.debug.investigate: an explicit "
    "follow-up on a raised error (the session never captures)",
}


def _layer(path: pathlib.Path) -> str:
    rel = path.relative_to(PACKAGE)
    return rel.parts[0].removesuffix(".py")


def _is_type_checking_block(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.If)
        and isinstance(node.test, ast.Name)
        and node.test.id == "TYPE_CHECKING"
    )


def _imported_layers(path: pathlib.Path) -> list[tuple[str, bool]]:
    """(layer imported, is function-local) for every import of our own package."""
    tree = ast.parse(path.read_text())
    depth = len(path.relative_to(PACKAGE).parts) - 1
    found: list[tuple[str, bool]] = []

    def visit(node: ast.AST, local: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if _is_type_checking_block(child):
                continue  # type-only imports never run: they name types, not dependencies
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
        if (rel, imported) in LAZY_EDGES:
            assert is_local, f"{rel} must import {imported} inside the function that needs it"
            continue
        assert imported in ALLOWED[layer], f"{rel} ({layer}) imports {imported}"
        assert not is_local, f"{rel} imports {imported} inside a function: fix the layering"


def test_import_installs_no_hooks() -> None:
    import torch.nn.modules.module as nn_module
    from torch.overrides import _get_current_function_mode_stack

    import torchlens_nb  # noqa: F401

    assert not nn_module._global_forward_hooks and not nn_module._global_forward_pre_hooks
    assert _get_current_function_mode_stack() == []
