// The grad_health panel: the frontier table (grouped by module, sortable, filterable, a log10
// norm bar per row) and the per-op gradient-norm profile. Python decided every verdict, the
// frontier and the plotted values (report.panel_arrays); this module only lays them out.
import { reportCard } from "../shared/card.js";
import { laneLayout, laneOf, ticks } from "../shared/chart.js";
import { h, listen } from "../shared/dom.js";
import { runAction } from "../shared/exits.js";
import { MISSING, formatNumber } from "../shared/format.js";
import { mountPanel } from "../shared/panel.js";
import { offlineNote, rowTone, statusLine } from "../shared/status.js";
import { compareValues, tableView } from "../shared/table.js";

/** Rows drawn per group (or per flat page) before a "Show more" button: keeps the DOM small. */
const CHUNK = 100;
/** Presentation only: the marker of each verdict word Python chose (its tone is the payload's row_tones). */
const MARK = { ok: "●", zero: "×", vanishing: "▼", exploding: "▲", unknown: "○" };
const COLUMNS = [["op", "op"], ["module", "module"], ["index", "#"], ["grad_norm", "grad_norm"],
  ["grad_norm_raw", "raw"], ["rms", "rms"], ["numel", "numel"], ["verdict", "verdict"], ["is_frontier", "frontier"]];
const NUMERIC = new Set(["index", "grad_norm", "grad_norm_raw", "rms", "numel"]);

/** @typedef {import("../shared/payload_types.js").GradHealthReportPayload} Payload
 * @typedef {{ op: string, module: string, index: number, grad_norm: number, grad_norm_raw: number,
 *   rms: number, numel: number, verdict: Payload["data"]["verdicts"][number], is_frontier: boolean,
 *   y: number }} Row */

/** @param {Record<string, any>} arrays @param {Payload["data"]["verdicts"]} verdicts @returns {Row[] | null} */
function readRows(arrays, verdicts) {
  if (!arrays.ops) return null;
  const text = (/** @type {any} */ a) => new TextDecoder().decode(a.values);
  const ops = arrays.ops.values.length ? text(arrays.ops).split("\n") : [];
  const modules = text(arrays.modules).split("\n");
  const col = (/** @type {string} */ name) => arrays[name].values;
  return ops.map((op, i) => ({
    op, module: modules[col("module_id")[i]], index: col("index")[i], grad_norm: col("grad_norm")[i],
    grad_norm_raw: col("grad_norm_raw")[i], rms: col("rms")[i], numel: col("numel")[i],
    verdict: verdicts[col("verdict")[i]], is_frontier: col("is_frontier")[i] === 1, y: col("plot_y")[i],
  }));
}

/** [min, max] of log10 over the positive finite values (loops: a spread of 100k would overflow). */
function logRange(/** @type {number[]} */ values) {
  let lo = Infinity, hi = -Infinity;
  for (const v of values) if (v > 0 && Number.isFinite(v)) { lo = Math.min(lo, v); hi = Math.max(hi, v); }
  return lo <= hi ? [Math.log10(lo), Math.log10(hi)] : [0, 0];
}

/** A value Python left as None travels as NaN; a NaN of the recorded gradient itself stays "nan". */
const show = (/** @type {number} */ v, /** @type {Row} */ r) =>
  Number.isNaN(v) && !Number.isNaN(r.grad_norm_raw) ? MISSING : formatNumber(v);

/**
 * @param {Payload} payload
 * @param {import("../shared/panel.js").PanelContext} ctx
 */
function view(payload, ctx) {
  const d = payload.data;
  const maybeRows = readRows(ctx.arrays, d.verdicts);
  if (maybeRows === null) {  // above MAX_PANEL_ROWS: the kernel-paged generic table
    return reportCard(payload, ctx, [offlineNote("too many rows to send whole; the table pages them from Python."),
      ...payload.tables.map((t) => tableView(t, ctx))]);
  }
  /** @type {Row[]} */
  const rows = maybeRows;
  const st = ctx.state.get("gh") ?? { tab: "table", sort: null, desc: false, flagged: false, frontier: false,
    grouped: true, filter: "", open: null, shown: {} };
  ctx.state.set("gh", st);
  const [lo, hi] = logRange(rows.map((r) => r.y));
  const status = statusLine();
  const slot = h("div", { class: "tln-followup", hidden: true });

  const bar = (/** @type {Row} */ r) => {  // 0, inf and nan are labelled lanes, never a bar length
    const lane = laneOf(r.y, true);
    const frac = lane === "inf" ? 1 : lane ? 0 : hi > lo ? (Math.log10(r.y) - lo) / (hi - lo) : 1;
    return h("span", { class: "tln-gh-bar", "data-verdict": r.verdict, "data-lane": lane, "aria-hidden": "true" },
      h("span", { class: "tln-gh-bar-fill", style: { width: lane && lane !== "inf" ? "0" : `${Math.max(2, 100 * frac).toFixed(1)}%` } }),
      lane ? h("span", { class: "tln-gh-lane" }, lane) : null);
  };
  const rowEl = (/** @type {Row} */ r) => h("tr", { "data-op": r.op, "data-frontier": r.is_frontier ? "true" : null },
    h("th", { scope: "row" }, h("button", { type: "button", class: "tln-row-button", disabled: ctx.offline,
      "aria-label": `Lineage of ${r.op}` }, r.op)),
    h("td", null, r.module || "(root)"), h("td", { class: "tln-num" }, formatNumber(r.index)),
    h("td", { class: "tln-num" }, show(r.grad_norm, r)), h("td", { class: "tln-num" }, formatNumber(r.grad_norm_raw)),
    h("td", { class: "tln-num" }, show(r.rms, r)), h("td", { class: "tln-num" }, formatNumber(r.numel)),
    h("td", { "data-tone": rowTone(payload, r.verdict), class: "tln-gh-verdict" },
      h("span", { "aria-hidden": "true" }, `${MARK[/** @type {keyof MARK} */ (r.verdict)] ?? ""} `), r.verdict),
    h("td", { class: "tln-gh-frontier" }, r.is_frontier ? "◆ frontier" : ""), h("td", { class: "tln-gh-barcell" }, bar(r)));

  const heads = COLUMNS.map(([key, label]) => {
    const button = h("button", { type: "button", class: "tln-sort", "data-column": key }, label,
      h("span", { class: "tln-sort-icon", "aria-hidden": "true" }));
    listen(button, "click", () => {
      if (st.sort !== key) Object.assign(st, { sort: key, desc: false });
      else if (!st.desc) st.desc = true;
      else Object.assign(st, { sort: null, desc: false });
      redraw();
    }, ctx.signal);
    return h("th", { scope: "col", class: NUMERIC.has(key) ? "tln-num" : null, "data-column": key }, button);
  });
  const caption = h("caption", null, `Gradients of backward ${d.bwd} (${d.basis}; thresholds ` +
    `${formatNumber(d.vanishing_threshold)} / ${formatNumber(d.exploding_threshold)})`);
  const thead = h("thead", null, h("tr", null, heads, h("th", { scope: "col" }, `log10 ${d.basis === "rms" ? "rms" : "norm"}`)));
  const table = h("table", { class: "tln-table tln-gh-table" }, caption, thead);
  const count = h("p", { class: "tln-table-status", role: "status", "aria-live": "polite" });

  const more = (/** @type {string} */ key, /** @type {number} */ left) => {
    const button = h("button", { type: "button", class: "tln-button tln-quiet" }, `Show ${Math.min(left, CHUNK)} more (${left} hidden)`);
    listen(button, "click", () => { st.shown[key] = (st.shown[key] ?? CHUNK) + CHUNK; redraw(); }, ctx.signal);
    return h("tr", null, h("td", { colspan: COLUMNS.length + 1 }, button));
  };
  const body = (/** @type {Row[]} */ list, /** @type {string} */ key) => {
    const limit = st.shown[key] ?? CHUNK;
    return [...list.slice(0, limit).map(rowEl), list.length > limit ? more(key, list.length - limit) : null];
  };

  function redraw() {
    const needle = st.filter.toLowerCase();
    let list = rows.filter((r) => (!st.flagged || d.flag_verdicts.includes(r.verdict)) && (!st.frontier || r.is_frontier)
      && (!needle || r.module.toLowerCase().includes(needle)));
    if (st.sort) {
      const key = /** @type {keyof Row} */ (st.sort);
      list = list.map((r, i) => ({ r, i })).sort((a, b) => compareValues(a.r[key], b.r[key], st.desc) || a.i - b.i).map((x) => x.r);
    }
    /** @type {HTMLElement[]} */
    const bodies = [];
    if (!st.grouped) bodies.push(h("tbody", null, body(list, "*")));
    else {
      /** @type {Map<string, Row[]>} */
      const groups = new Map();
      for (const r of [...list].sort((a, b) => a.index - b.index)) if (!groups.has(r.module)) groups.set(r.module, []);
      for (const r of list) /** @type {Row[]} */ (groups.get(r.module)).push(r);
      if (st.open === null) st.open = new Set(rows.filter((r) => r.is_frontier).map((r) => r.module));
      for (const [module, members] of groups) {
        const isOpen = st.open.has(module);
        const flagged = members.filter((r) => d.flag_verdicts.includes(r.verdict)).length;
        const front = members.filter((r) => r.is_frontier).length;
        const toggle = h("button", { type: "button", class: "tln-gh-toggle", "aria-expanded": String(isOpen), "data-module": module },
          `${isOpen ? "▾" : "▸"} ${module || "(root)"}`, h("span", { class: "tln-count" },
            ` ${members.length} row${members.length === 1 ? "" : "s"} · ${flagged} flagged${front ? ` · ${front} frontier` : ""}`));
        listen(toggle, "click", () => { if (isOpen) st.open.delete(module); else st.open.add(module); redraw(); }, ctx.signal);
        bodies.push(h("tbody", { "data-module": module, "data-frontier": front ? "true" : null },
          h("tr", { class: "tln-gh-group" }, h("th", { scope: "rowgroup", colspan: COLUMNS.length + 1 }, toggle)),
          isOpen ? body(members, `m:${module}`) : null));
      }
    }
    table.replaceChildren(caption, thead, ...bodies);
    for (const th of heads) {
      const sorted = st.sort === th.dataset.column;
      th.setAttribute("aria-sort", sorted ? (st.desc ? "descending" : "ascending") : "none");
      /** @type {HTMLElement} */ (th.querySelector(".tln-sort-icon")).textContent = sorted ? (st.desc ? " ▼" : " ▲") : " ↕";
    }
    count.textContent = `${list.length} of ${rows.length} gradients shown`;
  }

  const check = (/** @type {"flagged" | "frontier" | "grouped"} */ key, /** @type {string} */ label) => {
    const box = h("input", { type: "checkbox", checked: st[key] });
    listen(box, "change", () => { st[key] = box.checked; redraw(); }, ctx.signal);
    return h("label", { class: "tln-gh-check" }, box, ` ${label}`);
  };
  const filter = h("input", { type: "search", class: "tln-filter", placeholder: "Filter by module", "aria-label": "Filter by module", value: st.filter });
  listen(filter, "input", () => { st.filter = filter.value; redraw(); }, ctx.signal);
  const allButton = (/** @type {string} */ label, /** @type {boolean} */ open) => {
    const b = h("button", { type: "button", class: "tln-button tln-quiet" }, label);
    listen(b, "click", () => { st.open = new Set(open ? rows.map((r) => r.module) : []); redraw(); }, ctx.signal);
    return b;
  };
  listen(table, "click", (event) => {
    const button = /** @type {Element} */ (event.target).closest(".tln-row-button");
    const op = button?.closest("tr")?.getAttribute("data-op");
    if (!op || ctx.offline) return;
    void runAction(ctx, { name: "lineage", args: { op }, title: `Lineage of ${op}`,
      button: /** @type {HTMLButtonElement} */ (button), status, slot });
  }, ctx.signal);
  redraw();

  const tablePanel = h("div", { class: "tln-gh-pane", role: "tabpanel", "aria-label": "Frontier table", hidden: st.tab !== "table" },
    h("div", { class: "tln-toolbar" }, check("flagged", "Flagged only"), check("frontier", "Frontier only"),
      check("grouped", "Group by module"), filter, allButton("Expand all", true), allButton("Collapse all", false), count),
    ctx.offline ? offlineNote("row clicks open an op's lineage only with a live kernel.") : null,
    h("div", { class: "tln-table-scroll" }, table), status, slot);
  const canvas = h("canvas", { class: "tln-gh-profile", width: 720, height: 260, role: "img",
    "aria-label": `Gradient norm profile of ${rows.length} ops on a log scale, thresholds drawn` });
  const hover = h("p", { class: "tln-muted tln-gh-hover", "aria-live": "polite" }, "Point at the chart to read the nearest op.");
  const legend = h("ul", { class: "tln-list tln-gh-legend" }, d.verdicts.map((/** @type {string} */ v) =>
    h("li", { "data-tone": rowTone(payload, v) }, `${MARK[/** @type {keyof MARK} */ (v)]} ${v} (${d.verdict_counts[v] ?? 0})`)),
  h("li", null, "◎ frontier"), h("li", null, "- - thresholds"));
  const chartPanel = h("div", { class: "tln-gh-pane", role: "tabpanel", "aria-label": "Norm profile", hidden: st.tab !== "profile" },
    canvas, legend, hover);
  const panes = { table: tablePanel, profile: chartPanel };
  /** @type {((mx: number) => Row | null) | null} */
  let pick = null;
  const tabList = h("div", { role: "tablist", class: "tln-gh-tabs", "aria-label": "grad_health views" });
  const select = (/** @type {"table" | "profile"} */ key) => {
    st.tab = key;
    for (const [k, pane] of Object.entries(panes)) pane.hidden = k !== key;
    for (const t of tabList.children) t.setAttribute("aria-selected", String(t.getAttribute("data-tab") === key));
    if (key === "profile") pick = drawProfile(canvas, rows, payload);
  };
  for (const [key, label] of [["table", "Frontier table"], ["profile", "Norm profile"]]) {
    const tab = h("button", { type: "button", role: "tab", class: "tln-gh-tab", "aria-selected": String(st.tab === key), "data-tab": key }, label);
    listen(tab, "click", () => select(/** @type {"table" | "profile"} */ (key)), ctx.signal);
    tabList.append(tab);
  }
  listen(canvas, "mousemove", (event) => {
    const box = canvas.getBoundingClientRect();
    const r = pick?.(((event.clientX - box.left) / box.width) * canvas.width);
    if (r) hover.textContent = `${r.op} (${r.module || "root"}): ${r.verdict}, ${d.basis} ` +
      `${show(d.basis === "rms" ? r.rms : r.grad_norm, r)}${r.is_frontier ? ", frontier" : ""}`;
  }, ctx.signal);
  if (st.tab === "profile") requestAnimationFrame(() => { if (!ctx.signal.aborted) select("profile"); });
  return reportCard(payload, ctx, [h("section", { class: "tln-gh" }, tabList, tablePanel, chartPanel)]);
}

/**
 * The profile on a canvas: x = execution order, y = Python's plotted value on a log axis; 0, inf
 * and nan in labelled lanes below / above the numeric range (`data-plot` says where, for tests
 * and tools). Returns the picker of the op nearest in x to a canvas point inside the plot area.
 * @param {HTMLCanvasElement} canvas @param {Row[]} rows @param {Payload} payload
 * @returns {((mx: number) => Row | null) | null}
 */
function drawProfile(canvas, rows, payload) {
  const d = payload.data;
  const g = canvas.getContext("2d");
  if (!g) return null;
  const css = getComputedStyle(canvas);
  const tone = (/** @type {string} */ t) => css.getPropertyValue(`--tln-${t}`).trim() || css.color;
  const W = canvas.width, H = canvas.height, L = 56, R = 12, T = 12, B = 28;
  const [a, b] = logRange([...rows.map((r) => r.y), d.vanishing_threshold, d.exploding_threshold]);
  const lo = Math.floor(a), hi = Math.max(Math.ceil(b), Math.floor(a) + 1);
  const lanes = laneLayout(rows.map((r) => r.y), true, T, H - B, 16);
  const top = lanes.plotTop, bottom = lanes.plotBottom;
  const x0 = rows.length ? rows[0].index : 0, x1 = rows.length ? rows[rows.length - 1].index : 1;
  const px = (/** @type {number} */ i) => L + ((i - x0) / (x1 - x0 || 1)) * (W - L - R);
  const py = (/** @type {number} */ v) => {
    const lane = laneOf(v, true);
    return lane ? /** @type {number} */ (lanes.centre.get(lane)) : top + (1 - (Math.log10(v) - lo) / (hi - lo || 1)) * (bottom - top);
  };
  g.clearRect(0, 0, W, H);
  g.font = `11px ${css.fontFamily}`;
  for (const lane of lanes.lanes) {
    const cy = /** @type {number} */ (lanes.centre.get(lane));
    g.fillStyle = tone("bg-alt");
    g.fillRect(L, cy - 8, W - L - R, 16);
    g.fillStyle = tone("fg");
    g.fillText(lane, 4, cy + 4);
  }
  canvas.dataset.plot = JSON.stringify({ top, bottom, lanes: Object.fromEntries(lanes.centre),
    vanishing: d.vanishing_threshold > 0 && Number.isFinite(d.vanishing_threshold) ? py(d.vanishing_threshold) : null });
  g.fillStyle = tone("fg-muted");
  g.strokeStyle = tone("border");
  for (const t of ticks(10 ** lo, 10 ** hi, true)) {
    g.beginPath(); g.moveTo(L, py(t)); g.lineTo(W - R, py(t)); g.stroke();
    g.fillText(formatNumber(t), 4, py(t) + 4);
  }
  g.fillText("op (execution order) →", L, H - 8);
  g.setLineDash([5, 4]);
  for (const [t, name] of /** @type {[number, string][]} */ ([[d.vanishing_threshold, "vanishing"], [d.exploding_threshold, "exploding"]])) {
    if (!(t > 0 && Number.isFinite(t))) continue;
    g.strokeStyle = tone(name === "vanishing" ? "warning" : "critical");
    g.beginPath(); g.moveTo(L, py(t)); g.lineTo(W - R, py(t)); g.stroke();
    g.fillText(`${name} ${formatNumber(t)}`, W - R - 110, py(t) - 3);
  }
  g.setLineDash([]);
  for (const r of rows) {
    const colour = tone(rowTone(payload, r.verdict));
    g.fillStyle = colour; g.strokeStyle = colour;
    const x = px(r.index), y = py(r.y);
    g.beginPath();  // the marker's shape repeats the verdict, so colour is never alone
    if (r.verdict === "zero") { g.moveTo(x - 3, y - 3); g.lineTo(x + 3, y + 3); g.moveTo(x + 3, y - 3); g.lineTo(x - 3, y + 3); g.stroke(); }
    else if (r.verdict === "vanishing" || r.verdict === "exploding") {
      const dir = r.verdict === "exploding" ? -1 : 1;
      g.moveTo(x - 4, y - 3 * dir); g.lineTo(x + 4, y - 3 * dir); g.lineTo(x, y + 4 * dir); g.closePath(); g.fill();
    } else {
      g.arc(x, y, 2.5, 0, 2 * Math.PI);
      if (r.verdict === "unknown") g.stroke(); else g.fill();
    }
    if (r.is_frontier) { g.strokeStyle = tone("fg"); g.beginPath(); g.arc(x, y, 7, 0, 2 * Math.PI); g.stroke(); }
  }
  return (mx) => {
    if (mx < L || mx > W - R) return null;
    let best = null, dist = Infinity;
    for (const r of rows) {
      const dx = Math.abs(px(r.index) - mx);
      if (dx < dist) { dist = dx; best = r; }
    }
    return best;
  };
}

function render(/** @type {any} */ props) {
  return mountPanel(props, view, { name: "grad_health", render });
}

export default { render };
