"""Live panels: one anywidget per panel kind, rendering a report's payload (``tl.widgets``).

Reports display themselves (``report._repr_mimebundle_`` builds the widget); use this package
to build a panel explicitly, register a panel for a new report type, or encode arrays.
"""

from ._dashboard import LiveChecksWidget, dashboard_for
from ._html import standalone_html
from ._paging import MAX_PAGE_ROWS, TablePager
from ._payload import (
    ARRAY_DTYPES,
    MAX_ARRAY_BYTES,
    MAX_FINDINGS,
    MAX_TABLE_ROWS,
    encode_array,
    panel_arrays,
    panel_payload,
)
from ._registry import (
    PANELS,
    REPORT_PANEL,
    STATIC_DIR,
    TABLE_PANEL,
    BundleStatus,
    available_panels,
    bundle_path,
    bundle_status,
    panel_name,
    register_panel,
    required_panels,
)
from ._widget import MAX_FOLLOWUPS, ReportWidget, widget_class, widget_for

__all__ = [
    "ARRAY_DTYPES",
    "MAX_ARRAY_BYTES",
    "MAX_FINDINGS",
    "MAX_FOLLOWUPS",
    "MAX_PAGE_ROWS",
    "MAX_TABLE_ROWS",
    "PANELS",
    "REPORT_PANEL",
    "STATIC_DIR",
    "TABLE_PANEL",
    "BundleStatus",
    "LiveChecksWidget",
    "ReportWidget",
    "TablePager",
    "available_panels",
    "bundle_path",
    "bundle_status",
    "dashboard_for",
    "encode_array",
    "panel_arrays",
    "panel_name",
    "panel_payload",
    "register_panel",
    "required_panels",
    "standalone_html",
    "widget_class",
    "widget_for",
]
