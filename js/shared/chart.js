// Small SVG charts (bars, lines, linear or log scale) drawn from numbers Python computed.
import { formatNumber } from "./format.js";

const SVG = "http://www.w3.org/2000/svg";
const PAD = { left: 56, right: 12, top: 12, bottom: 40 };
/** Distinct series colours come from theme tokens --tln-series-0 .. --tln-series-5. */
const SERIES_COLOURS = 6;

/**
 * @typedef {{ name: string, values: ArrayLike<number> }} Series
 * @typedef {{ title: string, kind: "bar" | "line", series: Series[], labels?: string[],
 *   log?: boolean, yLabel?: string, width?: number, height?: number }} ChartSpec
 */

/**
 * @param {string} tag
 * @param {Record<string, string | number>} [attrs]
 * @param {string} [text]
 */
function s(tag, attrs = {}, text) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  if (text !== undefined) el.textContent = text;
  return el;
}

/**
 * A chart as an `<svg role="img">` with a title; each mark has a `<title>` tooltip with its
 * exact value. Non-finite values (and values <= 0 on a log scale) are drawn as hollow markers
 * on the top edge labelled with their value, never silently dropped.
 * @param {ChartSpec} spec
 * @returns {SVGSVGElement}
 */
export function chart(spec) {
  const { title, kind, series, log = false, yLabel = "", width = 560, height = 220 } = spec;
  const n = Math.max(0, ...series.map((x) => x.values.length));
  const labels = spec.labels ?? Array.from({ length: n }, (_, i) => String(i));
  const plottable = (/** @type {number} */ v) => Number.isFinite(v) && (!log || v > 0);
  const finite = series.flatMap((x) => Array.from(x.values).filter(plottable));
  const [lo, hi] = yRange(finite, log, kind);
  const plotW = width - PAD.left - PAD.right;
  const plotH = height - PAD.top - PAD.bottom;
  const tr = (/** @type {number} */ v) => (log ? Math.log10(v) : v);
  const y = (/** @type {number} */ v) => PAD.top + plotH * (1 - (tr(v) - tr(lo)) / (tr(hi) - tr(lo) || 1));
  const band = plotW / Math.max(n, 1);
  const x = (/** @type {number} */ i) => PAD.left + band * (i + 0.5);

  const svg = /** @type {SVGSVGElement} */ (s("svg", { class: "tln-chart", viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": title }));
  svg.append(s("title", {}, title));
  const axes = s("g", { class: "tln-chart-axes" });
  for (const tick of ticks(lo, hi, log)) {
    axes.append(s("line", { x1: PAD.left, x2: width - PAD.right, y1: y(tick), y2: y(tick), class: "tln-chart-grid" }));
    axes.append(s("text", { x: PAD.left - 6, y: y(tick) + 4, "text-anchor": "end" }, formatNumber(tick)));
  }
  const step = Math.ceil(n / Math.max(1, Math.floor(plotW / 48)));
  labels.forEach((label, i) => {
    if (i % step === 0) axes.append(s("text", { x: x(i), y: height - PAD.bottom + 16, "text-anchor": "middle" }, label.length > 10 ? `${label.slice(0, 9)}…` : label));
  });
  if (yLabel) axes.append(s("text", { x: 12, y: PAD.top + plotH / 2, transform: `rotate(-90 12 ${PAD.top + plotH / 2})`, "text-anchor": "middle" }, yLabel + (log ? " (log)" : "")));
  svg.append(axes);

  const base = y(log ? lo : Math.max(lo, Math.min(0, hi)));
  series.forEach((ser, k) => {
    const g = s("g", { class: `tln-chart-series tln-series-${k % SERIES_COLOURS}`, "data-series": ser.name });
    const barW = (band * 0.8) / series.length;
    /** @type {string[]} */
    const path = [];
    Array.from(ser.values).forEach((v, i) => {
      const tip = `${ser.name} ${labels[i] ?? i}: ${formatNumber(v)}`;
      if (!plottable(v)) {
        const mark = s("circle", { cx: x(i), cy: PAD.top + 4, r: 4, class: "tln-chart-odd" });
        mark.append(s("title", {}, tip));
        g.append(mark, s("text", { x: x(i) + 7, y: PAD.top + 8, class: "tln-chart-odd-label" }, formatNumber(v)));
        return;
      }
      if (kind === "bar") {
        const left = x(i) - (band * 0.8) / 2 + k * barW;
        const rect = s("rect", { x: left, width: Math.max(barW - 1, 1), y: Math.min(y(v), base), height: Math.max(Math.abs(base - y(v)), 1) });
        rect.append(s("title", {}, tip));
        g.append(rect);
      } else {
        path.push(`${path.length ? "L" : "M"}${x(i).toFixed(1)},${y(v).toFixed(1)}`);
        const dot = s("circle", { cx: x(i), cy: y(v), r: 2.5 });
        dot.append(s("title", {}, tip));
        g.append(dot);
      }
    });
    if (path.length) g.prepend(s("path", { d: path.join(""), fill: "none" }));
    svg.append(g);
  });
  return svg;
}

/**
 * @param {number[]} values
 * @param {boolean} log
 * @param {"bar" | "line"} kind
 * @returns {[number, number]}
 */
function yRange(values, log, kind) {
  if (values.length === 0) return log ? [1, 10] : [0, 1];
  let lo = Math.min(...values);
  let hi = Math.max(...values);
  if (log) return [10 ** Math.floor(Math.log10(lo)), 10 ** Math.ceil(Math.log10(hi) + (hi === lo ? 1 : 0))];
  if (kind === "bar") [lo, hi] = [Math.min(lo, 0), Math.max(hi, 0)];
  if (lo === hi) [lo, hi] = [lo - 1, hi + 1];
  return [lo, hi];
}

/**
 * Axis ticks: powers of ten on a log scale, about five round numbers otherwise.
 * @param {number} lo
 * @param {number} hi
 * @param {boolean} log
 */
export function ticks(lo, hi, log) {
  if (log) {
    const out = [];
    const first = Math.ceil(Math.log10(lo));
    const last = Math.floor(Math.log10(hi));
    const every = Math.max(1, Math.ceil((last - first + 1) / 6));
    for (let e = first; e <= last; e += every) out.push(10 ** e);
    return out;
  }
  const raw = (hi - lo) / 5;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * mag).find((m) => m >= raw) ?? raw;
  const out = [];
  for (let t = Math.ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) out.push(Number(t.toPrecision(12)));
  return out;
}
