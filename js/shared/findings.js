// Findings grouped by severity; each folds open (<details>) to where / fields / remedy.
import { h } from "./dom.js";
import { MISSING, formatLocation, formatNumber, formatValue } from "./format.js";
import { severityIcon } from "./status.js";

/** @typedef {import("./payload.js").Finding} Finding */

const SEVERITIES = /** @type {const} */ (["critical", "warning", "info"]);
const TITLES = { critical: "Critical", warning: "Warnings", info: "Info" };

/**
 * The findings section: one group per severity present, in severity order (Python already
 * sorted them; the groups only add headings and counts).
 * @param {Finding[]} findings
 * @param {{ locations: Record<string, string> }} ctx the panel context (notebook cell names)
 * @param {number} [total] how many findings the report holds when the payload carries fewer
 */
export function findingsSection(findings, ctx, total = findings.length) {
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
      h("ul", { class: "tln-list" }, items.map((f) => h("li", null, findingItem(f, ctx.locations)))));
  });
  const rest = total - findings.length;
  return h("section", { class: "tln-findings", "aria-label": "Findings" }, groups,
    rest > 0 ? h("p", { class: "tln-muted" },
      `… and ${rest} more finding${rest === 1 ? "" : "s"} (all of them are in report.findings).`) : null);
}

/** @param {Finding} finding @param {Record<string, string>} locations */
function findingItem(finding, locations) {
  const head = [
    severityIcon(finding.severity),
    h("span", { class: "tln-sr" }, `${finding.severity}: `),
    h("code", { class: "tln-code" }, finding.code), " ",
    h("span", { class: "tln-message" }, finding.message),
  ];
  const body = findingBody(finding, locations);
  if (body.length === 0) return h("p", { class: "tln-finding", "data-severity": finding.severity, "data-code": finding.code }, head);
  return h("details", { class: "tln-finding", "data-severity": finding.severity, "data-code": finding.code },
    h("summary", null, head), h("div", { class: "tln-finding-body" }, body));
}

/** @param {Finding} finding @param {Record<string, string>} locations */
function findingBody(finding, locations) {
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
      rows.push(["source", h("code", { title: `${where.file}:${where.line ?? "?"}` }, formatLocation(where.file, where.line, locations))]);
    }
    parts.push(h("h4", null, "Where"), definitionList(rows));
    if (where.code) parts.push(h("pre", { class: "tln-source" }, h("code", null, where.code)));
  }
  const fields = Object.entries(finding.fields ?? {});
  if (fields.length > 0) {
    parts.push(h("h4", null, "Facts"), factList(fields));
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

/** Records (a list of mappings) shown as a table of facts; longer lists are written inline. */
const MAX_FACT_RECORDS = 20;

/**
 * A finding's `fields` as a key/value list: numbers formatted as in the tables, a mapping of
 * plain values on one line (`zeroed 3 · nan_count 0`), a list of records as a small table (one
 * column per key), deeper mappings as nested lists, missing values as a dash (never raw JSON or
 * a Python repr).
 * @param {[string, unknown][]} entries
 * @returns {HTMLDListElement}
 */
export function factList(entries) {
  return h("dl", { class: "tln-dl tln-facts" }, entries.map(([key, value]) => [
    h("dt", null, key), h("dd", { title: typeof value === "number" ? String(value) : null }, factValue(value))]));
}

/** @param {unknown} value @returns {value is Record<string, unknown>} */
function isMapping(value) {
  return typeof value === "object" && value !== null && !Array.isArray(value) && !("$array" in value) && !("$bytes" in value);
}

/** @param {unknown} value */
function isPlain(value) {
  return !isMapping(value) && !Array.isArray(value);
}

/** @param {unknown} value @returns {string | Node} */
function factValue(value) {
  if (value === null || value === undefined) return MISSING;
  if (typeof value === "number") return formatNumber(value);
  if (Array.isArray(value) && value.length > 0 && value.length <= MAX_FACT_RECORDS && value.every(isMapping)) {
    return recordTable(/** @type {Record<string, unknown>[]} */ (value));
  }
  if (isMapping(value) && Object.keys(value).length > 0) {
    const entries = Object.entries(value);
    return entries.every(([, v]) => isPlain(v)) ? inlinePairs(entries) : factList(entries);
  }
  return formatValue(value);
}

/**
 * `key value · key value` on one line; a pair never breaks inside (only between pairs).
 * @param {[string, unknown][]} entries
 */
function inlinePairs(entries) {
  return h("span", { class: "tln-fact-pairs" }, entries.map(([key, value], i) => [
    i > 0 ? " · " : null,
    h("span", { class: "tln-fact-pair" }, h("span", { class: "tln-fact-key" }, key), " ", formatValue(value))]));
}

/**
 * A list of records as a small table: one column per key (first-seen order), one row each.
 * @param {Record<string, unknown>[]} records
 */
function recordTable(records) {
  const columns = [...new Set(records.flatMap((r) => Object.keys(r)))];
  return h("table", { class: "tln-fact-table" },
    h("thead", null, h("tr", null, columns.map((c) => h("th", { scope: "col" }, c)))),
    h("tbody", null, records.map((r) => h("tr", null, columns.map((c) => h("td", null, formatValue(r[c])))))));
}
