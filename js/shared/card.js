// The findings card: header (status, subject, lead), findings, scope, next steps.
import { h } from "./dom.js";
import { disclosureSection } from "./disclosure.js";
import { exitsSection } from "./exits.js";
import { findingsSection } from "./findings.js";
import { statusBadge } from "./status.js";

/**
 * The header line of every panel: the badge shows the tone and phrase Python chose.
 * @param {import("./payload.js").Payload} payload
 */
export function cardHeader(payload) {
  return h("header", { class: "tln-head" },
    h("div", { class: "tln-head-line" },
      statusBadge(payload),
      h("span", { class: "tln-type" }, payload.report_type),
      h("h2", { class: "tln-subject" }, payload.subject)),
    h("p", { class: "tln-lead" }, payload.lead));
}

/**
 * The whole card; `middle` (a panel's own content, e.g. tables or a chart) goes after the
 * findings and before the scope notes and next steps. An exit Python marked `is_primary` (the
 * step the report is there to offer) comes right under the lead.
 * @param {import("./payload.js").Payload} payload
 * @param {import("./panel.js").PanelContext} ctx
 * @param {Node[]} [middle]
 */
export function reportCard(payload, ctx, middle = []) {
  const primary = payload.exits.filter((e) => e.is_primary);
  return h("article", { class: "tln-card", "aria-label": `${payload.report_type} report: ${payload.subject}` },
    cardHeader(payload),
    exitsSection(primary, ctx, "First step"),
    findingsSection(payload.findings, ctx, payload.findings_total ?? payload.findings.length),
    middle,
    disclosureSection(payload),
    exitsSection(payload.exits.filter((e) => !e.is_primary), ctx));
}
