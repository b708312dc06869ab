// The cost panel (hot_path, recompute): hot source lines ranked with a bar per row and the line's
// code; recompute candidates with the remaining-activation-memory curve and the budget line.
// Python ranked the rows, chose the greedy set and computed every number; this module lays
// them out.
import { reportCard } from "../shared/card.js";
import { h, svg as s } from "../shared/dom.js";
import { MISSING, formatBytes, formatNumber, formatSourceLine } from "../shared/format.js";
import { mountPanel } from "../shared/panel.js";
import { rowDicts, tableView } from "../shared/table.js";

/** @typedef {import("../shared/payload_types.js").PayloadByType} ByType */

const CHART = { width: 560, height: 200, left: 64, right: 12, top: 12, bottom: 28 };

/** A metric value in its unit (bytes in binary units, durations in µs, FLOPs counted). */
function formatMetric(/** @type {number} */ value, /** @type {string} */ unit) {
  if (unit === "byte") return formatBytes(value);
  if (unit === "ns") return `${formatNumber(value / 1000)} µs`;
  return `${formatNumber(value)} FLOPs`;
}

/** A horizontal bar of `frac` (0..1) of its cell. */
function bar(/** @type {number} */ frac, /** @type {string | null} */ kind = null) {
  return h("span", { class: "tln-cost-bar", "data-kind": kind, "aria-hidden": "true" },
    h("span", { style: { width: `${(100 * Math.max(0, Math.min(1, frac))).toFixed(1)}%` } }));
}

/**
 * Source lines ranked: rank, share bar, value, line and its code text, the ops on it.
 * @param {ByType["hot_path"]} payload @param {Record<string, string>} locations
 */
function hotLines(payload, locations) {
  const d = payload.data;
  const table = payload.tables[0];
  const rows = rowDicts(table);
  const more = table.total_rows - rows.length;
  return h("section", { class: "tln-cost", "aria-label": "Hot source lines" },
    h("p", { class: "tln-muted" }, `${formatNumber(table.total_rows)} source lines by ${d.metric}, total `,
      formatMetric(d.total, d.unit), d.excluded ? ` · ${formatNumber(d.excluded)} op(s) not ranked` : ""),
    h("ol", { class: "tln-cost-lines" }, rows.map((r) => h("li", { "data-rank": r.rank },
      h("div", { class: "tln-cost-line-head" },
        h("span", { class: "tln-cost-rank" }, `#${r.rank}`), bar(r.share ?? 0),
        h("span", { class: "tln-cost-value" }, formatMetric(r.value, d.unit)),
        h("span", { class: "tln-muted" }, r.share === null ? MISSING : `${formatNumber(100 * r.share)}%`),
        h("code", { class: "tln-cost-where", title: r.source_line }, r.source_line ? formatSourceLine(r.source_line, locations) : MISSING)),
      h("pre", { class: "tln-cost-code" }, r.code ?? "(source text unavailable)"),
      h("p", { class: "tln-muted tln-cost-ops" }, `${formatNumber(r.num_ops)} op(s): ${r.funcs}`,
        r.modules.filter(Boolean).length ? ` · in ${r.modules.filter(Boolean).join(", ")}` : "")))),
    more > 0 ? h("p", { class: "tln-muted" }, `… and ${formatNumber(more)} more lines in the table below.`) : null);
}

/**
 * Remaining activation bytes after recomputing each ranked candidate, with the budget line.
 * @param {Record<string, any>[]} rows
 * @param {number} total
 * @param {number | null} budget
 */
function budgetChart(rows, total, budget) {
  const { width, height, left, right, top, bottom } = CHART;
  const top_ = Math.max(total, budget ?? 0, 1);
  const x = (/** @type {number} */ i) => left + ((width - left - right) * i) / Math.max(rows.length, 1);
  const y = (/** @type {number} */ v) => top + (height - top - bottom) * (1 - v / top_);
  const title = budget === null ? "Activation bytes left after recomputing the first N candidates"
    : `Activation bytes left after recomputing the first N candidates; budget ${formatBytes(budget)}`;
  const svg = s("svg", { class: "tln-chart tln-cost-chart", viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": title });
  svg.append(s("title", {}, title));
  for (const tick of [0, top_ / 2, top_]) {
    svg.append(s("line", { class: "tln-chart-grid", x1: left, x2: width - right, y1: y(tick), y2: y(tick) }));
    svg.append(s("text", { x: left - 6, y: y(tick) + 4, "text-anchor": "end" }, formatBytes(tick)));
  }
  svg.append(s("text", { x: (left + width) / 2, y: height - 6, "text-anchor": "middle" }, "candidates recomputed (rank order)"));
  const points = [[x(0), y(total)], ...rows.map((r, i) => [x(i + 1), y(r.remaining_bytes)])];
  svg.append(s("path", { class: "tln-cost-curve", d: points.map(([px, py], i) => `${i ? "L" : "M"}${px.toFixed(1)},${py.toFixed(1)}`).join(""), fill: "none" }));
  rows.forEach((r, i) => {
    const dot = s("circle", { cx: x(i + 1), cy: y(r.remaining_bytes), r: 3, class: r.is_selected ? "tln-cost-selected" : "tln-cost-dot" });
    dot.append(s("title", {}, `#${r.rank} ${r.op}: ${formatBytes(r.remaining_bytes)} left${r.is_selected ? " (selected)" : ""}`));
    svg.append(dot);
  });
  if (budget !== null) {
    svg.append(s("line", { class: "tln-cost-budget", x1: left, x2: width - right, y1: y(budget), y2: y(budget) }));
    svg.append(s("text", { class: "tln-cost-budget-label", x: width - right, y: y(budget) - 4, "text-anchor": "end" }, `budget ${formatBytes(budget)}`));
  }
  return svg;
}

/** Recompute candidates: the budget chart and the ranked list with bars of bytes freed. */
function candidates(/** @type {ByType["recompute"]} */ payload) {
  const d = payload.data;
  const table = payload.tables[0];
  const rows = rowDicts(table);
  const most = Math.max(1, ...rows.map((r) => r.bytes));
  const verdict = d.budget_bytes === null ? "no budget given: ranking only"
    : `${d.is_budget_reached ? "budget reached" : "budget NOT reached"}: recomputing the marked ops frees ${formatBytes(d.selected_bytes)} for ${formatNumber(d.selected_flops)} FLOPs`;
  return h("section", { class: "tln-cost", "aria-label": "Recompute candidates" },
    h("p", null, `Activation memory ${formatBytes(d.total_bytes)} · `, h("span", { "data-slot": "budget" }, verdict)),
    rows.length ? budgetChart(rows, d.total_bytes, d.budget_bytes) : h("p", { class: "tln-muted" }, "No candidate to recompute."),
    table.total_rows > rows.length ? h("p", { class: "tln-muted" }, `The chart shows the first ${formatNumber(rows.length)} of ${formatNumber(table.total_rows)} candidates.`) : null,
    h("ol", { class: "tln-cost-lines" }, rows.map((r) => h("li", { "data-op": r.op, "data-selected": r.is_selected ? "true" : null },
      h("div", { class: "tln-cost-line-head" },
        h("span", { class: "tln-cost-rank" }, `#${r.rank}`), bar(r.bytes / most, r.is_selected ? "selected" : null),
        h("code", null, r.op), h("span", { class: "tln-muted" }, r.module ? `in ${r.module}` : "(root)"),
        h("span", { class: "tln-cost-value" }, formatBytes(r.bytes)),
        h("span", { class: "tln-muted" }, `${formatNumber(r.flops)} FLOPs · ${formatNumber(r.bytes_per_flop)} B/FLOP`),
        r.is_selected ? h("span", { class: "tln-cost-mark" }, "✓ recompute") : null)))));
}

/**
 * @param {ByType["hot_path"] | ByType["recompute"]} payload
 * @param {import("../shared/panel.js").PanelContext} ctx
 */
function view(payload, ctx) {
  const main = payload.report_type === "recompute" ? candidates(payload) : hotLines(payload, ctx.locations);
  return reportCard(payload, ctx, [main,
    h("details", { class: "tln-cost-all" }, h("summary", null, "All rows as a table (sort, filter, page)"),
      payload.tables.map((t) => tableView(t, ctx)))]);
}

function render(/** @type {any} */ props) {
  return mountPanel(props, view, { name: "cost", render });
}
export default { render };
