"""Table pages for panels: sort and filter a report table with pandas, return one page.

A panel shows the first :data:`~torchlens_nb.widgets._payload.MAX_TABLE_ROWS` rows from its
payload; any sort, filter or page turn on a bigger table becomes a ``{"type": "page"}`` request
answered here, so a 100k-row table never travels to the browser. The ordering matches the
browser's own (``js/shared/table.js``): missing values (None, NaN) last in both directions,
ties in table order, text by code point, mixed-type columns by (kind, text).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from .._jsonsafe import to_jsonable
from .._validate import check_int
from ..errors import PanelError

if TYPE_CHECKING:
    import numpy
    import pandas

    from ..report import Table

MAX_PAGE_ROWS = 500
"""The largest page a panel may ask for (it asks for 25)."""


class TablePager:
    """Pages of one table; the DataFrame and its text form are built once, on first use.

    Measured on the 100k x 4 table of tests/browser/reports.py on 2 busy cores: the first
    request ~1 s (the DataFrame), the first filter ~2 s (the text form), later requests
    10-200 ms.
    """

    def __init__(self, table: Table) -> None:
        self._table = table
        self._frame: pandas.DataFrame | None = None
        self._text: pandas.DataFrame | None = None

    def page(
        self,
        *,
        sort: str | None = None,
        descending: bool = False,
        filter: str = "",
        offset: int = 0,
        limit: int = 25,
    ) -> dict[str, Any]:
        """One page as ``{table, columns, rows, offset, total_rows, matched_rows, sort, ...}``.

        Raises:
            PanelError: unknown sort column, negative offset, or a limit outside 1..500.
        """
        import numpy as np

        table = self._table
        if sort is not None and sort not in table.columns:
            raise PanelError(
                f"table {table.name!r} has no column {sort!r}; columns: {list(table.columns)}."
            )
        check_int("page offset", offset, low=0, error=PanelError)
        check_int(
            "page limit",
            limit,
            low=1,
            high=MAX_PAGE_ROWS,
            expect=f"an int in 1..{MAX_PAGE_ROWS}",
            error=PanelError,
        )
        positions = np.arange(len(table.rows))
        if filter:
            positions = positions[self._matches(filter)]
        if sort is not None:
            positions = self._order(positions, sort, bool(descending))
        chosen = positions[offset : offset + limit]
        return {
            "table": table.name,
            "columns": list(table.columns),
            "rows": to_jsonable([list(table.rows[i]) for i in chosen.tolist()]),
            "offset": offset,
            "total_rows": len(table.rows),
            "matched_rows": len(positions),
            "sort": sort,
            "descending": bool(descending),
            "filter": filter,
        }

    def _frame_of(self) -> pandas.DataFrame:
        if self._frame is None:
            self._frame = self._table.to_pandas()
        return self._frame

    def _matches(self, needle: str) -> numpy.ndarray:
        """Rows where any cell's text contains ``needle``, ignoring case (None reads as "")."""
        if self._text is None:
            import pandas as pd

            # From the table's own values, not the frame: pandas turns ints with a None into
            # floats ("3.0"), which the browser would never show.
            self._text = pd.DataFrame(
                [[_cell_text(v) for v in row] for row in self._table.rows],
                columns=range(len(self._table.columns)),
            )
        hits = self._text.apply(lambda col: col.str.contains(needle.lower(), regex=False))
        return hits.any(axis=1).to_numpy()

    def _order(self, positions: numpy.ndarray, column: str, descending: bool) -> numpy.ndarray:
        import numpy as np

        series = self._frame_of()[column].iloc[positions]
        try:
            return series.sort_values(
                ascending=not descending, na_position="last", kind="stable"
            ).index.to_numpy()
        except TypeError:  # mixed kinds (numbers and text): order as the browser does
            col = self._table.columns.index(column)
            values = [self._table.rows[i][col] for i in positions.tolist()]
            present = [i for i, v in enumerate(values) if not _missing(v)]
            present.sort(key=lambda i: _mixed_key(values[i]), reverse=descending)
            missing = [i for i, v in enumerate(values) if _missing(v)]
            return positions[np.array(present + missing, dtype=np.int64)]


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _mixed_key(value: Any) -> tuple[int, Any]:
    """Numbers, then booleans, then everything else by text (``compareValues`` in table.js)."""
    if isinstance(value, bool):
        return (1, value)
    if isinstance(value, (int, float)):
        return (0, value)
    return (2, str(value))


def _cell_text(value: Any) -> str:
    """Lower-cased text of a cell for filtering; matches ``exactText`` in js/shared/format.js."""
    if _missing(value):
        return ""
    return str(value).lower()
