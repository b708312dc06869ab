"""Selectors ``tl.func(...)`` and ``tl.module(...)``: which ops to save, hook or probe.

A selector matches ops by function name (``func``) or by the modules an op ran inside
(``module``). Patterns are ``fnmatch`` globs; several patterns in one call, or selectors joined
with ``|``, match when any part matches.

Example:
    >>> sel = func("relu") | module("encoder.*")
    >>> sel.matches_op("relu", ())
    True
    >>> sel.matches_op("linear", ("encoder", "encoder.0"))
    True
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from functools import cached_property

from ..errors import SelectorError


@dataclass(frozen=True)
class Selector:
    """Base of the selectors; combine with ``|``."""

    kind = "base"

    def matches_op(self, func: str, module_stack: tuple[str, ...]) -> bool:
        """True when an op named ``func`` running inside ``module_stack`` is selected."""
        raise NotImplementedError

    def matches_module(self, address: str) -> bool:
        """True when the module at ``address`` is selected as a site (its output)."""
        raise NotImplementedError

    def __or__(self, other: Selector) -> Selector:
        if not isinstance(other, Selector):
            return NotImplemented
        return AnySelector((self, other))


def canonical_address(address: str) -> str:
    """The one spelling of a module address: without the ``_orig_mod`` segments that a
    ``torch.compile`` wrapper adds (``_orig_mod.0`` -> ``0``, ``block._orig_mod.fc`` ->
    ``block.fc``)."""
    if "_orig_mod" not in address:
        return address
    return ".".join(part for part in address.split(".") if part != "_orig_mod")


def _compile(patterns: tuple[str, ...], what: str) -> re.Pattern[str]:
    if not patterns:
        raise SelectorError(f"tl.{what}() needs at least one pattern, e.g. tl.{what}('relu').")
    for pattern in patterns:
        if not isinstance(pattern, str) or not pattern:
            raise SelectorError(f"tl.{what}() patterns must be non-empty strings, got {pattern!r}.")
    if what == "module":
        patterns = tuple(canonical_address(p) or p for p in patterns)
    return re.compile("|".join(f"(?:{fnmatch.translate(p)})" for p in patterns))


@dataclass(frozen=True)
class FuncSelector(Selector):
    """Selects ops by function name; ``relu`` also matches its in-place form ``relu_``."""

    patterns: tuple[str, ...]
    kind = "op"

    @cached_property
    def _regex(self) -> re.Pattern[str]:
        return _compile(self.patterns, "func")

    def matches_op(self, func: str, module_stack: tuple[str, ...]) -> bool:
        return bool(
            self._regex.match(func) or (func.endswith("_") and self._regex.match(func[:-1]))
        )

    def matches_module(self, address: str) -> bool:
        return False

    def __repr__(self) -> str:
        return f"tl.func({', '.join(map(repr, self.patterns))})"


@dataclass(frozen=True)
class ModuleSelector(Selector):
    """Selects ops that ran inside a matching module, and that module's output as a site.

    Patterns may carry the ``_orig_mod`` segments of a ``torch.compile`` wrapper
    (``_orig_mod.0``); they match the trace's spelling without them (``0``).
    """

    patterns: tuple[str, ...]
    kind = "module"

    @cached_property
    def _regex(self) -> re.Pattern[str]:
        return _compile(self.patterns, "module")

    def matches_op(self, func: str, module_stack: tuple[str, ...]) -> bool:
        return any(self._regex.match(address) for address in module_stack)

    def matches_module(self, address: str) -> bool:
        return bool(self._regex.match(address))

    def __repr__(self) -> str:
        return f"tl.module({', '.join(map(repr, self.patterns))})"


@dataclass(frozen=True)
class AnySelector(Selector):
    """Union of selectors (what ``a | b`` builds)."""

    parts: tuple[Selector, ...]
    kind = "any"

    def matches_op(self, func: str, module_stack: tuple[str, ...]) -> bool:
        return any(p.matches_op(func, module_stack) for p in self.parts)

    def matches_module(self, address: str) -> bool:
        return any(p.matches_module(address) for p in self.parts)

    def __repr__(self) -> str:
        return " | ".join(map(repr, self.parts))


def func(*patterns: str) -> FuncSelector:
    """Select ops by function name glob, e.g. ``tl.func("relu")``, ``tl.func("soft*")``."""
    selector = FuncSelector(tuple(patterns))
    _ = selector._regex  # validate now, not at first use
    return selector


def module(*patterns: str) -> ModuleSelector:
    """Select by module address glob, e.g. ``tl.module("encoder.layer.*")``."""
    selector = ModuleSelector(tuple(patterns))
    _ = selector._regex
    return selector
