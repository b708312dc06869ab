// The triage panel (tl.recipes.triage): the root cause at the top with its remedy, then the
// checklist in run order (status word + icon per row, the key number), each finished row
// folding open into its recipe's own view (recipe/view.js). While the triage runs (status
// "running") a progress bar says which check runs and the overfit loss curve grows below it.
// Python ranked the findings, chose every status and tone; this module lays them out.
import { chartFigure, recipeView } from "./recipe/view.js";
import { disclosureSection } from "../shared/disclosure.js";
import { h, listen } from "../shared/dom.js";
import { exitsSection } from "../shared/exits.js";
import { findingsSection } from "../shared/findings.js";
import { mountPanel } from "../shared/panel.js";
import { ICONS } from "../shared/status.js";

/**
 * @typedef {"ok" | "warning" | "critical" | "info"} Tone
 * @typedef {{ index: number, check: string, status: string, tone: Tone, lead: string,
 *   key: string | null, value: number | null, elapsed_s: number | null, reason: string | null,
 *   is_root_cause: boolean }} Row
 * @typedef {{ check: string, code: string, severity: string, message: string,
 *   remedy: string | null, cause: string, because: string, explains: string[] }} Root
 * @typedef {{ done: number, total: number, current: string }} Progress
 * @typedef {import("../shared/panel.js").PanelContext} PanelContext
 * @typedef {import("../shared/payload_types.js").PayloadByType["triage"]} Payload
 * @typedef {import("../shared/payload_types.js").AnyPayload} AnyPayload
 * @typedef {import("./recipe/view.js").ChartPayload} ChartPayload
 */

/**
 * An icon (hidden from screen readers) and the word beside it, in the tone Python chose.
 * @param {Tone} tone
 * @param {string} word
 * @param {string} label prefix read by screen readers only
 */
function toneWord(tone, word, label) {
  return h("span", { class: "tln-badge", "data-tone": tone },
    h("span", { class: "tln-icon", "aria-hidden": "true" }, ICONS[tone] ?? ICONS.info),
    h("span", { class: "tln-sr" }, `${label}: `),
    h("span", { class: "tln-badge-word" }, word));
}

/** @param {Payload} payload */
function header(payload) {
  const envelope = /** @type {any} */ (payload);  // tone and status_label: decided in Python
  return h("header", { class: "tln-head" },
    h("div", { class: "tln-head-line" },
      toneWord(envelope.tone ?? "info", envelope.status_label ?? payload.status, "Status"),
      h("span", { class: "tln-type" }, payload.report_type),
      h("h2", { class: "tln-subject" }, payload.subject)),
    h("p", { class: "tln-lead" }, payload.lead));
}

/** @param {Payload} payload */
function progressSection(payload) {
  const { done, total, current } = /** @type {Progress} */ (payload.data.progress);
  const chart = /** @type {ChartPayload | null} */ (payload.data.live_chart);
  return h("section", { class: "tln-triage-progress", "aria-label": "Progress" },
    h("progress", { max: total, value: done, "aria-label": `Checks finished: ${done} of ${total}` }),
    h("p", { class: "tln-recipe-progress", role: "status", "aria-live": "polite" },
      `${done} of ${total} checks finished; ${current}`,
      chart ? ` at step ${chart.labels?.length ?? 0}` : " running"),
    chart ? chartFigure(chart) : null);
}

/** @param {Root} root */
function rootSection(root) {
  const tone = root.severity === "critical" ? "critical" : "warning";
  return h("section", { class: "tln-triage-root", "data-tone": tone, "aria-label": "Root cause" },
    h("h3", null, h("span", { class: "tln-icon", "aria-hidden": "true" }, ICONS[tone]), " Root cause: ",
      h("code", { class: "tln-code" }, root.check), " ", h("code", { class: "tln-code" }, root.code)),
    h("p", { class: "tln-triage-root-message" }, root.message),
    root.remedy ? h("p", { class: "tln-remedy" }, h("strong", null, "Remedy: "), root.remedy) : null,
    root.explains.length > 0 ? h("p", { class: "tln-muted" },
      `${root.explains.length} other finding${root.explains.length === 1 ? "" : "s"} follow from it (${root.because}): `,
      root.explains.map((name, i) => [i ? ", " : "", h("code", null, name)])) : null);
}

/**
 * A row's folded body: its recipe's view, drawn the first time the row opens. The view gets
 * its own state map, so two tables named alike in different checks keep separate sort orders.
 * @param {Row} row
 * @param {AnyPayload} payload the row's report payload
 * @param {PanelContext} ctx
 */
function rowDetails(row, payload, ctx) {
  const opened = /** @type {Set<string>} */ (ctx.state.get("open") ?? new Set());
  ctx.state.set("open", opened);
  const body = h("div", { class: "tln-triage-body" });
  const details = h("details", { class: "tln-triage-fold", open: opened.has(row.check) }, rowSummary(row, "summary"), body);
  const draw = () => {
    if (details.open) opened.add(row.check);
    else opened.delete(row.check);
    if (details.open && body.childElementCount === 0) {
      const key = `row:${row.check}`;
      const state = ctx.state.get(key) ?? new Map();
      ctx.state.set(key, state);
      body.append(h("div", { class: "tln-panel", "data-panel": "recipe" }, recipeView(payload, { ...ctx, state })));
    }
  };
  listen(details, "toggle", draw, ctx.signal);
  if (details.open) draw();
  return details;
}

/**
 * The one-line summary of a row: icon, check, status word, key number, lead (or reason).
 * @param {Row} row
 * @param {"summary" | "div"} tag
 */
function rowSummary(row, tag) {
  return h(tag, { class: "tln-triage-line" },
    toneWord(row.tone, row.status, "Status"),
    h("span", { class: "tln-triage-check" }, row.check),
    row.is_root_cause ? h("span", { class: "tln-triage-tag", "data-tone": "critical" }, "root cause") : null,
    row.key ? h("span", { class: "tln-triage-key" }, row.key) : null,
    h("span", { class: "tln-triage-lead" }, row.reason ?? row.lead));
}

/**
 * @param {Payload} payload
 * @param {PanelContext} ctx
 */
function view(payload, ctx) {
  const data = payload.data;
  const rows = /** @type {Row[]} */ (data.rows ?? []);
  const reports = /** @type {Record<string, AnyPayload>} */ (/** @type {unknown} */ (data.reports ?? {}));
  const running = payload.status === "running";
  const list = h("ol", { class: "tln-triage-list" }, rows.map((row) => h("li", {
    "data-check": row.check, "data-status": row.status, "data-tone": row.tone, "data-root": row.is_root_cause || null,
  }, reports[row.check] ? rowDetails(row, reports[row.check], ctx) : rowSummary(row, "div"))));
  return h("article", { class: "tln-card", "aria-label": `triage report: ${payload.subject}` },
    header(payload),
    running ? progressSection(payload) : null,
    data.root_cause ? rootSection(data.root_cause) : null,
    h("section", { class: "tln-triage-checks", "aria-label": "Checks in run order" },
      h("h3", null, "Checks, in run order"), list),
    running ? null : h("div", { class: "tln-triage-ranked" },
      h("h3", null, "Findings, root cause first"),
      findingsSection(payload.findings, ctx, payload.findings_total ?? payload.findings.length)),
    running ? null : notCheckedSection(data.not_checked ?? []),
    disclosureSection(payload),
    exitsSection(payload.exits, ctx));
}

/**
 * What one call cannot see, each with its one-line hand check (Python wrote the list).
 * @param {{ what: string, how: string }[]} items
 */
function notCheckedSection(items) {
  if (items.length === 0) return null;
  return h("section", { class: "tln-triage-not-checked", "aria-label": "Not checked by this call" },
    h("h3", null, "Not checked by this call"),
    h("ul", null, items.map((item) => h("li", null, h("strong", null, item.what), ": ", item.how))));
}

function render(/** @type {any} */ props) {
  return mountPanel(props, view, { name: "triage", render });
}

export default { render };
