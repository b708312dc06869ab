// What the verdict does NOT cover: unavailable checks and disclosures, always visible (never folded).
import { h } from "./dom.js";
import { severityIcon } from "./status.js";

/**
 * @param {{ unavailable: { check: string, reason: string, code: string }[], disclosures: string[] }} payload
 */
export function disclosureSection(payload) {
  const { unavailable, disclosures } = payload;
  if (unavailable.length === 0 && disclosures.length === 0) return null;
  return h("section", { class: "tln-disclosure", "aria-label": "Scope of this report" },
    unavailable.length > 0 ? [
      h("h3", null, severityIcon("warning"), " Not checked ",
        h("span", { class: "tln-count" }, `(${unavailable.length})`)),
      h("ul", { class: "tln-list tln-unavailable" }, unavailable.map((u) => h("li", { "data-code": u.code },
        h("strong", null, u.check), ": ", u.reason))),
    ] : null,
    disclosures.length > 0 ? [
      h("h3", null, severityIcon("info"), " Notes"),
      h("ul", { class: "tln-list tln-notes" }, disclosures.map((d) => h("li", null, d))),
    ] : null);
}
