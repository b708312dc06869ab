// The table every tabular panel uses: sortable, filterable, paged; large tables page through
// the kernel (Python sorts and filters with pandas) so 100k rows never travel to the browser.
import { h, listen } from "./dom.js";
import { columnKind, exactText, formatNumber, formatSourceLine, formatValue, isNamedLocation } from "./format.js";
import { definitionList } from "./findings.js";
import { decodeFloats } from "./payload.js";
import { PAGE_TIMEOUT_MS, failureText } from "./rpc.js";
import { offlineNote, setStatus } from "./status.js";

/** Rows shown per page. */
export const PAGE_ROWS = 25;

/**
 * The payload's rows of a table as objects keyed by column (none for a missing table).
 * @param {import("./payload.js").TablePayload | undefined} table
 * @returns {Record<string, any>[]}
 */
export function rowDicts(table) {
  return table ? table.rows.map((row) => rowDict(table, row)) : [];
}

/**
 * One row as an object keyed by the table's columns.
 * @param {import("./payload.js").TablePayload} table
 * @param {any[]} row
 */
function rowDict(table, row) {
  return Object.fromEntries(table.columns.map((c, i) => [c, row[i]]));
}
/** A text cell longer than this may wrap (theme.css .tln-long); shorter cells stay on one line. */
const LONG_TEXT_CHARS = 60;
/** Table attrs the panel reads itself instead of listing them as facts. */
const CONTROL_ATTRS = new Set(["row_action", "row_arg"]);

/**
 * A table cell's text: a location (`file:line`, or a bare file column) of a notebook cell as
 * the cell's name ("Cell In[3], line 9" / "Cell In[3]"), anything else formatted.
 * @param {unknown} value
 * @param {Record<string, string>} locations
 */
function cellText(value, locations) {
  if (isNamedLocation(value, locations)) return formatSourceLine(value, locations);
  if (typeof value === "string" && value in locations) return locations[value];
  return formatValue(value);
}

/**
 * @typedef {{ sort: string | null, descending: boolean, filter: string, offset: number }} TableState
 * @typedef {{ table: string, index: number, row: Record<string, unknown> }} RowEventDetail
 */

/**
 * A table block: filter box, pager, status line, the table, and the table's facts.
 * Clicking a row dispatches a bubbling `tln-row` CustomEvent (detail: table, index, row) and
 * calls `onRow`; with `onRow` the first cell is a button so the row is reachable by keyboard.
 * @param {import("./payload.js").TablePayload} table
 * @param {import("./panel.js").PanelContext} ctx
 * @param {{ onRow?: (detail: RowEventDetail) => void, rowLabel?: string }} [options]
 */
export function tableView(table, ctx, { onRow, rowLabel = "Open" } = {}) {
  const key = `table:${table.name}`;
  /** @type {TableState} */
  const st = ctx.state.get(key) ?? { sort: null, descending: false, filter: "", offset: 0 };
  ctx.state.set(key, st);
  const truncated = table.total_rows > table.rows.length;
  const remote = truncated && !ctx.offline;
  const kinds = table.columns.map((_, i) => columnKind(table.rows.map((r) => r[i])));
  const numeric = kinds.map((k) => k === "int" || k === "float");

  const status = h("p", { class: "tln-table-status", role: "status", "aria-live": "polite" });
  const filter = h("input", { type: "search", class: "tln-filter", placeholder: "Filter rows",
    "aria-label": `Filter rows of ${table.name}`, value: st.filter });
  const prev = h("button", { type: "button", class: "tln-button tln-quiet", "aria-label": "Previous page" }, "‹ Prev");
  const next = h("button", { type: "button", class: "tln-button tln-quiet", "aria-label": "Next page" }, "Next ›");
  const sortButtons = table.columns.map((col, i) => h("button", { type: "button", class: "tln-sort", "data-column": col },
    col, h("span", { class: "tln-sort-icon", "aria-hidden": "true" })));
  const headCells = table.columns.map((_, i) => h("th", { scope: "col", class: numeric[i] ? "tln-num" : null }, sortButtons[i]));
  const tbody = h("tbody");
  const tableEl = h("table", { class: "tln-table", "data-table": table.name },
    h("caption", null, table.name), h("thead", null, h("tr", null, headCells)), tbody);
  /** @type {WeakMap<Element, { row: unknown[], index: number }>} */
  const rowData = new WeakMap();

  /** @param {unknown[]} row @param {number} index */
  const rowEl = (row, index) => {
    const cells = row.map((value, i) => {
      const text = cellText(value, ctx.locations);
      const attrs = { class: numeric[i] ? "tln-num" : text.length > LONG_TEXT_CHARS ? "tln-long" : null,
        title: exactText(value) !== text ? exactText(value) : null };
      if (i > 0) return h("td", attrs, text);
      return h("th", { ...attrs, scope: "row" },
        onRow ? h("button", { type: "button", class: "tln-row-button", "aria-label": `${rowLabel} ${text}` }, text) : text);
    });
    const tr = h("tr", { "data-index": index, class: onRow ? "tln-row-action" : null }, cells);
    rowData.set(tr, { row, index });
    return tr;
  };

  /** @param {{ row: unknown[], index: number }[]} rows @param {number} offset @param {number} matched */
  const fill = (rows, offset, matched) => {
    tbody.replaceChildren(...rows.map(({ row, index }) => rowEl(row, index)));
    if (rows.length === 0) tbody.append(h("tr", null, h("td", { colspan: table.columns.length, class: "tln-muted" }, "No rows match.")));
    const total = table.total_rows;
    const range = rows.length ? `Rows ${formatNumber(offset + 1)}–${formatNumber(offset + rows.length)} of ` : "0 rows of ";
    const scope = matched === total ? formatNumber(total) : `${formatNumber(matched)} matching (${formatNumber(total)} in all)`;
    status.dataset.tone = "";
    status.textContent = range + scope;
    prev.disabled = offset === 0;
    next.disabled = offset + rows.length >= matched;
    sortButtons.forEach((button, i) => {
      const sorted = st.sort === table.columns[i];
      /** @type {HTMLElement} */ (headCells[i]).setAttribute("aria-sort", sorted ? (st.descending ? "descending" : "ascending") : "none");
      /** @type {HTMLElement} */ (button.lastChild).textContent = sorted ? (st.descending ? " ▼" : " ▲") : " ↕";
    });
  };

  const showLocal = () => {
    let rows = table.rows.map((row, index) => ({ row, index }));
    if (st.filter) {
      const needle = st.filter.toLowerCase();
      rows = rows.filter(({ row }) => row.some((v) => exactText(v).toLowerCase().includes(needle)));
    }
    if (st.sort !== null) {
      const i = table.columns.indexOf(st.sort);
      rows.sort((a, b) => compareValues(a.row[i], b.row[i], st.descending) || a.index - b.index);
    }
    st.offset = Math.max(0, Math.min(st.offset, Math.floor(Math.max(rows.length - 1, 0) / PAGE_ROWS) * PAGE_ROWS));
    fill(rows.slice(st.offset, st.offset + PAGE_ROWS), st.offset, rows.length);
  };

  let sequence = 0;
  const fetchPage = async () => {
    const mine = ++sequence;
    tableEl.setAttribute("aria-busy", "true");
    setStatus(status, "busy", "Loading rows…");
    try {
      const { msg } = await ctx.rpc.request({ type: "page", table: table.name, sort: st.sort, descending: st.descending,
        filter: st.filter, offset: st.offset, limit: PAGE_ROWS }, { timeoutMs: PAGE_TIMEOUT_MS });
      if (mine !== sequence || ctx.signal.aborted) return;
      const page = decodeFloats(msg.page);
      fill(page.rows.map((/** @type {unknown[]} */ row, /** @type {number} */ i) => ({ row, index: page.offset + i })), page.offset, page.matched_rows);
    } catch (err) {
      if (mine === sequence && !ctx.signal.aborted) setStatus(status, "critical", failureText(err, "Could not load rows"));
    } finally {
      if (mine === sequence) tableEl.removeAttribute("aria-busy");
    }
  };

  const isPristine = () => st.sort === null && st.filter === "" && st.offset === 0;
  const refresh = () => {
    if (!remote) showLocal();
    else if (isPristine()) fill(table.rows.slice(0, PAGE_ROWS).map((row, index) => ({ row, index })), 0, table.total_rows);
    else void fetchPage();
  };

  sortButtons.forEach((button, i) => listen(button, "click", () => {
    const col = table.columns[i];
    if (st.sort !== col) Object.assign(st, { sort: col, descending: false });
    else if (!st.descending) st.descending = true;
    else Object.assign(st, { sort: null, descending: false });
    st.offset = 0;
    refresh();
  }, ctx.signal));
  /** @type {any} */
  let debounce = null;
  ctx.signal.addEventListener("abort", () => clearTimeout(debounce));
  listen(filter, "input", () => {
    st.filter = filter.value;
    st.offset = 0;
    clearTimeout(debounce);
    if (remote) debounce = setTimeout(refresh, 250);
    else refresh();
  }, ctx.signal);
  listen(prev, "click", () => { st.offset = Math.max(0, st.offset - PAGE_ROWS); refresh(); }, ctx.signal);
  listen(next, "click", () => { st.offset += PAGE_ROWS; refresh(); }, ctx.signal);
  listen(tbody, "click", (event) => {
    const tr = /** @type {Element} */ (event.target).closest("tr");
    const data = tr && rowData.get(tr);
    if (!data) return;
    /** @type {RowEventDetail} */
    const detail = { table: table.name, index: data.index, row: rowDict(table, data.row) };
    tableEl.dispatchEvent(new CustomEvent("tln-row", { bubbles: true, detail }));
    onRow?.(detail);
  }, ctx.signal);

  refresh();
  const scroll = h("div", { class: "tln-table-scroll" }, tableEl);
  const cue = hiddenColumnsCue(scroll, table.columns, headCells, ctx.signal);
  const facts = Object.entries(table.attrs ?? {}).filter(([k]) => !CONTROL_ATTRS.has(k));
  return h("div", { class: "tln-table-block", "data-table": table.name },
    h("div", { class: "tln-toolbar" }, filter, h("span", { class: "tln-pager" }, prev, next), status),
    ctx.offline && truncated ? offlineNote(`showing the first ${formatNumber(table.rows.length)} of ` +
      `${formatNumber(table.total_rows)} rows; sorting and filtering cover these rows only.`) : null,
    scroll, cue,
    facts.length ? h("details", { class: "tln-table-facts" }, h("summary", null, `Table facts (${facts.length})`),
      definitionList(facts.map(([k, v]) => [k, formatValue(decodeFloats(v))]))) : null);
}

const TYPE_RANK = { number: 0, boolean: 1, string: 2, object: 3 };

/**
 * Order two cells: numbers numerically, text by code point, booleans false first; missing values
 * (null, NaN) always last in both directions, as pandas `na_position="last"` does.
 * @param {unknown} a
 * @param {unknown} b
 * @param {boolean} descending
 */
export function compareValues(a, b, descending) {
  const missingA = a === null || a === undefined || Number.isNaN(a);
  const missingB = b === null || b === undefined || Number.isNaN(b);
  if (missingA || missingB) return Number(missingA) - Number(missingB);
  let order;
  if (typeof a === typeof b && typeof a !== "object") {
    order = cmp(/** @type {any} */ (a), /** @type {any} */ (b));
  } else {
    const rank = (/** @type {unknown} */ v) => TYPE_RANK[/** @type {keyof TYPE_RANK} */ (typeof v)] ?? 4;
    order = rank(a) - rank(b) || cmp(exactText(a), exactText(b));
  }
  return descending ? -order : order;
}

/**
 * Plain `<` order (code points for text, as Python sorts strings), so a table sorts the same in
 * the browser and in pandas.
 * @param {number | string | boolean} a
 * @param {number | string | boolean} b
 */
function cmp(a, b) {
  return a < b ? -1 : a > b ? 1 : 0;
}

/**
 * A line under a table wider than its box naming the columns scrolled out of view (the first
 * column is pinned, theme.css): hidden columns are never silent. Kept current on scroll and
 * resize until `signal` aborts.
 * @param {HTMLElement} scroll the scrolling box
 * @param {string[]} columns
 * @param {HTMLElement[]} headCells one per column
 * @param {AbortSignal} signal
 */
function hiddenColumnsCue(scroll, columns, headCells, signal) {
  const cue = h("p", { class: "tln-table-cue", hidden: true, "aria-live": "polite" });
  const update = () => {
    const view = scroll.getBoundingClientRect();
    const pinned = headCells[0]?.getBoundingClientRect().right ?? view.left;
    const right = columns.filter((_, i) => i > 0 && headCells[i].getBoundingClientRect().right > view.right + 1);
    const left = columns.filter((_, i) => i > 0 && headCells[i].getBoundingClientRect().left < pinned - 1);
    const parts = [];
    if (left.length) parts.push(`${left.length} to the left (${left.join(", ")})`);
    if (right.length) parts.push(`${right.length} to the right (${right.join(", ")})`);
    cue.hidden = parts.length === 0;
    cue.textContent = parts.length ? `More columns ${parts.join(" and ")}: scroll sideways; ${columns[0]} stays in view.` : "";
  };
  listen(scroll, "scroll", update, signal);
  const observer = new ResizeObserver(update);
  observer.observe(scroll);
  observer.observe(/** @type {Element} */ (scroll.firstElementChild));
  signal.addEventListener("abort", () => observer.disconnect(), { once: true });
  return cue;
}
