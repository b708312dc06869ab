// The NaN forensics panel (find_nan, bisect_nan, nonfinite, backward_nan reports): the lead card
// with the first bad value, the lineage around it (forward) or the fire ledger (backward), then
// findings, scope and next steps. Python decided every verdict; this module lays them out.
import { cardHeader } from "../shared/card.js";
import { disclosureSection } from "../shared/disclosure.js";
import { h } from "../shared/dom.js";
import { exitsSection } from "../shared/exits.js";
import { definitionList, findingsSection } from "../shared/findings.js";
import { formatLocation, formatNumber } from "../shared/format.js";
import { lineageView } from "../shared/lineage.js";
import { mountPanel } from "../shared/panel.js";
import { PAGE_ROWS, tableView } from "../shared/table.js";

/**
 * The five NaN reports this panel draws; `report_type` tells them apart.
 * @typedef {import("../shared/payload_types.js").PayloadByType} ByType
 * @typedef {ByType["find_nan"] | ByType["bisect_nan"] | ByType["nonfinite"] | ByType["backward_nan"]
 *   | ByType["investigation"]} Payload
 */

/**
 * The lead card: kind, op, module, source location and line, counts, AMP disclosure.
 * @param {Payload} payload
 * @param {import("../shared/panel.js").PanelContext} ctx
 */
function leadCard(payload, ctx) {
  const d = payload.data;
  const bad = d.first_bad_thing;
  // a backward report, or an investigation whose first bad value was born in the backward
  const backward = payload.report_type === "backward_nan" || bad?.phase === "backward";
  /** @type {[string, string | Node][]} */
  const rows = [];
  if (bad) {
    rows.push(["kind", h("strong", { class: "tln-nf-kind", "data-tone": "critical" }, bad.kind)]);
    if (backward) rows.push(["grad_fn", h("code", null, `${bad.node} (fire ${bad.fire_order})`)]);
    rows.push([backward ? "forward op" : "op", bad.op ? h("code", null, `${bad.op} (${bad.func})`) : "none recorded"]);
    rows.push(["module", bad.module === null ? "—" : bad.module === "" ? "(root)" : bad.module]);
    rows.push(["source", bad.file ? h("code", { title: `${bad.file}:${bad.line ?? "?"}` },
      formatLocation(bad.file, bad.line, ctx.locations)) : "—"]);
    // an op with no input has nothing to check: a model input's values came with the batch,
    // a factory op (torch.full) made its value from no tensor
    const node = "lineage_nodes" in d ? d.lineage_nodes.find((n) => n.label === bad.op) : undefined;
    rows.push(["inputs", backward ? (bad.is_proven ? "incoming gradients checked finite: born in this backward node"
      : "the seed gradient was already non-finite")
      : bad.func === "input" ? "none: a model input, the values came with the batch"
      : node && node.parents.length === 0 ? "none recorded: the value was made here from no tensor"
      : bad.is_proven ? "checked finite: the value was born here" : "not all checked: see the uncertainty zone"]);
    if (bad.num_batch_rows) {
      const more = bad.num_batch_rows > bad.batch_rows.length ? ", …" : "";
      rows.push(["batch rows", `${bad.batch_rows.join(", ")}${more} (${formatNumber(bad.num_batch_rows)} of ${formatNumber(bad.batch_size)})`]);
    }
    if (bad.stats) {
      rows.push(["value", `NaN ${formatNumber(bad.stats.nan_count)} · +Inf ${formatNumber(bad.stats.posinf_count)} · ` +
        `-Inf ${formatNumber(bad.stats.neginf_count)} of ${formatNumber(bad.stats.numel)}`]);
    }
  }
  if (payload.report_type === "backward_nan") {
    rows.push(["fires", Object.entries(payload.data.counts).map(([k, v]) => `${k} ${formatNumber(v)}`).join(" · ")]);
  } else {
    const f = payload.data;
    rows.push(["checked", `${formatNumber(f.num_checked)} of ${formatNumber(f.num_checked + f.num_unchecked)} ` +
      `floating-point outputs (${f.mode} values)`]);
    if (payload.report_type === "nonfinite" || payload.report_type === "investigation") {
      const n = payload.data;
      rows.push(["non-finite", `${formatNumber(n.num_nonfinite)} outputs, ${formatNumber(n.num_propagated)} of them propagated`]);
    }
    if (f.uncertainty_zone.length) rows.push(["uncertainty zone", h("code", null, f.uncertainty_zone.join(", "))]);
  }
  const title = !bad ? "No non-finite value" : backward ? (bad.is_proven ? "Born in backward" : "Non-finite seed")
    : payload.report_type === "nonfinite" ? "Origin" : "First non-finite output";
  return h("section", { class: "tln-nf-lead", "data-found": String(Boolean(bad)), "aria-label": title },
    h("h3", null, title), definitionList(rows),
    bad?.code ? h("pre", { class: "tln-source" }, h("code", null, bad.code)) : null,
    "amp_hint" in d && d.amp_hint ? h("p", { class: "tln-note tln-nf-amp" }, h("strong", null, "AMP: "), d.amp_hint) : null,
    "anomaly_recipe" in d && d.anomaly_recipe ? h("details", { class: "tln-nf-recipe" },
      h("summary", null, "Anomaly-mode recipe (for what a forward scan cannot see)"),
      h("pre", { class: "tln-source" }, h("code", null, d.anomaly_recipe))) : null);
}

/**
 * The fire ledger, opened at the page of the birth row, which is marked (class + text cell).
 * @param {Payload} payload @param {import("../shared/panel.js").PanelContext} ctx
 */
function ledger(payload, ctx) {
  const table = payload.tables[0];
  const birth = /** @type {number | null} */ (table.attrs.highlight_order ?? null);
  const key = `table:${table.name}`;
  if (birth !== null && !ctx.state.has(key)) {
    ctx.state.set(key, { sort: null, descending: false, filter: "", offset: Math.floor(birth / PAGE_ROWS) * PAGE_ROWS });
  }
  const block = tableView(table, ctx);
  const tbody = block.querySelector("tbody");
  if (birth !== null && tbody) {
    const mark = () => {
      for (const tr of tbody.querySelectorAll("tr")) {
        const isBirth = tr.getAttribute("data-index") === String(birth);
        tr.classList.toggle("tln-nf-birth", isBirth);
        if (isBirth) tr.setAttribute("aria-current", "true");
      }
    };
    const observer = new MutationObserver(mark);
    observer.observe(tbody, { childList: true });
    ctx.signal.addEventListener("abort", () => observer.disconnect());
    mark();
  }
  return h("section", { class: "tln-nf-ledger", "aria-label": "Transition ledger" },
    h("h3", null, "Transition ledger"),
    h("p", { class: "tln-muted" }, "Every grad_fn fire in measured order; the headlined birth row is marked ◆."), block);
}

/** @param {Payload} payload @param {import("../shared/panel.js").PanelContext} ctx */
function view(payload, ctx) {
  let middle = null;
  if (payload.report_type === "backward_nan") middle = ledger(payload, ctx);
  else {
    const d = payload.data;
    if (d.lineage_nodes.length && d.first_bad_thing?.op) {
      middle = lineageView(d.lineage_nodes, ctx, { centre: d.first_bad_thing.op, highlight: d.first_bad_thing.op,
        tones: payload.row_tones, role: d.lineage_role });
    }
  }
  return h("article", { class: "tln-card", "aria-label": `${payload.report_type} report: ${payload.subject}` },
    cardHeader(payload), leadCard(payload, ctx), middle,
    findingsSection(payload.findings, ctx, payload.findings_total ?? payload.findings.length),
    disclosureSection(payload), exitsSection(payload.exits, ctx));
}

function render(/** @type {any} */ props) {
  return mountPanel(props, view, { name: "nonfinite", render });
}

export default { render };
