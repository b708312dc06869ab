// Mean |value| per residual dimension of one block output as SVG bars; Python flagged the
// outlier dimensions (factor over the median dimension), this module labels them.
import { svg as s } from "../../shared/dom.js";
import { formatNumber } from "../../shared/format.js";

/**
 * Mean |value| per residual dimension as SVG bars, flagged dimensions labelled.
 * @param {{ values: ArrayLike<number>, median: number, outliers: { dim: number, factor: number }[],
 *   title: string }} spec
 */
export function dimBars(spec) {
  const { values, median, outliers, title } = spec;
  const width = 640, height = 160, top = 22;
  let max = 0;
  for (const v of Array.from(values)) if (Number.isFinite(v)) max = Math.max(max, v);
  const band = width / Math.max(values.length, 1);
  const y = (/** @type {number} */ v) => top + (height - top) * (1 - v / (max || 1));
  const flagged = new Map(outliers.map((o) => [o.dim, o.factor]));
  const svg = s("svg", { class: "tln-as-bars", viewBox: `0 0 ${width + 48} ${height + 14}`, role: "img",
    "aria-label": `${title}; flagged: ${outliers.map((o) => `dim ${o.dim} ${formatNumber(o.factor)}×`).join(", ") || "none"}` });
  svg.append(s("title", {}, title));
  Array.from(values).forEach((v, d) => {
    const bar = s("rect", { x: d * band, y: y(v), width: Math.max(band - 0.5, 0.5), height: height - y(v),
      class: flagged.has(d) ? "tln-as-bar-flagged" : "tln-as-bar" });
    bar.append(s("title", {}, `dim ${d}: ${formatNumber(v)}${flagged.has(d) ? ` (${formatNumber(flagged.get(d))}× median)` : ""}`));
    svg.append(bar);
  });
  svg.append(s("line", { x1: 0, x2: width, y1: y(median), y2: y(median), class: "tln-as-median" }));
  svg.append(s("text", { x: width + 4, y: y(median) + 3, class: "tln-as-bar-text" }, "median"));
  for (const o of outliers) {
    svg.append(s("text", { x: Math.min(Math.max((o.dim + 0.5) * band, 30), width - 30), y: y(values[o.dim]) - 4,
      "text-anchor": "middle", class: "tln-as-bar-label" }, `d${o.dim} ${formatNumber(o.factor)}×`));
  }
  svg.append(s("text", { x: 0, y: height + 12, class: "tln-as-bar-text" }, "dim 0"));
  svg.append(s("text", { x: width, y: height + 12, "text-anchor": "end", class: "tln-as-bar-text" }, `dim ${values.length - 1}`));
  return svg;
}
