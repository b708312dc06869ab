// The attention_sinks panel: a layers x heads grid coloured by each head's sink mass with the
// sink token written in the cell, a sortable list of heads beside it, the selected head's full
// attention pattern (layer/head stepper, arrow keys), and mean |value| per residual dimension.
// Python decided every flag (is_sink, outliers); this module only lays them out.
import { reportCard } from "../shared/card.js";
import { h, listen } from "../shared/dom.js";
import { formatNumber } from "../shared/format.js";
import { mountPanel } from "../shared/panel.js";
import { compareValues, tableView } from "../shared/table.js";
import { dimBars } from "./attention_sinks/dims.js";
import { inflate, patternView } from "./attention_sinks/pattern.js";

/** @typedef {import("../shared/payload_types.js").AttentionSinksReportPayload} Payload
 * @typedef {Payload["data"]} Data
 * @typedef {import("../shared/payload_types.js").AttentionLayer} Layer
 * @typedef {{ layer: number, head: number, position: number, token: string, mass: number,
 *   sink: boolean }} HeadRow */

const LIST_COLUMNS = /** @type {const} */ ([["layer", "layer"], ["head", "head"], ["token", "sink token"],
  ["mass", "mass"], ["sink", "flag"]]);

/**
 * @param {Payload} payload
 * @param {import("../shared/panel.js").PanelContext} ctx
 */
function view(payload, ctx) {
  const d = payload.data;
  const layers = d.layers;
  const tokens = d.tokens;
  const extra = payload.tables.filter((t) => t.name !== "heads").map((t) => tableView(t, ctx));
  const middle = [];
  if (layers.length) middle.push(explorer(d, layers, tokens, ctx));
  if (d.residual.length) middle.push(residualView(d, ctx));
  return reportCard(payload, ctx, [...middle, ...extra]);
}

/**
 * Grid + list + stepper + pattern, sharing one selection.
 * @param {Data} d @param {Layer[]} layers @param {string[]} tokens
 * @param {import("../shared/panel.js").PanelContext} ctx
 */
function explorer(d, layers, tokens, ctx) {
  const heads = layers[0].masses.length;
  const st = ctx.state.get("as") ?? { layer: firstSink(layers)[0], head: firstSink(layers)[1], sort: "mass", desc: true };
  ctx.state.set("as", st);
  const token = (/** @type {number} */ p) => tokens[p] ?? `#${p}`;
  /** @type {HeadRow[]} */
  const rows = layers.flatMap((l, layer) => l.masses.map((mass, head) => ({
    layer, head, position: l.positions[head], token: token(l.positions[head]), mass, sink: l.is_sink[head] })));

  const cells = layers.map((l, layer) => l.masses.map((mass, head) => {
    const button = h("button", { type: "button", class: "tln-as-cell", "data-layer": layer, "data-head": head,
      "data-sink": l.is_sink[head] ? "true" : null,
      "aria-label": `Layer ${layer} head ${head}: ${formatNumber(mass)} of attention on ${token(l.positions[head])} ` +
        `(position ${l.positions[head]})${l.is_sink[head] ? ", sink" : ""}`,
      title: `${l.label} head ${head}: ${formatNumber(mass)} on ${token(l.positions[head])}` },
    h("span", { class: "tln-as-token" }, `${l.is_sink[head] ? "◆ " : ""}${token(l.positions[head])}`),
    h("span", { class: "tln-as-mass" }, Number.isFinite(mass) ? mass.toFixed(2) : formatNumber(mass)));
    button.style.setProperty("--tln-as-mass", String(Number.isFinite(mass) ? Math.max(0, Math.min(1, mass)) : 0));
    if (mass > 0.55) button.dataset.dark = "true";
    listen(button, "click", () => select(layer, head, false), ctx.signal);
    return button;
  }));
  const grid = h("table", { class: "tln-table tln-as-grid" },
    h("caption", null, "Sink mass per head: mean attention on its top key position (◆ = flagged by Python)"),
    h("thead", null, h("tr", null, h("th", { scope: "col" }, "layer"),
      Array.from({ length: heads }, (_, head) => h("th", { scope: "col" }, `h${head}`)))),
    h("tbody", null, layers.map((l, layer) => h("tr", null,
      h("th", { scope: "row", title: `${l.label} in ${l.module || "(root)"}` }, `L${layer}`),
      cells[layer].map((c) => h("td", null, c))))));

  const listBody = h("tbody");
  const sortButtons = LIST_COLUMNS.map(([key, label]) => {
    const button = h("button", { type: "button", class: "tln-sort", "data-column": key }, label,
      h("span", { class: "tln-sort-icon", "aria-hidden": "true" }));
    listen(button, "click", () => {
      if (st.sort === key) st.desc = !st.desc;
      else Object.assign(st, { sort: key, desc: key === "mass" || key === "sink" });
      drawList();
    }, ctx.signal);
    return button;
  });
  const list = h("table", { class: "tln-table tln-as-list" }, h("caption", null, "Heads"),
    h("thead", null, h("tr", null, sortButtons.map((b) => h("th", { scope: "col", "data-column": b.dataset.column }, b)))),
    listBody);
  const drawList = () => {
    const key = /** @type {keyof HeadRow} */ (st.sort);
    const sorted = rows.map((r, i) => ({ r, i })).sort((a, b) => compareValues(a.r[key], b.r[key], st.desc) || a.i - b.i);
    listBody.replaceChildren(...sorted.map(({ r }) => {
      const open = h("button", { type: "button", class: "tln-row-button", "aria-label": `Show layer ${r.layer} head ${r.head}` },
        `L${r.layer}`);
      listen(open, "click", () => select(r.layer, r.head, false), ctx.signal);
      return h("tr", { "data-layer": r.layer, "data-head": r.head, "aria-current": r.layer === st.layer && r.head === st.head ? "true" : null },
        h("th", { scope: "row" }, open), h("td", { class: "tln-num" }, r.head), h("td", null, `${r.token} (${r.position})`),
        h("td", { class: "tln-num" }, formatNumber(r.mass)), h("td", null, r.sink ? "◆ sink" : ""));
    }));
    for (const b of sortButtons) {
      const on = b.dataset.column === st.sort;
      /** @type {HTMLElement} */ (b.parentElement).setAttribute("aria-sort", on ? (st.desc ? "descending" : "ascending") : "none");
      /** @type {HTMLElement} */ (b.querySelector(".tln-sort-icon")).textContent = on ? (st.desc ? " ▼" : " ▲") : " ↕";
    }
  };

  const where = h("span", { class: "tln-as-where", role: "status", "aria-live": "polite" });
  const step = (/** @type {string} */ label, /** @type {string} */ text, /** @type {number} */ dl, /** @type {number} */ dh) => {
    const b = h("button", { type: "button", class: "tln-button tln-quiet", "aria-label": label }, text);
    listen(b, "click", () => move(dl, dh), ctx.signal);
    return b;
  };
  const stepper = h("div", { class: "tln-as-stepper", role: "group", "aria-label": "Layer and head" },
    step("Previous layer", "▲ layer", -1, 0), step("Next layer", "▼ layer", 1, 0),
    step("Previous head", "◀ head", 0, -1), step("Next head", "head ▶", 0, 1), where,
    h("span", { class: "tln-note" }, "Arrow keys: ←/→ head, ↑/↓ layer"));
  const slot = h("div", { class: "tln-as-slot" });
  const patterns = ctx.arrays.patterns;

  /** @param {number} dl @param {number} dh */
  function move(dl, dh) {
    select((st.layer + dl + layers.length) % layers.length, (st.head + dh + heads) % heads, true);
  }
  /** @param {number} layer @param {number} head @param {boolean} focus */
  function select(layer, head, focus) {
    Object.assign(st, { layer, head });
    for (const row of cells) for (const c of row) c.setAttribute("aria-pressed", "false");
    cells[layer][head].setAttribute("aria-pressed", "true");
    if (focus) cells[layer][head].focus();
    const l = layers[layer];
    // 0-based, as the grid and report.layers index them: "of 0–5", never "Layer 5 of 6"
    where.textContent = `Layer ${layer} (of 0–${layers.length - 1}) · head ${head} (of 0–${heads - 1}) · ` +
      `${formatNumber(l.masses[head])} on ` +
      `${token(l.positions[head])} (position ${l.positions[head]})${l.is_sink[head] ? " · sink" : ""}`;
    drawList();
    const summary = d.patterns;
    if (!patterns || !summary) {
      slot.replaceChildren(h("p", { class: "tln-note" }, "No attention patterns came with this report (see the notes)."));
      return;
    }
    const title = `Layer ${layer} (${l.label}) head ${head}`;
    inflate(/** @type {Uint8Array} */ (patterns.values)).then((raw) => {
      if (ctx.signal.aborted || st.layer !== layer || st.head !== head) return;
      slot.replaceChildren(patternView({ raw, layer, head, heads: summary.heads, positions: summary.positions,
        levels: summary.levels, tokens, sink: l.positions[head], title, signal: ctx.signal }));
    }, (err) => slot.replaceChildren(h("p", { class: "tln-note", role: "alert" }, `Cannot read the patterns: ${String(err)}`)));
  }

  const root = h("section", { class: "tln-as-explorer", tabindex: "0", "aria-label": "Attention sink explorer" },
    h("h3", null, "Sink heads"), h("div", { class: "tln-as-top" }, grid, h("div", { class: "tln-as-listbox" }, list)),
    h("h3", null, "Attention pattern"), stepper, slot);
  const KEYS = /** @type {Record<string, [number, number]>} */ ({ ArrowLeft: [0, -1], ArrowRight: [0, 1], ArrowUp: [-1, 0], ArrowDown: [1, 0] });
  listen(root, "keydown", (/** @type {KeyboardEvent} */ event) => {
    const delta = KEYS[event.key];
    if (!delta || (event.target instanceof HTMLElement && event.target.matches("input, select, textarea"))) return;
    event.preventDefault();
    move(...delta);
  }, ctx.signal);
  select(st.layer, st.head, false);
  return root;
}

/** The first flagged head (or 0, 0): where the explorer opens. @param {Layer[]} layers */
function firstSink(layers) {
  for (let layer = 0; layer < layers.length; layer++) {
    const head = layers[layer].is_sink.indexOf(true);
    if (head >= 0) return [layer, head];
  }
  return [0, 0];
}

/**
 * Per block output: a bar per residual dim (mean |value|), flagged dims labelled.
 * @param {Data} d @param {import("../shared/panel.js").PanelContext} ctx
 */
function residualView(d, ctx) {
  const sites = d.residual;
  const values = ctx.arrays.residual_mean_abs;
  const most = sites.reduce((best, s, i) => (s.outliers.length > sites[best].outliers.length ? i : best), 0);
  const st = ctx.state.get("as-res") ?? { site: most };
  ctx.state.set("as-res", st);
  const chooser = h("select", { "aria-label": "Block output" },
    sites.map((s, i) => h("option", { value: String(i), selected: i === st.site },
      `${s.module || s.label} (${s.outliers.length} flagged)`)));
  const slot = h("div");
  const draw = () => {
    const s = sites[st.site];
    if (!values) {
      slot.replaceChildren(h("p", { class: "tln-note" }, "Mean |value| per dim did not come with this report."));
      return;
    }
    const dims = values.shape[1];
    slot.replaceChildren(dimBars({ values: values.values.subarray(st.site * dims, (st.site + 1) * dims),
      median: s.median_mean_abs, outliers: s.outliers, title: `Mean |value| per dim of ${s.module || s.label} (${s.label})` }),
    h("p", { class: "tln-note" }, s.outliers.length
      ? `Flagged: ${s.outliers.map((o) => `dim ${o.dim} (${formatNumber(o.factor)}× the median dim)`).join(", ")}`
      : "No flagged dimension in this block output."));
  };
  listen(chooser, "change", () => { st.site = Number(chooser.value); draw(); }, ctx.signal);
  draw();
  return h("section", { class: "tln-as-residual" }, h("h3", null, "Outlier residual dimensions"),
    h("label", null, "Block output ", chooser), slot);
}

function render(/** @type {any} */ props) {
  return mountPanel(props, view, { name: "attention_sinks", render });
}
export default { render };
