// The checks dashboard: a training loop's counters, check states, findings, skip ledger and a
// chart of per-group gradient norms and update ratios, and the timeline (checks/timeline.js),
// updating while the loop runs.
// Python decides every state word and finding; this module lays out what it was sent.
import { reportCard, cardHeader } from "../shared/card.js";
import { chart } from "../shared/chart.js";
import { h } from "../shared/dom.js";
import { formatNumber } from "../shared/format.js";
import { mountPanel } from "../shared/panel.js";
import { decodeFloats } from "../shared/payload.js";
import { rowTone, severityIcon } from "../shared/status.js";
import { tableView } from "../shared/table.js";
import { bindTimeline, liveTimeline, timelineView } from "./checks/timeline.js";

/** Chart rows kept per model (Python keeps at most 4096 too: checks/_series.py). */
const MAX_POINTS = 4096;
/** Attempts shown on the charts: the most recent ones. */
const CHART_ATTEMPTS = 120;
const COUNTERS = ["attempts", "accepted", "skipped", "raised", "backwards", "pending_backwards"];

/**
 * @typedef {import("../shared/payload_types.js").CheckReportPayload} Payload
 * @typedef {import("../shared/payload_types.js").Tone} Tone
 * @typedef {{ attempt: number, group: number, grad_norm: number | null, update_ratio: number | null }} Point
 * @typedef {{ status: string, status_label: string, tone: Tone, lead: string, counters: Record<string, any>,
 *   checks: Record<string, any>[], findings: { code: string, severity: "critical" | "warning" | "info", message: string }[],
 *   scale?: Record<string, any>, ranks?: Record<string, number>[] }} Latest  the increment (widgets/_dashboard.py push)
 * @typedef {{ latest: Latest | null, points: Point[], seq: number,
 *   timeline: import("./checks/timeline.js").Timeline | null }} Store  the timeline: the latest one sent
 * @typedef {{ liveEl: HTMLElement | null, payload: Payload | null,
 *   timelineOf: Store["timeline"], timelineEl: HTMLElement | null }} ViewState  timelineEl: this view's
 *   drawing of `timelineOf`, kept across increments that bring no new timeline (the hover stays)
 */

/**
 * Stores by the widget's `live_id`: anywidget hands `initialize` and each `render` their own
 * model proxy, so the proxy cannot be the key. A payload-only mount (no `live_id`) gets a
 * store of its own.
 * @type {Map<string, Store>}
 */
const stores = new Map();

/** @param {import("@anywidget/types").AnyModel<any>} model */
function storeOf(model) {
  const key = model.get("live_id");
  /** @type {Store} */
  const fresh = { latest: null, points: [], seq: 0, timeline: null };
  if (typeof key !== "string" || !key) return fresh;
  if (!stores.has(key)) stores.set(key, fresh);
  return /** @type {Store} */ (stores.get(key));
}

/**
 * Take one increment: counters and check states replace the previous ones, chart rows append.
 * @param {Store} store
 * @param {unknown} raw
 */
function ingest(store, raw) {
  const msg = decodeFloats(raw);
  if (!msg || msg.type !== "increment" || msg.seq <= store.seq) return false;
  store.seq = msg.seq;
  store.latest = msg;
  store.points.push(...(msg.points ?? []));
  if (store.points.length > MAX_POINTS) store.points.splice(0, store.points.length - MAX_POINTS);
  if (msg.timeline) store.timeline = liveTimeline(msg.timeline);
  return true;
}

/** @param {Record<string, any>} counters */
function countersView(counters) {
  return h("section", { class: "tln-ck-counters", "aria-label": "Counters", "aria-live": "polite" },
    COUNTERS.map((key) => h("div", { class: "tln-ck-counter" },
      h("span", { class: "tln-ck-counter-value", "data-counter": key }, formatNumber(counters[key] ?? null)),
      h("span", { class: "tln-ck-counter-label" }, key.replace("_", " ")))),
    h("p", { class: "tln-ck-provenance" }, `grouping: ${counters.step_provenance ?? "—"}`,
      counters.accumulation_factor ? ` · K = ${counters.accumulation_factor}` : ""));
}

/**
 * Every rank's counters side by side (DDP): rows and column order as Python built them.
 * @param {Record<string, number>[] | undefined} ranks
 */
function ranksView(ranks) {
  if (!ranks?.length) return null;
  const columns = Object.keys(ranks[0]);
  return h("table", { class: "tln-ck-ranks", "data-table": "ranks" },
    h("caption", null, `Ranks (counters agreed before optimizer.step() of step ${formatNumber(ranks[0].at_step ?? null)})`),
    h("thead", null, h("tr", null, columns.map((c) => h("th", { scope: "col" }, c.replace("_", " "))))),
    h("tbody", null, ranks.map((row) => h("tr", { "data-rank": String(row.rank) },
      columns.map((c, i) => i === 0 ? h("th", { scope: "row" }, formatNumber(row[c]))
        : h("td", { "data-col": c }, formatNumber(row[c])))))));
}

/** Where each check runs, in words (the report's site codes are kept in each cell's title). */
const SITE_WORDS = /** @type {Record<string, string>} */ ({
  "S-A": "as gradients arrive",
  "S-B": "before optimizer.step()",
  "S-C": "after optimizer.step()",
  "S-D": "between steps",
});

/** @param {Record<string, any>[]} checks @param {Payload} payload (its row_tones colour each state) */
function checksView(checks, payload) {
  if (!checks.length) return h("p", { class: "tln-ck-empty" }, "No check registered.");
  return h("table", { class: "tln-ck-checks" },
    h("caption", null, "Checks"),
    h("thead", null, h("tr", null, ["check", "runs", "action", "state", "judged", "findings"]
      .map((c) => h("th", { scope: "col" }, c)))),
    h("tbody", null, checks.map((c) => h("tr", { "data-check": c.name },
      h("th", { scope: "row" }, c.name), h("td", { title: c.site }, SITE_WORDS[c.site] ?? c.site), h("td", null, c.action),
      h("td", { "data-tone": rowTone(payload, c.state) },
        h("span", { class: "tln-ck-state", "data-state": c.state }, c.state)),
      h("td", null, formatNumber(c.evaluations)), h("td", null, formatNumber(c.findings))))));
}

/** @param {{ code: string, severity: "critical" | "warning" | "info", message: string }[]} findings */
function liveFindings(findings) {
  return h("section", { class: "tln-ck-findings", "aria-label": "Findings so far", "aria-live": "polite" },
    h("h3", null, `Findings so far: ${findings.length}`),
    findings.length ? h("ul", null, findings.map((f) => h("li", { "data-code": f.code },
      severityIcon(f.severity), h("strong", null, ` ${f.severity} `), h("code", null, f.code), `: ${f.message}`))) : null);
}

/** @param {Record<string, any> | undefined} scale */
function ledgerView(scale) {
  if (!scale) return null;
  const parts = scale.method === "scale_decrements"
    ? [`${formatNumber(scale.skipped)} skipped (scale decrements)`, `scale ${formatNumber(scale.current_scale)}`,
      `${formatNumber(scale.growths)} growths`]
    : [scale.reason ?? scale.method];  // words: the method code is in report.ledgers
  return h("p", { class: "tln-ck-ledger", "data-ledger": "scale" }, h("strong", null, "Skip ledger: "), parts.join(" · "));
}

/**
 * One line per param group over the most recent attempts that measured `key`.
 * @param {Point[]} points
 * @param {"grad_norm" | "update_ratio"} key
 * @param {string} title
 * @param {string} none what to say when no attempt measured it
 */
function seriesChart(points, key, title, none) {
  const measured = points.filter((p) => p[key] !== null && p[key] !== undefined);
  const attempts = [...new Set(measured.map((p) => p.attempt))].sort((a, b) => a - b).slice(-CHART_ATTEMPTS);
  if (!attempts.length) return h("p", { class: "tln-ck-empty", "data-chart": key }, `${title}: ${none}.`);
  const groups = [...new Set(measured.map((p) => p.group))].sort((a, b) => a - b);
  const index = new Map(attempts.map((a, i) => [a, i]));
  const series = groups.map((g) => {
    const values = new Float64Array(attempts.length).fill(NaN);
    for (const p of measured) if (p.group === g && index.has(p.attempt)) values[/** @type {number} */ (index.get(p.attempt))] = /** @type {number} */ (p[key]);
    return { name: `group ${g}`, values };
  });
  const svg = chart({ title, kind: "line", log: true, series, labels: attempts.map(String) });
  svg.dataset.chart = key;
  const legend = groups.length > 1 ? h("p", { class: "tln-ck-legend" }, groups.map((g, k) =>
    h("span", { class: `tln-series-${k % 6}` }, h("span", { class: "tln-ck-swatch", "aria-hidden": "true" }, "━"), ` group ${g}`))) : null;
  return h("figure", { class: "tln-ck-figure" }, h("figcaption", null, title), svg, legend);
}

/** @param {Point[]} points @param {boolean} running whether more attempts may still come */
function chartsView(points, running) {
  const none = running ? "not measured yet" : "no attempt measured it";
  return h("section", { class: "tln-ck-charts", "aria-label": "Charts" },
    seriesChart(points, "grad_norm", "Gradient norm per param group (pre-clip, by attempt)", none),
    seriesChart(points, "update_ratio", "Update ratio ||dw||/||w|| per param group (sampled attempts)", none));
}

/**
 * The chart rows of a final report, from its binary `series` arrays.
 * @param {import("../shared/panel.js").PanelContext} ctx
 * @returns {Point[]}
 */
function pointsFromArrays(ctx) {
  const series = ctx.arrays.series;
  const present = ctx.arrays.series_present;
  if (!series || !present) return [];
  const rows = series.shape[0];
  return Array.from({ length: rows }, (_, i) => ({
    attempt: series.values[4 * i], group: series.values[4 * i + 1],
    grad_norm: present.values[2 * i] ? series.values[4 * i + 2] : null,
    update_ratio: present.values[2 * i + 1] ? series.values[4 * i + 3] : null,
  }));
}

/**
 * The body of a running session: rebuilt on every increment.
 * @param {Store} store
 * @param {Payload} payload the snapshot it started from
 * @param {ViewState} mine this view (its timeline drawing is reused)
 */
function liveBody(store, payload, mine) {
  const d = payload.data;
  /** @type {Latest} */
  const latest = store.latest ?? { status: payload.status, status_label: payload.status_label, tone: payload.tone,
    lead: payload.lead, counters: d.counters, checks: d.checks_run, findings: payload.findings,
    scale: /** @type {Record<string, any> | undefined} */ (d.ledgers.scale) };
  const ledger = ledgerView(latest.scale);
  const ranks = ranksView(latest.ranks);
  return [cardHeader({ ...payload, status: latest.status, status_label: latest.status_label, tone: latest.tone, lead: latest.lead }),
    h("p", { class: "tln-ck-running", role: "status" }, "Session running: updates while the loop runs."),
    countersView(latest.counters), ...(ranks ? [ranks] : []), checksView(latest.checks, payload), liveFindings(latest.findings ?? []),
    liveTimelineEl(store, mine), ...(ledger ? [ledger] : []), chartsView(store.points, true)];
}

/**
 * This view's timeline, drawn again only when an increment brought a new one.
 * @param {Store} store
 * @param {ViewState} mine
 */
function liveTimelineEl(store, mine) {
  if (!mine.timelineEl || mine.timelineOf !== store.timeline) {
    mine.timelineEl = timelineView(store.timeline, true);
    mine.timelineOf = store.timeline;
  }
  return mine.timelineEl;
}

/**
 * A finished session (``is_final``: its report is final, also the one a CheckViolationError
 * carries) or a snapshot displayed on its own: counters, checks, charts from the report's
 * arrays, tables. Only a live dashboard (a ``live_id``) shows the running body.
 * @param {Payload} payload
 * @param {import("../shared/panel.js").PanelContext} ctx
 */
function reportBody(payload, ctx) {
  const d = payload.data;
  const ledger = ledgerView(/** @type {Record<string, any> | undefined} */ (d.ledgers.scale));
  const state = d.is_final
    ? h("p", { class: "tln-ck-final", role: "status" }, `Final report (${d.exit_reason ?? "completed"}).`)
    : h("p", { class: "tln-ck-snapshot", role: "status" },
      "Snapshot of a session still attached: counts up to the moment it was taken; display the session for live updates.");
  const timeline = d.timeline ? { summary: d.timeline, arrays: ctx.arrays } : null;
  return reportCard(payload, ctx, [state,
    countersView(d.counters), checksView(d.checks_run, payload), timelineView(timeline, !d.is_final), ...(ledger ? [ledger] : []),
    chartsView(pointsFromArrays(ctx), !d.is_final), ...payload.tables.map((t) => tableView(t, ctx))]);
}

/**
 * @param {Store} store
 * @param {ViewState} mine this view's live element
 * @param {Payload} payload
 * @param {import("../shared/panel.js").PanelContext} ctx
 */
function view(store, mine, payload, ctx) {
  mine.payload = payload;
  const live = ctx.model.get("live_id");
  if (!payload.data.is_final && typeof live === "string" && live) {
    mine.liveEl = h("div", { class: "tln-ck-live" }, liveBody(store, payload, mine));
    const article = h("article", { class: "tln-card", "aria-label": `checks dashboard: ${payload.subject}` }, mine.liveEl);
    bindTimeline(article, ctx.signal);
    return article;
  }
  mine.liveEl = null;
  const body = reportBody(payload, ctx);
  bindTimeline(body, ctx.signal);
  return body;
}

/**
 * Once per model (before any view): collect every increment, so a view opened later still has
 * the chart rows sent before it.
 * @param {{ model: import("@anywidget/types").AnyModel<any> }} props
 */
function initialize({ model }) {
  const store = storeOf(model);
  const onLive = () => ingest(store, model.get("live"));
  onLive();
  model.on("change:live", onLive);
  return () => model.off("change:live", onLive);
}

/** @param {{ model: import("@anywidget/types").AnyModel<any>, el: HTMLElement }} props */
function render(props) {
  const { model } = props;
  const store = storeOf(model);
  /** @type {ViewState} */
  const mine = { liveEl: null, payload: null, timelineOf: null, timelineEl: null };
  const cleanupPanel = mountPanel(props, (/** @type {Payload} */ payload, ctx) => view(store, mine, payload, ctx),
    { name: "checks", render });
  const onLive = () => {
    ingest(store, model.get("live"));  // a no-op when initialize already took this message
    if (mine.liveEl?.isConnected && mine.payload) mine.liveEl.replaceChildren(...liveBody(store, mine.payload, mine));
  };
  ingest(store, model.get("live"));
  model.on("change:live", onLive);
  return () => {
    cleanupPanel();
    model.off("change:live", onLive);
  };
}

export default { initialize, render };
