"""Every public name has a reference entry, and every report field a rendered description.

Public names: the ``__all__`` of ``tl``, ``tl.debug``, ``tl.recipes``, ``tl.report``,
``tl.options``, ``tl.errors`` and ``tl.integrations.*``, plus the analyses ``tl.report`` serves
by name (``doctor``, ``capabilities``, ``flops_vs_dispatch``). A name has an entry when the built
API pages carry an anchor for it, or for the same object under another public spelling
(``tl.debug.CheckViolationError`` is documented once, under ``tl.errors``). Report fields: every
field of every dataclass ``tl.report`` exports has an entry, and a description (an attribute
docstring) unless it is one of the fields listed in ``fields_without_description.txt``, a list
that may only shrink: a new field without a docstring fails, and so does a listed field that
has one now. No description shows a first clause cut off as "Type: ...".
"""

from __future__ import annotations

import dataclasses
import html
import importlib
import inspect
import pathlib
import re
from typing import Any

import pytest

pytestmark = pytest.mark.docs

MODULES = (
    "torchlens_nb",
    "torchlens_nb.debug",
    "torchlens_nb.recipes",
    "torchlens_nb.report",
    "torchlens_nb.options",
    "torchlens_nb.errors",
    "torchlens_nb.integrations",
    "torchlens_nb.integrations.transformers",
    "torchlens_nb.integrations.lightning",
)
SERVED_BY_NAME = {"torchlens_nb.report": ("capabilities", "doctor", "flops_vs_dispatch")}
"""Names ``torchlens_nb.report.__getattr__`` serves (the spec spells them under ``tl.report``)."""

DEBT = pathlib.Path(__file__).with_name("fields_without_description.txt")
"""Report fields that still have no attribute docstring (only ever shrinks: see the test)."""

_ENTRY = re.compile(r'<dt class="sig sig-object py" id="([^"]+)">')
_MODULE_ANCHOR = re.compile(r'id="module-([^"]+)"')


def _public_names() -> list[tuple[str, str]]:
    names = []
    for module_name in MODULES:
        module = importlib.import_module(module_name)
        for name in [*module.__all__, *SERVED_BY_NAME.get(module_name, ())]:
            names.append((module_name, name))
    return names


def _resolve(dotted: str) -> Any:
    """The object an anchor documents; None for one that is no attribute of its class (an
    instance attribute such as ``SinkProbe.fused_attention``)."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            value: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for part in parts[cut:]:
            value = getattr(value, part, None)
        return value
    return None


def _entries(site: pathlib.Path) -> dict[str, str]:
    """Anchor id -> the HTML of its description (up to the next entry), over the API pages."""
    entries: dict[str, str] = {}
    for page in (site / "api").glob("*.html"):
        text = page.read_text(encoding="utf-8")
        matches = list(_ENTRY.finditer(text))
        for match, following in zip(matches, [*matches[1:], None], strict=True):
            end = following.start() if following else len(text)
            entries[match.group(1)] = text[match.end() : end]
        for module in _MODULE_ANCHOR.findall(text):
            entries[module] = ""
    return entries


def _description(body: str) -> str:
    """The text of an entry's own description (before any nested member list)."""
    own = body.split("</dt>", 1)[-1].split('<dl class="py', 1)[0]
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", own)).split())


def _field_anchors() -> list[str]:
    """The anchor each field of the dataclasses ``tl.report`` exports is documented under: its
    defining class, or, for a field of a private mixin (``ScanFields``), each public class that
    inherits it (``docs/api/report.md`` lists inherited members up to ``Report``)."""
    report = importlib.import_module("torchlens_nb.report")
    anchors = set()
    for name in report.__all__:
        cls = getattr(report, name)
        if not (inspect.isclass(cls) and dataclasses.is_dataclass(cls)):
            continue
        for field in dataclasses.fields(cls):
            owner = next(c for c in cls.__mro__ if field.name in vars(c).get("__annotations__", {}))
            public = owner if getattr(report, owner.__name__, None) is owner else cls
            anchors.add(f"torchlens_nb.report.{public.__name__}.{field.name}")
    return sorted(anchors)


def test_every_public_name_has_an_entry(site: pathlib.Path) -> None:
    entries = _entries(site)
    documented = [value for value in map(_resolve, entries) if value is not None]
    missing = []
    for module_name, name in _public_names():
        value = getattr(importlib.import_module(module_name), name)
        if f"{module_name}.{name}" in entries:
            continue
        if inspect.ismodule(value) and value.__name__ in entries:
            continue
        if (inspect.isclass(value) or callable(value)) and any(value is d for d in documented):
            continue
        missing.append(f"{module_name}.{name}")
    assert missing == [], f"{len(missing)} public names have no reference entry: {missing}"


def test_every_report_field_has_an_entry_and_a_description(site: pathlib.Path) -> None:
    entries = _entries(site)
    anchors = _field_anchors()
    assert len(anchors) > 500
    without_entry = [anchor for anchor in anchors if anchor not in entries]
    assert without_entry == [], f"{len(without_entry)} report fields have no entry: {without_entry}"
    without_description = {anchor for anchor in anchors if not _description(entries[anchor])}
    known = set(DEBT.read_text(encoding="utf-8").split())
    assert sorted(without_description - known) == [], (
        "report fields without an attribute docstring (write one under the field)"
    )
    assert sorted(known - without_description) == [], (
        f"documented now: remove these lines from {DEBT.name}"
    )


def test_no_attribute_description_is_cut_into_a_type(site: pathlib.Path) -> None:
    # napoleon reads "``flagged``: sink heads ..." as type ``flagged``; docs/conf.py undoes it
    garbled = [
        anchor
        for anchor, body in _entries(site).items()
        if re.search(r'<dt class="field-\w+">Type<', body.split('<dl class="py', 1)[0])
    ]
    assert garbled == []


def test_the_attention_status_reads_as_one_sentence(site: pathlib.Path) -> None:
    body = _entries(site)["torchlens_nb.report.AttentionSinksReport.status"]
    assert _description(body).startswith("flagged : sink heads or outlier dimensions were found")
