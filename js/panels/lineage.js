// The lineage panel (LineageReport): the walked rings around an op, each node with its
// finiteness and values, expandable one ring at a time through Python. Once rings were added,
// the lead line says what is shown (Python's lead described the report as it arrived).
import { reportCard } from "../shared/card.js";
import { formatNumber } from "../shared/format.js";
import { lineageView } from "../shared/lineage.js";
import { mountPanel } from "../shared/panel.js";

/**
 * @param {import("../shared/payload_types.js").LineageReportPayload} payload
 * @param {import("../shared/panel.js").PanelContext} ctx
 */
function view(payload, ctx) {
  const d = payload.data;
  const note = d.num_shipped < d.num_nodes
    ? `Showing the nearest ${formatNumber(d.num_shipped)} of ${formatNumber(d.num_nodes)} nodes; expand a node to walk further.`
    : null;
  /** @type {HTMLElement | null} */
  let lead = null;
  let shown = "";
  const onShown = (/** @type {string} */ summary, /** @type {number} */ expanded) => {
    shown = expanded ? summary : payload.lead;
    if (lead) lead.textContent = shown;
  };
  const card = reportCard(payload, ctx, [lineageView(d.nodes, ctx,
    { centre: d.root, highlight: d.highlight, tones: payload.row_tones, role: d.highlight_role, note, onShown })]);
  lead = card.querySelector(".tln-lead");
  if (lead && shown) lead.textContent = shown;
  return card;
}

function render(/** @type {any} */ props) {
  return mountPanel(props, view, { name: "lineage", render });
}

export default { render };
