// Status and severity as word + icon (colour is never the only signal).
import { h } from "./dom.js";

/** @typedef {"ok" | "warning" | "critical" | "info"} Tone */

// Presentation only: the verdict word comes from Python and is always shown as text.
/** @type {Record<string, Tone>} */
const TONE_OF_STATUS = {
  ok: "ok", clean: "ok", pass: "ok", passed: "ok", healthy: "ok", finite: "ok", none: "ok",
  warn: "warning", warning: "warning", suspect: "warning", partial: "warning",
  found: "critical", error: "critical", fail: "critical", failed: "critical",
  critical: "critical", known_broken: "critical", broken: "critical",
  match: "ok", agree: "ok", repeatable_under_test: "ok",
  diverged: "warning", disagree: "warning", inconclusive: "warning",
  refused: "critical", nondeterminism_observed: "critical",
};

/** @type {Record<Tone, string>} */
export const ICONS = { ok: "✔", warning: "▲", critical: "✖", info: "ℹ" };

/**
 * The tone used to style a status word (unknown words read as neutral `info`).
 * @param {string} status
 * @returns {Tone}
 */
export function toneOf(status) {
  return TONE_OF_STATUS[String(status).toLowerCase()] ?? "info";
}

/**
 * A badge: icon plus the status word itself.
 * @param {string} status
 * @param {string} [label] prefix read by screen readers only, e.g. "Status"
 */
export function statusBadge(status, label = "Status") {
  const tone = toneOf(status);
  return h("span", { class: "tln-badge", "data-tone": tone, "data-status": status },
    h("span", { class: "tln-icon", "aria-hidden": "true" }, ICONS[tone]),
    h("span", { class: "tln-sr" }, `${label}: `),
    h("span", { class: "tln-badge-word" }, status));
}

/**
 * The icon of a finding severity (`critical` / `warning` / `info`), hidden from screen readers
 * because the severity word is always printed beside it.
 * @param {"critical" | "warning" | "info"} severity
 */
export function severityIcon(severity) {
  return h("span", { class: "tln-icon", "data-tone": severity, "aria-hidden": "true" }, ICONS[severity] ?? ICONS.info);
}

/** A polite live region for a control's progress and errors. */
export function statusLine() {
  return h("span", { class: "tln-request-status", role: "status", "aria-live": "polite" });
}

/**
 * A visible note that this copy has no kernel.
 * @param {string} what
 */
export function offlineNote(what) {
  return h("p", { class: "tln-note", "data-testid": "offline-note" },
    h("span", { "aria-hidden": "true" }, "ℹ "), h("strong", null, "Offline copy: "), what);
}

/**
 * Show progress (`busy`), success (`ok`) or an error (`critical`, with an icon) in a status line.
 * @param {HTMLElement} el
 * @param {"busy" | "ok" | "critical"} tone
 * @param {string} text
 */
export function setStatus(el, tone, text) {
  el.dataset.tone = tone;
  el.replaceChildren(tone === "critical" ? h("span", { "aria-hidden": "true" }, "✖ ") : "", text);
}
