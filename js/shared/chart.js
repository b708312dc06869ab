// Small SVG charts (bars, lines, linear or log scale) drawn from numbers Python computed.
// Values the numeric axis cannot place (nan, inf, and 0 or less on a log axis) are drawn in
// labelled lanes outside the numeric range: "nan" and "inf" above it, "0" (and "< 0", "-inf")
// below it, never on the axis itself and never dropped.
import { svg as s } from "./dom.js";
import { formatNumber } from "./format.js";

const PAD = { left: 56, right: 12, top: 12, bottom: 40 };
/** Distinct series colours come from theme tokens --tln-series-0 .. --tln-series-5. */
const SERIES_COLOURS = 6;
/** Height of one lane (nan, inf, 0, ...) in SVG units, and the gap between it and the plot. */
const LANE_H = 14;
const LANE_GAP = 4;

/** @typedef {"nan" | "inf" | "-inf" | "0" | "< 0"} Lane */
/** Lanes above the numeric range, outermost first; then those below it, innermost first. */
export const TOP_LANES = /** @type {const} */ (["nan", "inf"]);
export const BOTTOM_LANES = /** @type {const} */ (["0", "< 0", "-inf"]);

/**
 * The lane of a value the axis cannot place, or null when it has a place on the axis.
 * @param {number} value
 * @param {boolean} log
 * @returns {Lane | null}
 */
export function laneOf(value, log) {
  if (Number.isNaN(value)) return "nan";
  if (value === Infinity) return "inf";
  if (value === -Infinity) return "-inf";
  if (log && value === 0) return "0";
  if (log && value < 0) return "< 0";
  return null;
}

/**
 * The lanes `values` need, and the y centre of each for a plot spanning `top`..`bottom` with
 * room reserved for them: returns the numeric range's new top and bottom too.
 * @param {Iterable<number>} values
 * @param {boolean} log
 * @param {number} top
 * @param {number} bottom
 * @param {number} [laneHeight]
 */
export function laneLayout(values, log, top, bottom, laneHeight = LANE_H) {
  /** @type {Set<Lane>} */
  const used = new Set();
  for (const v of values) {
    const lane = laneOf(v, log);
    if (lane) used.add(lane);
  }
  const above = TOP_LANES.filter((l) => used.has(l));
  const below = BOTTOM_LANES.filter((l) => used.has(l));
  /** @type {Map<Lane, number>} */
  const centre = new Map();
  above.forEach((lane, i) => centre.set(lane, top + laneHeight * (i + 0.5)));
  below.forEach((lane, i) => centre.set(lane, bottom - laneHeight * (below.length - i - 0.5)));
  return {
    lanes: [...above, ...below],
    centre,
    plotTop: top + (above.length ? above.length * laneHeight + LANE_GAP : 0),
    plotBottom: bottom - (below.length ? below.length * laneHeight + LANE_GAP : 0),
  };
}

/**
 * @typedef {{ name: string, values: ArrayLike<number> }} Series
 * @typedef {{ title: string, kind: "bar" | "line", series: Series[], labels?: string[],
 *   log?: boolean, yLabel?: string, width?: number, height?: number }} ChartSpec
 */

/**
 * A chart as an `<svg role="img">` with a title; each mark has a `<title>` tooltip with its
 * exact value. Values the axis cannot place are marked in their lane (`g.tln-chart-lane`,
 * labelled at the axis); a line breaks where a value leaves the axis.
 * @param {ChartSpec} spec
 * @returns {SVGSVGElement}
 */
export function chart(spec) {
  const { title, kind, series, log = false, yLabel = "", width = 560, height = 220 } = spec;
  const n = Math.max(0, ...series.map((x) => x.values.length));
  const labels = spec.labels ?? Array.from({ length: n }, (_, i) => String(i));
  const all = series.flatMap((x) => Array.from(x.values));
  const finite = all.filter((v) => laneOf(v, log) === null);
  const [lo, hi] = yRange(finite, log, kind);
  const layout = laneLayout(all, log, PAD.top, height - PAD.bottom);
  const plotTop = layout.plotTop;
  const plotH = layout.plotBottom - plotTop;
  const plotW = width - PAD.left - PAD.right;
  const tr = (/** @type {number} */ v) => (log ? Math.log10(v) : v);
  const y = (/** @type {number} */ v) => plotTop + plotH * (1 - (tr(v) - tr(lo)) / (tr(hi) - tr(lo) || 1));
  const band = plotW / Math.max(n, 1);
  const x = (/** @type {number} */ i) => PAD.left + band * (i + 0.5);

  const svg = /** @type {SVGSVGElement} */ (s("svg", { class: "tln-chart", viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": title }));
  svg.append(s("title", {}, title));
  const axes = s("g", { class: "tln-chart-axes" });
  for (const tick of ticks(lo, hi, log)) {
    axes.append(s("line", { x1: PAD.left, x2: width - PAD.right, y1: y(tick), y2: y(tick), class: "tln-chart-grid" }));
    axes.append(s("text", { x: PAD.left - 6, y: y(tick) + 4, "text-anchor": "end" }, formatNumber(tick)));
  }
  for (const lane of layout.lanes) {
    const cy = /** @type {number} */ (layout.centre.get(lane));
    const g = s("g", { class: "tln-chart-lane", "data-lane": lane });
    const band = `M${PAD.left},${cy - LANE_H / 2}h${plotW}v${LANE_H}h${-plotW}Z`;  // a path: rects are bars
    g.append(s("path", { d: band, class: "tln-chart-lane-band" }),
      s("text", { x: PAD.left - 6, y: cy + 4, "text-anchor": "end", class: "tln-chart-lane-label" }, lane));
    axes.append(g);
  }
  const step = Math.ceil(n / Math.max(1, Math.floor(plotW / 48)));
  labels.forEach((label, i) => {
    if (i % step === 0) axes.append(s("text", { x: x(i), y: height - PAD.bottom + 16, "text-anchor": "middle" }, label.length > 10 ? `${label.slice(0, 9)}…` : label));
  });
  if (yLabel) axes.append(s("text", { x: 12, y: plotTop + plotH / 2, transform: `rotate(-90 12 ${plotTop + plotH / 2})`, "text-anchor": "middle" }, yLabel + (log ? " (log)" : "")));
  svg.append(axes);

  const base = y(log ? lo : Math.max(lo, Math.min(0, hi)));
  series.forEach((ser, k) => {
    const g = s("g", { class: `tln-chart-series tln-series-${k % SERIES_COLOURS}`, "data-series": ser.name });
    const barW = (band * 0.8) / series.length;
    /** @type {string[]} */
    const path = [];
    let broken = true;
    Array.from(ser.values).forEach((v, i) => {
      const tip = `${ser.name} ${labels[i] ?? i}: ${formatNumber(v)}`;
      const lane = laneOf(v, log);
      if (lane) {
        broken = true;
        const mark = s("circle", { cx: x(i), cy: /** @type {number} */ (layout.centre.get(lane)), r: 3.5, class: "tln-chart-odd tln-chart-lane-mark", "data-lane": lane });
        mark.append(s("title", {}, tip));
        g.append(mark);
        return;
      }
      if (kind === "bar") {
        const left = x(i) - (band * 0.8) / 2 + k * barW;
        const rect = s("rect", { x: left, width: Math.max(barW - 1, 1), y: Math.min(y(v), base), height: Math.max(Math.abs(base - y(v)), 1) });
        rect.append(s("title", {}, tip));
        g.append(rect);
      } else {
        path.push(`${broken ? "M" : "L"}${x(i).toFixed(1)},${y(v).toFixed(1)}`);
        broken = false;
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
