"""The one report model every torchlens_nb diagnostic returns.

A :class:`Report` is frozen plain data (str, int, float, bool, None, tuples, read-only mappings
and frozen dataclasses of those): it never holds a tensor, module or optimizer, so it is cheap to
keep and pins nothing. Its views are lowerings of that one form:

* ``card()`` / ``str(report)``: bounded text (lead line, at most five findings, the exact
  remainder, the exits);
* ``to_dict()`` / ``to_json()``: the payload envelope the panels render from, JSON-safe
  (``json.dumps(report.to_dict(), allow_nan=False)`` always succeeds);
* ``to_pandas()``: the primary table of a tabular report (a report HAS a table, it never IS one);
* the rich display (``report/_display.py``): an anywidget panel with the card as fallback.

Follow-up work a panel can ask for (the next ring of a lineage, the next page of a table, an exit
button) goes through ``actions``: named callables that return another :class:`Report`. They are
excluded from equality, repr and ``to_dict()`` and must hold their live objects (traces, models)
by weak reference, so a report never keeps a model alive.
"""

from __future__ import annotations

import inspect
import json
import operator
import os
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import Field, dataclass, field
from dataclasses import fields as dataclass_fields
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from .._jsonsafe import to_jsonable
from .._validate import check_int
from ..errors import ReportOptionError
from . import _display
from ._actions import unavailable_actions
from ._location import cell_names, location_text
from ._status import Tone, ToneRule, printable, resolve_tone, status_phrase, tones

if TYPE_CHECKING:
    import pandas

SCHEMA = "torchlens_nb.report/1"
"""Payload schema id; bump the suffix on any incompatible change of the envelope."""

Severity = Literal["critical", "warning", "info"]
SEVERITY_ORDER: Mapping[str, int] = types.MappingProxyType({"critical": 0, "warning": 1, "info": 2})
MAX_CARD_FINDINGS = 5
"""The card shows at most this many findings, then the exact count of the rest."""


def frozen_mapping(data: Mapping[str, Any] | None = None) -> Mapping[str, Any]:
    """Return a read-only copy of ``data`` (nested dicts and lists are frozen too)."""
    return types.MappingProxyType({str(k): _freeze(v) for k, v in (data or {}).items()})


def _freeze(value: Any) -> Any:
    if isinstance(value, Mapping):
        return frozen_mapping(value)
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    return value


@dataclass(frozen=True)
class Where:
    """Where a finding points: any of op label, module address and source location."""

    op: str | None = None
    """Label of the op in its trace, e.g. ``"log_1"``."""
    module: str | None = None
    """Innermost module address, e.g. ``"encoder.layer.0.attn"`` (``""`` is the root module)."""
    file: str | None = None
    """Source file of the first user frame."""
    line: int | None = None
    """Line number in ``file``."""
    code: str | None = None
    """The text of that source line, stripped."""

    def text(self) -> str:
        """One-line rendering: ``op in module at file:line``."""
        parts = []
        if self.op:
            parts.append(self.op)
        if self.module:
            parts.append(f"in {self.module}")
        if self.file:
            parts.append(f"at {location_text(self.file, self.line)}")
        return " ".join(parts)


@dataclass(frozen=True)
class Finding:
    """One fact a diagnostic established, with where it is and what to do about it."""

    code: str
    """Stable machine-readable id, e.g. ``"nonfinite_origin"``; never parse ``message``."""
    severity: Severity
    """``critical`` (results are wrong), ``warning`` (likely wrong), ``info`` (worth knowing)."""
    message: str
    """One or two sentences for a person."""
    where: Where | None = None
    """What it points at, if anything."""
    remedy: str | None = None
    """What to do next."""
    fields: Mapping[str, Any] = field(default_factory=frozen_mapping)
    """Structured facts behind the message (JSON-safe values)."""

    def __post_init__(self) -> None:
        if self.severity not in SEVERITY_ORDER:
            raise ReportOptionError(
                f"severity must be one of {sorted(SEVERITY_ORDER)}, got {self.severity!r}."
            )
        object.__setattr__(self, "fields", frozen_mapping(self.fields))


@dataclass(frozen=True)
class Unavailable:
    """A check that could not run, and why (always shown: never counted as a pass)."""

    check: str
    """The check that could not run (e.g. ``"magnitude"``)."""
    reason: str
    """Why, and what would make it possible, in one sentence."""
    code: str = "unavailable"
    """A stable word for the reason, to branch on instead of the message."""


@dataclass(frozen=True)
class Exit:
    """A suggested next step: the call to type, and optionally the action that runs it."""

    label: str
    """Button text, e.g. ``"Show lineage"``."""
    code: str
    """The Python spelling of the follow-up, shown to the user."""
    action: str | None = None
    """Name in ``Report.actions`` that runs it from a panel, or None when only typed by hand."""
    args: Mapping[str, Any] = field(default_factory=frozen_mapping)
    """Arguments the panel sends with ``action``."""
    is_primary: bool = False
    """The step the report is there to offer (a raised session's replay): panels show it right
    under the lead instead of after the tables."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "args", frozen_mapping(self.args))


@dataclass(frozen=True)
class Table:
    """A named table: column names and rows of plain values, plus table-level facts."""

    name: str
    """The table's name, unique within its report (``report.table(name)``)."""
    columns: tuple[str, ...]
    """Column names, in display order."""
    rows: tuple[tuple[Any, ...], ...]
    """One tuple of plain values per row, in the order of ``columns``."""
    attrs: Mapping[str, Any] = field(default_factory=frozen_mapping)
    """Facts about the whole table (thresholds, coverage); copied to ``DataFrame.attrs``."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "columns", tuple(self.columns))
        object.__setattr__(self, "rows", tuple(tuple(r) for r in self.rows))
        object.__setattr__(self, "attrs", frozen_mapping(self.attrs))
        width = len(self.columns)
        for index, row in enumerate(self.rows):
            if len(row) != width:
                raise ReportOptionError(
                    f"table {self.name!r} row {index} has {len(row)} values for {width} columns."
                )

    @classmethod
    def from_dicts(
        cls,
        name: str,
        rows: Sequence[Mapping[str, Any]],
        columns: Sequence[str],
        attrs: Mapping[str, Any] | None = None,
    ) -> Table:
        """Build a table from row dicts, taking ``columns`` in that order (a column a row lacks
        is None).

        One ``itemgetter`` per row when every row has every column (21,171 rows of 13 columns:
        9 ms against 22 ms for a ``get`` per cell).
        """
        names = tuple(columns)
        try:
            if len(names) < 2:
                raise KeyError(names)  # itemgetter of one key returns a scalar, not a tuple
            pick = operator.itemgetter(*names)
            values = tuple(pick(r) for r in rows)
        except KeyError:
            values = tuple(tuple(r.get(c) for c in names) for r in rows)
        return cls(name, names, values, frozen_mapping(attrs))

    def dicts(self) -> list[dict[str, Any]]:
        """The rows as plain dicts (a fresh list each call)."""
        return [dict(zip(self.columns, row)) for row in self.rows]

    def to_pandas(self) -> pandas.DataFrame:
        """The table as a DataFrame whose ``attrs`` carry the table facts.

        A ``file`` column names a notebook cell as IPython does (``Cell In[3]``), not by the
        temp file the kernel compiled it to, as the card and the panels do; the table itself
        keeps the real file.
        """
        import pandas as pd

        frame = pd.DataFrame(list(self.rows), columns=list(self.columns))
        if "file" in self.columns:
            named = cell_names(f for f in frame["file"] if isinstance(f, str))
            if named:
                frame["file"] = frame["file"].map(lambda f: named.get(f, f))
        frame.attrs.update(_thaw(self.attrs))
        return frame


def _thaw(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _thaw(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [_thaw(v) for v in value]
    return value


PAYLOAD_EXCLUDED: Mapping[str, Any] = types.MappingProxyType({"payload": False})
"""Field metadata of a report field that does not travel in the payload's ``data`` (it reaches
the panel another way, e.g. as a table, or is too large): ``field(metadata=PAYLOAD_EXCLUDED)``."""


def payload_head(limit: int) -> Mapping[str, Any]:
    """Field metadata: the payload carries the first ``limit`` items of this tuple field (a
    payload stays small; the report keeps every item). Counts travel as properties."""
    return types.MappingProxyType({"payload_head": limit})


def payload_as(name: str) -> Mapping[str, Any]:
    """Field metadata: the field travels as the value of the report's property ``name`` (a
    summary of the same facts, e.g. per-layer statistics instead of every dimension)."""
    return types.MappingProxyType({"payload_as": name})


@dataclass(frozen=True, kw_only=True)
class Report:
    """Base of every torchlens_nb report; subclasses add typed fields and set ``report_type``.

    Subclasses are ``@dataclass(frozen=True, kw_only=True)``; each sets ``report_type``, narrows
    ``status`` to a ``Literal`` of its statuses and maps each to a tone in ``status_tones``.
    The payload's ``data`` member is derived from the subclass's own fields (marked ones
    excluded or cut, see :data:`PAYLOAD_EXCLUDED` and :func:`payload_head`) plus the properties
    named in ``payload_properties``: no subclass writes its payload by hand.
    Views never raise on display; explicit calls (``to_pandas`` on a report with no table) do.
    """

    report_type: ClassVar[str] = "report"
    status_tones: ClassVar[Mapping[str, ToneRule]] = tones(
        {"clean": "ok", "ok": "ok", "found": "findings", "warn": "warning", "info": "info"}
    )
    """Every status this report type can have -> its tone (or ``"findings"``: the most severe
    finding's). The generic vocabulary here serves plain ``Report`` objects."""
    payload_properties: ClassVar[tuple[str, ...]] = ()
    """Computed properties that travel in the payload's ``data`` beside the fields."""
    row_tones: ClassVar[Mapping[str, Tone]] = {}
    """The row-level words of this report type (a table's verdict or status column, a check's
    state) -> the tone they are shown in: decided here and sent as the payload's ``row_tones``,
    so a panel maps no word itself (``tests/test_report_contract.py`` checks each map covers
    its ``Literal``)."""

    subject: str
    """What was examined, e.g. ``"Sequential (12 ops)"``."""
    status: str
    """The verdict word, one of ``status_tones`` (e.g. ``"found"``, ``"clean"``)."""
    lead: str
    """The card's first line: the verdict in one sentence."""
    findings: tuple[Finding, ...] = ()
    """What the analysis found, most severe first: each with a severity, a code, where it happened
    and what to do."""
    tables: tuple[Table, ...] = ()
    """The report's tables (``to_pandas(name)`` gives one as a DataFrame); empty for a report with
    no table."""
    disclosures: tuple[str, ...] = ()
    """What the verdict does not cover (scope, sampling, AMP limits)."""
    unavailable: tuple[Unavailable, ...] = ()
    """What could not be checked, and why; a report with any entry is never ``clean``."""
    exits: tuple[Exit, ...] = ()
    """Suggested next steps (the card's "next" line and the panel's buttons), in order."""
    actions: Mapping[str, Callable[..., Report]] = field(
        default_factory=frozen_mapping, compare=False, repr=False
    )
    """Follow-ups a panel may request by name; excluded from equality, repr and payload."""

    def __post_init__(self) -> None:
        if self.status not in self.status_tones:
            raise ReportOptionError(
                f"{type(self).__name__} has no status {self.status!r}; its statuses are "
                f"{sorted(self.status_tones)} (declare a new one in status_tones)."
            )
        for name in ("findings", "tables", "disclosures", "unavailable", "exits"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        for item in dataclass_fields(self):  # a subclass's dicts and lists are frozen too
            value = getattr(self, item.name)
            if isinstance(value, Mapping) and not isinstance(value, types.MappingProxyType):
                object.__setattr__(self, item.name, frozen_mapping(value))
            elif isinstance(value, list):
                object.__setattr__(self, item.name, tuple(value))
        ordered = sorted(self.findings, key=lambda f: SEVERITY_ORDER[f.severity])
        object.__setattr__(self, "findings", tuple(ordered))
        object.__setattr__(self, "actions", types.MappingProxyType(dict(self.actions)))

    @property
    def tone(self) -> Tone:
        """How the verdict is shown (``critical``, ``warning``, ``ok``, ``info``), decided here."""
        return resolve_tone(self.status_tones[self.status], (f.severity for f in self.findings))

    @property
    def status_label(self) -> str:
        """The status as a phrase (``none_flagged`` -> ``none flagged``)."""
        return status_phrase(self.status)

    # ----- views -----------------------------------------------------------------------------
    def card(self, max_findings: int = MAX_CARD_FINDINGS) -> str:
        """Bounded text: lead line, at most ``max_findings`` findings, the remainder, the exits."""
        check_int(
            "max_findings",
            max_findings,
            low=1,
            expect=">= 1",
            hint="pass an int (the card always shows one)",
            error=ReportOptionError,
        )
        lines = [f"{self.report_type} [{self.status}] {self.subject}: {self.lead}"]
        for finding in self.findings[:max_findings]:
            where = f" ({finding.where.text()})" if finding.where and finding.where.text() else ""
            lines.append(
                f"  {finding.severity.upper():8s} {finding.code}: {finding.message}{where}"
            )
        rest = len(self.findings) - max_findings
        if rest > 0:
            lines.append(f"  ... and {rest} more finding{'s' if rest != 1 else ''}")
        for item in self.unavailable:
            lines.append(f"  NOT CHECKED {item.check}: {item.reason}")
        for note in self.disclosures[:3]:
            lines.append(f"  note: {note}")
        if len(self.disclosures) > 3:
            lines.append(f"  ... and {len(self.disclosures) - 3} more notes")
        if self.exits:
            lines.append("  next: " + "; ".join(e.code for e in self.exits[:3]))
        return "\n".join(_clip(line) for line in lines)

    def __str__(self) -> str:
        return self.card()

    def __repr__(self) -> str:
        return printable(
            f"<{type(self).__name__} {self.status} {self.subject!r}: {len(self.findings)} findings>"
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON-safe payload envelope (``schema`` ``torchlens_nb.report/1``).

        A follow-up that cannot run now (see ``report/_actions.py``) is listed in
        ``unavailable_actions`` with its reason, and its exit carries that ``disabled_reason``.
        """
        gone = unavailable_actions(self.actions)
        payload = {
            "schema": SCHEMA,
            "report_type": self.report_type,
            "subject": self.subject,
            "status": self.status,
            "status_label": self.status_label,
            "tone": self.tone,
            "lead": self.lead,
            "card": self.card(),
            "findings": list(self.findings),
            "tables": [
                {
                    "name": t.name,
                    "columns": list(t.columns),
                    "rows": [list(r) for r in t.rows],
                    "attrs": _thaw(t.attrs),
                    "total_rows": len(t.rows),
                }
                for t in self.tables
            ],
            "disclosures": list(self.disclosures),
            "unavailable": list(self.unavailable),
            "exits": [
                {
                    "label": e.label,
                    "code": e.code,
                    "action": e.action,
                    "args": _thaw(e.args),
                    "is_primary": e.is_primary,
                    "runnable": e.action is not None and e.action in self.actions,
                    "disabled_reason": None if e.action is None else gone.get(e.action),
                }
                for e in self.exits
            ],
            "actions": sorted(self.actions),
            "unavailable_actions": gone,
            "row_tones": dict(self.row_tones),
            "data": self._data(),
        }
        return to_jsonable(_thaw(payload))

    def to_json(self, **kwargs: Any) -> str:
        """``json.dumps`` of :meth:`to_dict` (strict JSON: no NaN literals)."""
        return json.dumps(self.to_dict(), allow_nan=False, **kwargs)

    def table(self, name: str | None = None) -> Table:
        """The table named ``name`` (the first one when None)."""
        if not self.tables:
            raise ReportOptionError(
                f"{type(self).__name__} has no table; read its findings or to_dict() instead."
            )
        if name is None:
            return self.tables[0]
        for candidate in self.tables:
            if candidate.name == name:
                return candidate
        raise ReportOptionError(
            f"no table named {name!r}; this report has {[t.name for t in self.tables]}."
        )

    def to_pandas(self, name: str | None = None) -> pandas.DataFrame:
        """The primary (or named) table as a DataFrame with its ``attrs``."""
        return self.table(name).to_pandas()

    def run_action(self, name: str, **kwargs: Any) -> Report:
        """Run the follow-up ``name`` (what a panel button or expand control asks for)."""
        if name not in self.actions:
            raise ReportOptionError(
                f"{type(self).__name__} has no action {name!r}; available: {sorted(self.actions)}."
            )
        action = self.actions[name]
        try:
            inspect.signature(action).bind(**kwargs)
        except TypeError as exc:
            raise ReportOptionError(
                f"action {name!r} does not take {sorted(kwargs)}: {exc}; pass the arguments its "
                f"exit lists, e.g. {self._exit_args(name)}."
            ) from exc
        return action(**kwargs)

    def _exit_args(self, name: str) -> dict[str, Any]:
        for item in self.exits:
            if item.action == name:
                return _thaw(item.args)
        return {}

    def card_html(self, *, beside_panel: bool = False) -> str:
        """The card as static HTML (a ``<pre>`` block): what a page shows with no panel.
        ``beside_panel`` marks the copy displayed next to a live panel, which hides it."""
        if not isinstance(beside_panel, bool):
            raise ReportOptionError(f"beside_panel must be True or False, got {beside_panel!r}.")
        return _display.static_html(self, beside_panel=beside_panel)

    def to_html(self, path: str | os.PathLike[str] | None = None) -> str:
        """Self-contained HTML of the panel (offline, no kernel); written to ``path`` if given.

        Raises:
            ReportOptionError: ``path`` is not a file path (an int would be taken by ``open``
                as a file descriptor, written into and closed) or is a directory.
            PanelError: the panel bundle was not built.
        """
        if path is not None and not isinstance(path, (str, os.PathLike)):
            raise ReportOptionError(
                f"to_html(path=...) must be a file path (str or os.PathLike) or None, got "
                f"{type(path).__name__} {path!r}; for the text alone call to_html()."
            )
        if path is not None and not os.fspath(path):
            raise ReportOptionError(
                "to_html(path='') names no file; pass a file name such as 'report.html', or "
                "call to_html() for the text alone."
            )
        if path is not None and os.path.isdir(path):
            raise ReportOptionError(
                f"to_html(path={os.fspath(path)!r}) is a directory; pass a file name such as "
                f"{os.path.join(os.fspath(path), 'report.html')!r}."
            )
        return _display.to_html(self, path)

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        return _display.mimebundle(self)

    def _ipython_display_(self) -> None:
        _display.ipython_display(self)

    def _data(self) -> dict[str, Any]:
        """The payload's ``data``: the subclass's fields and ``payload_properties``."""
        data: dict[str, Any] = {}
        for item in payload_fields(type(self)):
            value = getattr(self, item.name)
            head = item.metadata.get("payload_head")
            if "payload_as" in item.metadata:
                value = getattr(self, item.metadata["payload_as"])
            data[item.name] = value if head is None else value[:head]
        for name in self.payload_properties:
            data[name] = getattr(self, name)
        return data


_BASE_FIELDS = frozenset(f.name for f in dataclass_fields(Report))


def payload_fields(cls: type[Report]) -> tuple[Field[Any], ...]:
    """The fields of ``cls`` that travel in the payload's ``data`` (base fields never do)."""
    return tuple(
        f
        for f in dataclass_fields(cls)
        if f.name not in _BASE_FIELDS and f.metadata.get("payload", True)
    )


CARD_LINE_MAX_CHARS = 240
"""A card line longer than this is cut with an ellipsis: cards are bounded text."""


def _clip(line: str) -> str:
    line = printable(line)
    return line if len(line) <= CARD_LINE_MAX_CHARS else line[: CARD_LINE_MAX_CHARS - 1] + "…"
