// The table panel: the findings card plus every table of the report (sort, filter, pages).
// A table whose attrs name a runnable `row_action` opens that follow-up for a clicked row,
// passing the row's `row_arg` column (default: the first column) as the argument of that name.
import { reportCard } from "../shared/card.js";
import { h } from "../shared/dom.js";
import { runAction } from "../shared/exits.js";
import { mountPanel } from "../shared/panel.js";
import { statusLine, unavailableNote } from "../shared/status.js";
import { tableView } from "../shared/table.js";

/**
 * @param {import("../shared/payload.js").Payload} payload
 * @param {import("../shared/panel.js").PanelContext} ctx
 */
function view(payload, ctx) {
  return reportCard(payload, ctx, payload.tables.map((table) => tableSection(table, payload, ctx)));
}

/**
 * @param {import("../shared/payload.js").TablePayload} table
 * @param {import("../shared/payload.js").Payload} payload
 * @param {import("../shared/panel.js").PanelContext} ctx
 */
function tableSection(table, payload, ctx) {
  const action = table.attrs?.row_action;
  const runnable = typeof action === "string" && payload.actions.includes(action) && !ctx.offline;
  if (!runnable) return tableView(table, ctx);
  const gone = ctx.unavailable[action];
  if (gone) {  // said before a row is clicked: Python knows the follow-up cannot run now
    const block = tableView(table, ctx);
    block.prepend(h("p", null, unavailableNote(`row clicks (${action}): ${gone}`)));
    return block;
  }
  const arg = typeof table.attrs.row_arg === "string" ? table.attrs.row_arg : table.columns[0];
  const status = statusLine();
  const slot = h("div", { class: "tln-followup", hidden: true });
  const block = tableView(table, ctx, {
    rowLabel: action,
    onRow: ({ row }) => void runAction(ctx, { name: action, args: { [arg]: row[arg] },
      title: `${action} ${String(row[arg])}`, button: null, status, slot }),
  });
  block.append(status, slot);
  return block;
}

function render(/** @type {any} */ props) {
  return mountPanel(props, view, { name: "table", render });
}

export default { render };
