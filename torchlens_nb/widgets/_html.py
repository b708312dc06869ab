"""A report's panel as one self-contained HTML file (``report.to_html(path)``).

The file inlines the panel's bundled module, the theme, the payload and the arrays (base64), and
a small boot script (``js/offline.js``) that stands in for the anywidget model. It renders the
same panel as the notebook with no kernel and no network; requests that need a kernel (follow-up
buttons, paging beyond the rows in the payload) are disabled with a visible note. The static text
card is in the page too, shown when scripts are off or the panel fails.
"""

from __future__ import annotations

import base64
import html
import json
from typing import TYPE_CHECKING, Any

from ._payload import panel_arrays, panel_payload
from ._registry import OFFLINE_BOOT, THEME_CSS, bundle_path, panel_name

if TYPE_CHECKING:
    from ..report import Report

_PAGE_CSS = """
body { margin: 16px; background: #ffffff; }
body[data-jp-theme-light="false"] { background: #0d1117; }
@media (prefers-color-scheme: dark) { body:not([data-jp-theme-light="true"]) { background: #0d1117; } }
.tln-static-card pre { white-space: pre-wrap; }
"""


def standalone_html(report: Report, static_card: str) -> str:
    """The offline page of ``report``; ``static_card`` is the HTML shown without scripts.

    Raises:
        PanelError: the panel bundle was not built (``make bundle``).
    """
    panel = panel_name(report)
    data = {
        "panel": panel,
        "esm": bundle_path(panel).read_text(encoding="utf-8"),
        "payload": panel_payload(report),
        "arrays": {
            name: {
                **{k: v for k, v in spec.items() if k != "data"},
                "base64": base64.b64encode(spec["data"]).decode("ascii"),
            }
            for name, spec in panel_arrays(report).items()
        },
    }
    title = f"{report.report_type}: {report.subject} (torchlens_nb)"
    return "\n".join(
        [
            "<!doctype html>",
            '<html lang="en">',
            "<head>",
            '<meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>{html.escape(title)}</title>",
            '<link rel="icon" href="data:,">',  # no favicon request either
            f"<style>{_PAGE_CSS}{_no_close_tag(THEME_CSS.read_text(encoding='utf-8'), 'style')}</style>",
            "</head>",
            "<body>",
            '<main id="tln-root"></main>',
            f"<noscript>{static_card}</noscript>",
            f'<div id="tln-fallback" hidden>{static_card}</div>',
            f'<script type="application/json" id="tln-offline">{_json_for_script(data)}</script>',
            f'<script type="module">{_no_close_tag(OFFLINE_BOOT.read_text(encoding="utf-8"), "script")}'
            "</script>",
            "</body>",
            "</html>",
        ]
    )


def _json_for_script(data: Any) -> str:
    """JSON that cannot end its <script> block early (every ``<`` becomes ``\\u003c``)."""
    return json.dumps(data, allow_nan=False, separators=(",", ":")).replace("<", "\\u003c")


def _no_close_tag(text: str, tag: str) -> str:
    """Inline code with any ``</tag`` escaped, so the block cannot be closed from inside."""
    return text.replace(f"</{tag}", f"<\\/{tag}")
