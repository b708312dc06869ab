// The recipe report view, shared by the recipe panel and the triage panel (each triage row
// expands into the view of its recipe's report): the findings card, the charts Python computed
// (payload.data.charts, each a chart.js spec), the tables. A live report (status "running")
// shows its progress line as a polite live region. Python chose every value and verdict.
import { reportCard } from "../../shared/card.js";
import { chart } from "../../shared/chart.js";
import { h } from "../../shared/dom.js";
import { tableView } from "../../shared/table.js";

/**
 * @typedef {{ title: string, kind: "bar" | "line", labels?: string[], log?: boolean,
 *   y_label?: string, series: { name: string, values: number[] }[] }} ChartPayload
 */

/**
 * One chart of a recipe report, with its caption and legend.
 * @param {ChartPayload} spec
 */
export function chartFigure(spec) {
  return h("figure", { class: "tln-recipe-chart" },
    chart({ title: spec.title, kind: spec.kind, labels: spec.labels, log: Boolean(spec.log),
      yLabel: spec.y_label ?? "", series: spec.series }),
    h("figcaption", null, spec.title,
      spec.series.length > 1 ? legend(spec.series) : null));
}

/** @param {{ name: string }[]} series */
function legend(series) {
  return h("span", { class: "tln-recipe-legend" },
    series.map((s, k) => h("span", { class: `tln-series-${k % 6}`, "data-series": s.name }, s.name)));
}

/**
 * The whole view of one recipe report.
 * @param {import("../../shared/payload.js").Payload} payload
 * @param {import("../../shared/panel.js").PanelContext} ctx
 */
export function recipeView(payload, ctx) {
  const charts = /** @type {{ charts?: ChartPayload[] }} */ (payload.data).charts;
  const specs = Array.isArray(charts) ? charts : [];
  const running = payload.status === "running";
  const middle = [
    running ? h("p", { class: "tln-recipe-progress", role: "status", "aria-live": "polite" },
      payload.lead) : null,
    ...specs.map(chartFigure),
    ...payload.tables.map((table) => tableView(table, ctx)),
  ].filter((node) => node !== null);
  return reportCard(payload, ctx, /** @type {Node[]} */ (middle));
}
