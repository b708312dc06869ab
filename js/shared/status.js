// Status and severity as word + icon (colour is never the only signal).
import { h } from "./dom.js";

/** @typedef {import("./payload_types.js").Tone} Tone */

/** @type {Record<Tone, string>} */
export const ICONS = { ok: "✔", warning: "▲", critical: "✖", info: "ℹ" };

/**
 * A badge: icon plus the status as a phrase. Python decided the tone and the phrase
 * (`payload.tone`, `payload.status_label`); the badge maps no word to a colour.
 * @param {{ status: string, status_label: string, tone: Tone }} verdict a payload (or a live
 *   increment) carrying its status, phrase and tone
 * @param {string} [label] prefix read by screen readers only, e.g. "Status"
 */
export function statusBadge({ status, status_label, tone }, label = "Status") {
  return h("span", { class: "tln-badge", "data-tone": tone, "data-status": status },
    h("span", { class: "tln-icon", "aria-hidden": "true" }, ICONS[tone] ?? ICONS.info),
    h("span", { class: "tln-sr" }, `${label}: `),
    h("span", { class: "tln-badge-word" }, status_label));
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
 * A visible note that a follow-up cannot run now, with Python's reason (shown beside the
 * disabled control before anything is clicked).
 * @param {string} reason
 */
export function unavailableNote(reason) {
  return h("span", { class: "tln-unavailable-note", "data-tone": "warning", "data-testid": "unavailable-note" },
    h("span", { class: "tln-icon", "aria-hidden": "true" }, "▲ "), h("strong", null, "Unavailable: "), reason);
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

/**
 * The tone of a row-level word (a verdict, a row status, a check state) as Python decided it
 * (the payload's `row_tones`); a word it did not send is shown as "info".
 * @param {{ row_tones: Record<string, string> }} payload @param {string} word
 */
export function rowTone(payload, word) {
  return payload.row_tones[word] ?? "info";
}
