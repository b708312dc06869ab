// The lineage panel (LineageReport): the walked rings around an op, each node with its
// finiteness and values, expandable one ring at a time through Python.
import { reportCard } from "../shared/card.js";
import { formatNumber } from "../shared/format.js";
import { lineageView } from "../shared/lineage.js";
import { mountPanel } from "../shared/panel.js";

/**
 * @param {import("../shared/payload.js").Payload} payload
 * @param {import("../shared/panel.js").PanelContext} ctx
 */
function view(payload, ctx) {
  const d = payload.data;
  const note = d.num_shipped < d.num_nodes
    ? `Showing the nearest ${formatNumber(d.num_shipped)} of ${formatNumber(d.num_nodes)} nodes; expand a node to walk further.`
    : null;
  return reportCard(payload, ctx, [lineageView(d.nodes, ctx, { centre: d.root, highlight: d.highlight, role: d.highlight_role, note })]);
}

function render(/** @type {any} */ props) {
  return mountPanel(props, view, { name: "lineage", render });
}

export default { render };
