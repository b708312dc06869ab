"""Which panel module renders which report, and where the bundled modules live.

A panel is one ES module ``js/panels/<panel>.js``, bundled by ``js/build.mjs`` into
``static/<panel>.js``. A report is rendered by the panel registered for its ``report_type`` in
:data:`PANELS`; a report type with no entry gets the ``table`` panel when it has tables and the
``report`` panel (the findings card) otherwise.
"""

from __future__ import annotations

import json
import pathlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import PanelError

if TYPE_CHECKING:
    from ..report import Report

STATIC_DIR = pathlib.Path(__file__).resolve().parent / "static"
"""The bundle folder: one ``<panel>.js`` per panel, ``theme.css`` and ``_offline.js``."""

THEME_CSS = STATIC_DIR / "theme.css"
OFFLINE_BOOT = STATIC_DIR / "_offline.js"
MANIFEST = STATIC_DIR / "_manifest.json"
"""Written by ``js/build.mjs``: ``{"version": <pyproject version>, "panels": [...]}``."""

REPORT_PANEL = "report"
"""The findings card, for any report with no table and no panel of its own."""
TABLE_PANEL = "table"
"""The findings card plus sortable, filterable, paged tables."""

PANELS: dict[str, str] = {
    # report_type -> panel name (js/panels/<panel name>.js). A capability adds one line here.
    "backward_nan": "nonfinite",
    "bisect_nan": "nonfinite",
    "checks": "checks",
    "attention_sinks": "attention_sinks",
    "doctor": TABLE_PANEL,
    "find_nan": "nonfinite",
    "grad_fn": "grad_fn",
    "investigation": "nonfinite",  # the origin card and lineage of one replayed step
    "lineage": "lineage",
    "nonfinite": "nonfinite",
    "grad_health": "grad_health",
    "spike": "spike",  # session.spike_forensics()
    # comparisons and cost (tl.debug.compare & co.): one side-by-side panel, one ranking panel
    "bisect_precision": "compare",
    "compare": "compare",
    "determinism": "compare",
    "hot_path": "cost",
    "recompute": "cost",
    # tl.recipes reports that carry charts (data.charts); the others use the table panel
    "class_balance": "recipe",
    "confident_errors": "recipe",
    "gradient_flow": "recipe",
    "init_loss": "recipe",
    "overfit_one_batch": "recipe",
    "random_input_test": "recipe",
    "update_ratio": "recipe",
    "weight_distribution": "recipe",
    "output_vs_loss": "recipe",
    "training_setup": "recipe",
    # tl.recipes.triage: the checklist, each row expanding into its recipe's view
    "triage": "triage",
}


def register_panel(report_type: str, panel: str) -> None:
    """Render reports whose ``report_type`` is ``report_type`` with ``js/panels/<panel>.js``.

    Capabilities of torchlens_nb add their entry to :data:`PANELS` in this module instead; this
    call is for code outside the package. The bundle is looked up at display time, so a missing
    one falls back to the text card with a warning rather than failing here.
    """
    if not panel.isidentifier():
        raise PanelError(
            f"panel name must be a plain identifier (the js/panels/ file stem), got {panel!r}."
        )
    PANELS[report_type] = panel


def panel_name(report: Report) -> str:
    """The panel that renders ``report`` (see the module docstring for the rule)."""
    registered = PANELS.get(report.report_type)
    if registered is not None:
        return registered
    return TABLE_PANEL if report.tables else REPORT_PANEL


def bundle_path(panel: str) -> pathlib.Path:
    """The bundled module of ``panel``; raises :class:`PanelError` when it was not built."""
    path = STATIC_DIR / f"{panel}.js"
    if not path.is_file():
        raise PanelError(
            f"the {panel!r} panel bundle {path} is missing; build the panels with `make bundle` "
            f"(cd js && npm ci && node build.mjs)."
        )
    return path


def available_panels() -> tuple[str, ...]:
    """Names of the panels whose bundle exists, sorted."""
    return tuple(sorted(p.stem for p in STATIC_DIR.glob("*.js") if not p.stem.startswith("_")))


def required_panels() -> tuple[str, ...]:
    """Every panel some report renders with: the registered ones plus the two fallbacks."""
    return tuple(sorted({*PANELS.values(), REPORT_PANEL, TABLE_PANEL}))


@dataclass(frozen=True)
class BundleStatus:
    """What the bundle folder holds, against what the registry needs (``bundle_status()``)."""

    missing: tuple[str, ...]
    """Files the panels need that are not there (``<panel>.js``, ``theme.css``, ...)."""
    built_version: str | None
    """The package version the bundles were built for (their manifest); None without one."""

    def matches(self, version: str) -> bool:
        """True when nothing is missing and the bundles were built for ``version``."""
        return not self.missing and self.built_version == version


def bundle_status() -> BundleStatus:
    """Check :data:`STATIC_DIR` against :func:`required_panels` and read the build manifest."""
    needed = [f"{panel}.js" for panel in required_panels()]
    needed += [THEME_CSS.name, OFFLINE_BOOT.name, MANIFEST.name]
    missing = tuple(name for name in needed if not (STATIC_DIR / name).is_file())
    try:
        built = json.loads((STATIC_DIR / MANIFEST.name).read_text()).get("version")
    except (OSError, ValueError, AttributeError):
        built = None
    return BundleStatus(missing, built if isinstance(built, str) else None)
