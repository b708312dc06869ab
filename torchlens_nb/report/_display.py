"""The single place where a report's rich display plugs in.

``mimebundle(report)`` returns ``text/plain`` (the card) and ``text/html`` (a static card for
nbconvert and GitHub). The widget view is added by the panel framework: this module is the one
upward edge of the layering (report -> widgets), imported lazily inside the display call.
Display never raises: a panel that fails to build warns once and falls back to the card.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._base import Report


def static_html(report: Report) -> str:
    """A static HTML card: the same text as ``card()``, escaped, in a ``<pre>`` block."""
    return (f'<div class="tln-static-card" data-report-type="{html.escape(report.report_type)}">'
            f"<pre>{html.escape(report.card())}</pre></div>")


def mimebundle(report: Report) -> dict[str, Any]:
    """The display bundle of ``report``: card text plus static HTML."""
    return {"text/plain": report.card(), "text/html": static_html(report)}


def to_html(report: Report, path: str | None = None) -> str:
    """Self-contained HTML for ``report``; written to ``path`` when given."""
    text = f"<!doctype html><meta charset='utf-8'><title>{html.escape(report.subject)}</title>"
    text += static_html(report)
    if path is not None:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
    return text
