// The recipe panel (tl.recipes): the findings card, the charts Python computed for the report
// (payload.data.charts, each a chart.js spec) and its tables. A live report (status "running",
// e.g. overfit_one_batch while it trains) redraws on every payload push; the progress line is a
// polite live region. Python chose every value and verdict; this module only lays them out.
import { reportCard } from "../shared/card.js";
import { chart } from "../shared/chart.js";
import { h } from "../shared/dom.js";
import { mountPanel } from "../shared/panel.js";
import { tableView } from "../shared/table.js";

/**
 * @typedef {{ title: string, kind: "bar" | "line", labels?: string[], log?: boolean,
 *   y_label?: string, series: { name: string, values: number[] }[] }} ChartPayload  one of
 *   `data.charts` (a plain dict in Python: the recipes' `charts` properties)
 * @typedef {import("../shared/payload_types.js").PayloadByType} ByType
 * @typedef {ByType["class_balance"] | ByType["confident_errors"] | ByType["gradient_flow"] | ByType["init_loss"]
 *   | ByType["overfit_one_batch"] | ByType["random_input_test"] | ByType["update_ratio"]
 *   | ByType["weight_distribution"]} Payload  the reports registered to this panel
 */

/** @param {ChartPayload} spec */
function chartFigure(spec) {
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
 * @param {Payload} payload
 * @param {import("../shared/panel.js").PanelContext} ctx
 */
function view(payload, ctx) {
  const specs = /** @type {ChartPayload[]} */ (payload.data.charts);
  const running = payload.status === "running";
  const middle = [
    running ? h("p", { class: "tln-recipe-progress", role: "status", "aria-live": "polite" },
      payload.lead) : null,
    ...specs.map(chartFigure),
    ...payload.tables.map((table) => tableView(table, ctx)),
  ].filter((node) => node !== null);
  return reportCard(payload, ctx, /** @type {Node[]} */ (middle));
}

function render(/** @type {any} */ props) {
  return mountPanel(props, view, { name: "recipe", render });
}

export default { render };
