// Findings grouped by severity; each folds open (<details>) to where / fields / remedy.
import { h } from "./dom.js";
import { formatValue } from "./format.js";
import { severityIcon } from "./status.js";

/** @typedef {import("./payload.js").Finding} Finding */

const SEVERITIES = /** @type {const} */ (["critical", "warning", "info"]);
const TITLES = { critical: "Critical", warning: "Warnings", info: "Info" };

/**
 * The findings section: one group per severity present, in severity order (Python already
 * sorted them; the groups only add headings and counts).
 * @param {Finding[]} findings
 * @param {number} [total] how many findings the report holds when the payload carries fewer
 */
export function findingsSection(findings, total = findings.length) {
  if (findings.length === 0) {
    return h("section", { class: "tln-findings", "aria-label": "Findings" },
      h("p", { class: "tln-muted" }, "No findings."));
  }
  const groups = SEVERITIES.map((severity) => {
    const items = findings.filter((f) => f.severity === severity);
    if (items.length === 0) return null;
    return h("section", { class: "tln-findings-group", "data-severity": severity },
      h("h3", null, severityIcon(severity), ` ${TITLES[severity]} `,
        h("span", { class: "tln-count" }, `(${items.length})`)),
      h("ul", { class: "tln-list" }, items.map((f) => h("li", null, findingItem(f)))));
  });
  const rest = total - findings.length;
  return h("section", { class: "tln-findings", "aria-label": "Findings" }, groups,
    rest > 0 ? h("p", { class: "tln-muted" },
      `… and ${rest} more finding${rest === 1 ? "" : "s"} (all of them are in report.findings).`) : null);
}

/** @param {Finding} finding */
function findingItem(finding) {
  const head = [
    severityIcon(finding.severity),
    h("span", { class: "tln-sr" }, `${finding.severity}: `),
    h("code", { class: "tln-code" }, finding.code), " ",
    h("span", { class: "tln-message" }, finding.message),
  ];
  const body = findingBody(finding);
  if (body.length === 0) return h("p", { class: "tln-finding", "data-severity": finding.severity }, head);
  return h("details", { class: "tln-finding", "data-severity": finding.severity, "data-code": finding.code },
    h("summary", null, head), h("div", { class: "tln-finding-body" }, body));
}

/** @param {Finding} finding */
function findingBody(finding) {
  const parts = [];
  const where = finding.where;
  if (where && (where.op || where.module || where.file)) {
    /** @type {[string, string | Node][]} */
    const rows = [];
    if (where.op) rows.push(["op", h("code", null, where.op)]);
    if (where.module !== null && where.module !== undefined) {
      rows.push(["module", h("code", null, where.module === "" ? "(root)" : where.module)]);
    }
    if (where.file) {
      rows.push(["source", h("code", { title: where.file }, `${shortPath(where.file)}:${where.line ?? "?"}`)]);
    }
    parts.push(h("h4", null, "Where"), definitionList(rows));
    if (where.code) parts.push(h("pre", { class: "tln-source" }, h("code", null, where.code)));
  }
  const fields = Object.entries(finding.fields ?? {});
  if (fields.length > 0) {
    parts.push(h("h4", null, "Facts"), definitionList(fields.map(([k, v]) => [k, formatValue(v)])));
  }
  if (finding.remedy) parts.push(h("p", { class: "tln-remedy" }, h("strong", null, "Remedy: "), finding.remedy));
  return parts;
}

/**
 * A `<dl>` from [term, description] pairs.
 * @param {ReadonlyArray<readonly [string, string | Node] | ReadonlyArray<string | Node>>} rows
 */
export function definitionList(rows) {
  return h("dl", { class: "tln-dl" }, rows.map(([term, desc]) => [h("dt", null, term), h("dd", null, desc)]));
}

/**
 * The last two segments of a path (the full path stays in the title attribute).
 * @param {string} path
 */
export function shortPath(path) {
  const parts = path.replace(/\\/g, "/").split("/");
  return parts.length > 2 ? parts.slice(-2).join("/") : path;
}
