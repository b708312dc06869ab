// The checks dashboard's timeline: the loss (min-max per column) on top, one layers x steps
// heatmap per metric the session measured, each finding a marker at its step. Python folded the
// steps into columns and chose the marks (report/_timeline.py); this module only draws them.
// A metric Python lists under `not_measured` is said in words, never drawn as zeros.
import { cellAt, heatmapCanvas, logRange, rampGradient } from "../../shared/heatmap.js";
import { h, listen, svg } from "../../shared/dom.js";
import { formatNumber } from "../../shared/format.js";
import { readArrays } from "../../shared/payload.js";

/**
 * @typedef {import("../../shared/payload_types.js").TimelineSummary} Summary
 * @typedef {import("../../shared/payload.js").ArrayValue} ArrayValue
 * @typedef {{ summary: Summary, arrays: Record<string, ArrayValue> }} Timeline
 * @typedef {{ metric: string, layers: string[], values: ArrayLike<number>, summary: Summary }} MapInfo
 */

const METRICS = ["grad_norm", "update_ratio", "activation_rms", "attention_logit"];
const TITLES = /** @type {Record<string, string>} */ ({
  grad_norm: "Gradient norm per block (pre-clip)",
  update_ratio: "Update ratio ||dw||/||w|| per block (sampled attempts)",
  activation_rms: "Activation RMS per block (probed forwards)",
  attention_logit: "Max pre-softmax attention logit per layer (probed forwards)",
});
/** The value's name in the hover line. */
const NAMES = /** @type {Record<string, string>} */ ({
  grad_norm: "gradient norm", update_ratio: "update ratio", activation_rms: "activation RMS",
  attention_logit: "max attention logit",
});
const LOSS_H = 90;

/** Hover data of each drawn map (read by the one delegated listener of a view). */
const maps = new WeakMap();
/** Hover data of each drawn loss curve. */
const losses = /** @type {WeakMap<Element, { low: Float32Array, high: Float32Array, summary: Summary }>} */ (new WeakMap());

/**
 * A live increment's timeline: arrays arrive as base64 float32 (widgets/_dashboard.py).
 * @param {{ summary: Summary, arrays: Record<string, { dtype: string, shape: number[], base64: string }> }} raw
 * @returns {Timeline}
 */
export function liveTimeline(raw) {
  /** @type {Record<string, any>} */
  const specs = {};
  for (const [name, spec] of Object.entries(raw.arrays ?? {})) {
    const bin = atob(spec.base64);
    const bytes = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
    specs[name] = { dtype: spec.dtype, shape: spec.shape, data: new DataView(bytes.buffer) };
  }
  return { summary: raw.summary, arrays: readArrays(specs) };
}

/**
 * The columns' attempt span in words.
 * @param {Summary} s
 * @param {number} column
 */
function span(s, column) {
  const first = column * s.attempts_per_column;
  return s.attempts_per_column === 1 ? `attempt ${first}` : `attempts ${first}–${first + s.attempts_per_column - 1}`;
}

/**
 * @param {Summary} s
 * @param {ArrayValue | undefined} loss float32 (2, columns): min row, max row
 */
function lossView(s, loss) {
  if (!s.has_loss || !loss) return h("p", { class: "tln-tl-missing", "data-chart": "loss" }, "Loss: not read (no backward root seen).");
  const n = s.columns;
  const low = loss.values.subarray(0, n);
  const high = loss.values.subarray(n, 2 * n);
  let lo = Infinity;
  let hi = -Infinity;
  for (const v of [...low, ...high]) if (Number.isFinite(v)) { lo = Math.min(lo, v); hi = Math.max(hi, v); }
  const chart = svg("svg", { viewBox: `0 0 ${n} ${LOSS_H}`, preserveAspectRatio: "none", class: "tln-tl-loss",
    role: "img", "aria-label": `loss from ${formatNumber(lo)} to ${formatNumber(hi)}`, "data-chart": "loss" });
  losses.set(chart, { low: Float32Array.from(low), high: Float32Array.from(high), summary: s });
  const y = (/** @type {number} */ v) => (hi > lo ? (LOSS_H - 4) - ((v - lo) / (hi - lo)) * (LOSS_H - 8) : LOSS_H / 2);
  /** @type {string[]} */
  const top = [];
  /** @type {string[]} */
  const bottom = [];
  for (let c = 0; c < n; c++) {
    if (Number.isFinite(high[c])) top.push(`${c + 0.5},${y(high[c]).toFixed(2)}`);
    if (Number.isFinite(low[c])) bottom.unshift(`${c + 0.5},${y(low[c]).toFixed(2)}`);
  }
  chart.append(svg("polygon", { points: [...top, ...bottom].join(" "), class: "tln-tl-band" }),
    svg("polyline", { points: top.join(" "), class: "tln-tl-line" }));
  for (const m of s.marks) {  // each finding's step across the loss, under its marker
    chart.append(svg("line", { x1: m.column + 0.5, x2: m.column + 0.5, y1: 0, y2: LOSS_H, class: "tln-tl-rule", "data-tone": m.severity }));
  }
  for (let c = 0; c < n; c++) {
    if (high[c] !== Infinity) continue;  // a non-finite loss: a tick at the top edge
    chart.append(svg("rect", { x: c, y: 0, width: 1, height: 6, class: "tln-tl-nonfinite" }));
  }
  return h("div", { class: "tln-tl-row" },
    h("div", { class: "tln-tl-label" }, h("strong", null, "loss"), h("br"), `${formatNumber(lo)} – ${formatNumber(hi)}`),
    h("div", { class: "tln-tl-plot" }, chart));
}

/** @param {Summary} s */
function marksView(s) {
  if (!s.marks.length) return null;
  return h("div", { class: "tln-tl-row" },
    h("div", { class: "tln-tl-label" }, "findings"),
    h("div", { class: "tln-tl-plot tln-tl-marks" }, s.marks.map((m) => h("button", {
      type: "button", class: "tln-tl-mark", "data-tone": m.severity, "data-mark-code": m.code, "data-finding": m.finding,
      style: { left: `${((m.column + 0.5) / s.columns) * 100}%` },
      title: `${m.code} (${m.severity}) at attempt ${m.attempt}: show the finding`,
      "aria-label": `${m.code} at attempt ${m.attempt}`,
    }, "▼"))));
}

/**
 * @param {Summary} s
 * @param {string} metric
 * @param {ArrayValue | undefined} array float32 (layers, columns)
 */
function mapView(s, metric, array) {
  const layers = s.layers[metric];
  if (!layers || !array) {
    return h("p", { class: "tln-tl-missing", "data-metric": metric },
      h("strong", null, `${TITLES[metric]}: not measured`), ` — ${s.not_measured[metric] ?? "no value arrived"}.`);
  }
  const range = logRange(array.values);
  const canvas = heatmapCanvas(array.values, layers.length, s.columns, range);
  canvas.className = "tln-tl-map";
  canvas.dataset.metric = metric;
  canvas.style.height = `${Math.max(3, layers.length) * 14}px`;
  canvas.setAttribute("role", "img");
  canvas.setAttribute("aria-label", `${TITLES[metric]}: ${layers.length} layers x ${s.columns} columns`);
  maps.set(canvas, /** @type {MapInfo} */ ({ metric, layers, values: array.values, summary: s }));
  const scale = range
    ? h("span", { class: "tln-tl-scale" }, formatNumber(10 ** range.lo), h("span", { class: "tln-tl-ramp", style: { background: rampGradient() } }), formatNumber(10 ** range.hi))
    : h("span", { class: "tln-tl-scale" }, "no positive finite value");
  return h("figure", { class: "tln-tl-figure", "data-metric": metric },
    h("figcaption", null, TITLES[metric], " ", scale),
    h("div", { class: "tln-tl-row" },
      h("div", { class: "tln-tl-label tln-tl-layers" }, layers.map((l) => h("div", { title: l }, l))),
      h("div", { class: "tln-tl-plot" }, canvas)));
}

/**
 * The timeline section, or a line saying why there is none.
 * @param {Timeline | null} timeline
 * @param {boolean} running whether more attempts may still come
 */
export function timelineView(timeline, running) {
  if (!timeline) {
    return h("p", { class: "tln-tl-missing", "data-timeline": "none" },
      running ? "Timeline: no attempt recorded yet." : "Timeline: not recorded (the session's stability check did not run).");
  }
  const s = timeline.summary;
  const last = s.columns * s.attempts_per_column - 1;
  return h("section", { class: "tln-tl", "data-timeline": "", "aria-label": "Timeline" },
    h("h3", null, "Timeline"),
    h("p", { class: "tln-tl-scope" },
      `attempts 0–${formatNumber(last)} in ${formatNumber(s.columns)} columns of ${formatNumber(s.attempts_per_column)}; `,
      "each cell is the largest value of its attempts (log colour scale); hatched: not measured; ",
      h("span", { class: "tln-tl-key-nonfinite" }, "■"), " not finite.",
      s.layers_dropped ? ` ${formatNumber(s.layers_dropped)} layer(s) beyond the limit not drawn.` : ""),
    lossView(s, timeline.arrays.timeline_loss), marksView(s),
    METRICS.map((m) => mapView(s, m, timeline.arrays[`timeline_${m}`])),
    h("div", { class: "tln-tl-tip", role: "status", hidden: true }));
}

/**
 * Hover (layer, step, value) and marker clicks for every timeline under `root`, through one
 * delegated listener each, so a live body rebuilt per increment adds none.
 * @param {HTMLElement} root
 * @param {AbortSignal} signal
 */
export function bindTimeline(root, signal) {
  listen(root, "pointermove", (/** @type {PointerEvent} */ event) => {
    const target = /** @type {Element} */ (event.target);
    const section = target.closest?.(".tln-tl");
    const tip = /** @type {HTMLElement | null} */ (section?.querySelector(".tln-tl-tip") ?? null);
    if (!tip) return;
    const curve = target.closest?.(".tln-tl-loss");
    const loss = curve ? losses.get(curve) : undefined;
    if (curve && loss) {
      const box = curve.getBoundingClientRect();
      const column = Math.floor(((event.clientX - box.left) / box.width) * loss.summary.columns);
      if (column < 0 || column >= loss.summary.columns) { tip.hidden = true; return; }
      const [low, high] = [loss.low[column], loss.high[column]];
      tip.textContent = `loss · ${span(loss.summary, column)} · `
        + (Number.isNaN(high) ? "not read" : low === high ? formatNumber(high) : `${formatNumber(low)} – ${formatNumber(high)}`);
      tip.dataset.layer = "loss";
      tip.dataset.column = String(column);
      tip.hidden = false;
      return;
    }
    const info = target instanceof HTMLCanvasElement ? maps.get(target) : undefined;
    const cell = info ? cellAt(/** @type {HTMLCanvasElement} */ (target), event) : null;
    if (!info || !cell) { tip.hidden = true; return; }
    const value = info.values[cell.row * info.summary.columns + cell.column];
    const layer = info.layers[cell.row];
    tip.textContent = `${layer} · ${span(info.summary, cell.column)} · ${NAMES[info.metric]}: `
      + (Number.isNaN(value) ? "not measured" : value === Infinity ? "not finite" : formatNumber(value));
    tip.dataset.layer = layer;
    tip.dataset.column = String(cell.column);
    tip.hidden = false;
  }, signal);
  listen(root, "click", (/** @type {MouseEvent} */ event) => {
    const mark = /** @type {HTMLElement | null} */ ((/** @type {Element} */ (event.target)).closest?.(".tln-tl-mark") ?? null);
    if (!mark) return;
    const code = mark.dataset.markCode ?? "";
    const row = /** @type {HTMLElement | null} */ (root.querySelector(`:is(li, .tln-finding)[data-code="${CSS.escape(code)}"]`));
    if (!row) return;
    if (row instanceof HTMLDetailsElement) row.open = true;
    root.querySelectorAll("[data-jumped]").forEach((e) => e.removeAttribute("data-jumped"));
    row.dataset.jumped = "";
    row.tabIndex = -1;
    row.scrollIntoView({ block: "nearest" });
    row.focus({ preventScroll: true });
  }, signal);
}
