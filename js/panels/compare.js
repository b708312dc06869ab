// The comparison panel (compare, bisect_precision, determinism): two runs side by side in
// execution order, the first divergence highlighted and scrolled to, per-row max abs / rel error
// bars, a filter to diverged rows, and both values' statistics on row click. Python chose every
// status and computed every statistic (payload.data.view); this module only lays them out.
import { reportCard } from "../shared/card.js";
import { h, listen } from "../shared/dom.js";
import { definitionList } from "../shared/findings.js";
import { MISSING, formatNumber, formatSourceLine } from "../shared/format.js";
import { mountPanel } from "../shared/panel.js";
import { rowTone } from "../shared/status.js";
import { tableView } from "../shared/table.js";

/** Presentation only: the marker of each tone (the tone of a row's status is the payload's row_tones). */
const MARK = { ok: "✓", critical: "≠", warning: "◐", info: "○" };
const STAT_KEYS = ["min", "max", "mean", "std", "nan_count", "inf_count"];

/** @typedef {{ position: number, op: string, func: string, module: string, kind: string, status: string,
 *   is_diverged: boolean, a: string, b: string, max_abs: number | null, max_rel: number | null,
 *   mismatched: number | null, numel: number | null, reason: string | null, source_line: string | null,
 *   stats_a: Record<string, number> | null, stats_b: Record<string, number> | null }} Row
 * @typedef {{ rows: Row[], diverged: Row[], diverged_total: number, first: string | null, total: number,
 *   offset: number, side_a: string, side_b: string }} View  the `view` property Python builds
 *   (report/_compare.py divergence_view), typed there as a plain dict
 * @typedef {import("../shared/payload_types.js").PayloadByType} ByType
 * @typedef {ByType["compare"] | ByType["bisect_precision"] | ByType["determinism"]} Payload */

/** [lo, hi] of log10 over the positive finite values (bars are drawn on a log scale). */
function logRange(/** @type {(number | null)[]} */ values) {
  let lo = Infinity, hi = -Infinity;
  for (const v of values) if (v !== null && v > 0 && Number.isFinite(v)) { lo = Math.min(lo, v); hi = Math.max(hi, v); }
  return lo <= hi ? [Math.log10(lo), Math.log10(hi)] : [0, 0];
}

/** An error bar plus its number: 0 draws nothing, inf/nan a full bar marked by its word. */
function errorBar(/** @type {number | null} */ value, /** @type {number[]} */ [lo, hi], /** @type {string} */ kind) {
  let frac = 0;
  if (value !== null && !Number.isFinite(value)) frac = 1;
  else if (value !== null && value > 0) frac = hi > lo ? Math.max(0.02, (Math.log10(value) - lo) / (hi - lo)) : 1;
  return h("td", { class: "tln-num tln-cmp-errcell", "data-kind": kind },
    h("span", { class: "tln-cmp-bar", "aria-hidden": "true" }, h("span", { style: { width: `${(100 * frac).toFixed(1)}%` } })),
    h("span", { class: "tln-cmp-errnum" }, formatNumber(value)));
}

/** Mode-specific facts above the rows (verdict slots, witnesses, coverage). @param {Payload} payload */
function summary(payload) {
  if (payload.report_type === "determinism") {
    const d = payload.data;
    const env = Object.entries(d.environment).map(([k, v]) => [k, Array.isArray(v) ? v.join(", ") : String(v)]);
    return h("section", { class: "tln-cmp-summary", "aria-label": "Verdicts" },
      h("p", null, "Same-seed runs: ", h("strong", { "data-slot": "verdict" }, d.verdict),
        ` · ${d.runs} runs, seed ${d.seed}, ${d.rtol === null && d.atol === null ? "bitwise" : `rtol ${formatNumber(d.rtol ?? 0)}, atol ${formatNumber(d.atol ?? 0)}`}`),
      h("p", null, "Seed sensitivity: ", h("strong", { "data-slot": "seed_verdict" }, d.seed_verdict),
        ` · total runs ${d.total_runs}`),
      d.rng_ops.length ? h("p", null, "RNG-consuming ops: ",
        d.rng_ops.map((r, i) => [i ? ", " : "", h("code", null, r.op), r.module ? ` in ${r.module}` : ""])) : null,
      h("details", { class: "tln-cmp-env" }, h("summary", null, `Environment witnesses (${env.length})`), definitionList(env)));
  }
  if (payload.report_type === "bisect_precision") {
    const d = payload.data;
    return h("section", { class: "tln-cmp-summary", "aria-label": "Precision" },
      h("p", null, `Native run vs ${d.reference_dtype} reference, seed ${d.seed}. `,
        d.found ? ["First op to lose precision: ", h("code", null, d.op), ` (${d.func_name})`,
          d.is_stochastic ? " — a random op: likely a mask mismatch, bisect in eval mode" : ""] : "No op left its tolerance."),
      d.skipped.length ? h("p", { class: "tln-muted" }, `${d.skipped.length} op(s) not compared: `,
        d.skipped.slice(0, 5).map((s) => `${s.op} (${s.reason})`).join("; ")) : null);
  }
  const d = payload.data;
  const c = d.counts;
  return h("section", { class: "tln-cmp-summary", "aria-label": "Counts" },
    h("p", null, `${formatNumber(c.compared)} of ${formatNumber(c.matched)} aligned ops compared · diverged: `,
      `${formatNumber(c.value_diverged)} value, ${formatNumber(c.shape_diverged)} shape, `,
      `${formatNumber(c.structure_diverged)} structure, ${formatNumber(c.only_in_a + c.only_in_b)} in one run only`,
      c.input_differs ? ` · ${formatNumber(c.input_differs)} input(s) differ` : ""));
}

/** Both sides' statistics of the selected row. */
function detail(/** @type {Row | undefined} */ row, /** @type {View} */ v, /** @type {Record<string, string>} */ locations,
  /** @type {string} */ tone) {
  if (!row) return h("p", { class: "tln-muted" }, "Select a row to see both values' statistics.");
  const side = (/** @type {string} */ title, /** @type {string} */ text, /** @type {Record<string, number> | null} */ stats) =>
    h("div", { class: "tln-cmp-side" }, h("h4", null, `${title}: ${text}`),
      stats ? definitionList(STAT_KEYS.map((k) => [k.replace("_count", ""), formatNumber(stats[k])]))
        : h("p", { class: "tln-muted" }, "no values compared"));
  return h("div", null,
    h("h3", null, h("code", null, row.op), ` ${row.func}`, row.module ? ` in ${row.module}` : ""),
    h("p", null, h("span", { class: "tln-cmp-status", "data-tone": tone }, row.status.replaceAll("_", " ")),
      row.reason ? ` — ${row.reason}` : "",
      row.mismatched !== null ? ` · ${formatNumber(row.mismatched)} of ${formatNumber(row.numel)} elements outside tolerance` : ""),
    row.source_line ? h("p", { class: "tln-muted" }, h("code", { title: row.source_line }, formatSourceLine(row.source_line, locations))) : null,
    h("div", { class: "tln-cmp-sides" }, side(v.side_a, row.a, row.stats_a), side(v.side_b, row.b, row.stats_b)));
}

/**
 * The side-by-side section; `refill` rebuilds it when view-only state (the filter) changes.
 * @param {Payload} payload
 * @param {import("../shared/panel.js").PanelContext} ctx
 * @param {() => void} refill
 */
function comparison(payload, ctx, refill) {
  const v = /** @type {View} */ (payload.data.view);
  const st = ctx.state.get("cmp") ?? { divergedOnly: false, open: v.first };
  ctx.state.set("cmp", st);
  /** @type {Row[]} */
  const rows = st.divergedOnly ? v.diverged : v.rows;
  const absRange = logRange(rows.map((r) => r.max_abs));
  const relRange = logRange(rows.map((r) => r.max_rel));
  const detailBox = h("section", { class: "tln-cmp-detail", "aria-label": "Row details", "aria-live": "polite" });
  const showDetail = () => {
    const open = rows.find((r) => r.op === st.open);
    detailBox.replaceChildren(detail(open, v, ctx.locations, open ? rowTone(payload, open.status) : "info"));
  };

  const body = h("tbody", null, rows.map((r) => {
    const tone = rowTone(payload, r.status);
    return h("tr", { "data-op": r.op, "data-first": r.op === v.first ? "true" : null, "data-diverged": r.is_diverged ? "true" : null,
      "aria-selected": r.op === st.open ? "true" : "false" },
      h("td", { class: "tln-num" }, formatNumber(r.position)),
      h("th", { scope: "row" }, h("button", { type: "button", class: "tln-row-button", "aria-label": `Details of ${r.op}` }, r.op)),
      h("td", null, r.module || "(root)"), h("td", { class: "tln-cmp-sidecell" }, r.a),
      h("td", { class: "tln-cmp-sidecell" }, r.b),
      h("td", null, h("span", { class: "tln-cmp-status", "data-tone": tone }, `${MARK[/** @type {keyof MARK} */ (tone)]} ${r.status.replaceAll("_", " ")}`),
        r.op === v.first ? h("span", { class: "tln-cmp-first" }, "◆ first divergence") : null),
      errorBar(r.max_abs, absRange, "abs"), errorBar(r.max_rel, relRange, "rel"));
  }));
  const scroller = h("div", { class: "tln-cmp-scroll" },
    h("table", { class: "tln-table tln-cmp-table" },
      h("caption", null, `${v.side_a} vs ${v.side_b}, execution order`),
      h("thead", null, h("tr", null, ["#", "op", "module", v.side_a, v.side_b, "status", "max abs error", "max rel error"]
        .map((c) => h("th", { scope: "col" }, c)))),
      body));
  listen(body, "click", (event) => {
    const tr = /** @type {Element} */ (event.target).closest("tr");
    if (!tr) return;
    st.open = tr.getAttribute("data-op");
    body.querySelectorAll("tr").forEach((row) => row.setAttribute("aria-selected", row === tr ? "true" : "false"));
    showDetail();
  }, ctx.signal);

  const toggle = h("button", { type: "button", class: "tln-button tln-quiet", "aria-pressed": st.divergedOnly ? "true" : "false" },
    `Only diverged rows (${formatNumber(v.diverged_total)})`);
  const jump = h("button", { type: "button", class: "tln-button tln-quiet", disabled: v.first === null }, "Jump to first divergence");
  listen(toggle, "click", () => { st.divergedOnly = !st.divergedOnly; refill(); }, ctx.signal);
  const scrollToFirst = () => {
    const first = /** @type {HTMLElement | null} */ (body.querySelector('tr[data-first="true"]'));
    if (first) scroller.scrollTop = Math.max(0, first.offsetTop - scroller.clientHeight / 3);
  };
  listen(jump, "click", () => { st.open = v.first; showDetail(); scrollToFirst(); }, ctx.signal);
  const note = st.divergedOnly
    ? `${formatNumber(rows.length)} of ${formatNumber(v.diverged_total)} diverged rows`
    : `positions ${formatNumber(v.offset)}–${formatNumber(v.offset + rows.length - 1)} of ${formatNumber(v.total)} rows (execution order)`;
  const section = h("section", { class: "tln-cmp", "aria-label": "Runs side by side" },
    summary(payload),
    h("div", { class: "tln-toolbar" }, toggle, jump, h("span", { class: "tln-muted" }, rows.length ? note : MISSING)),
    rows.length ? scroller : h("p", { class: "tln-muted" }, "No rows to show."),
    detailBox,
    h("details", { class: "tln-cmp-all" }, h("summary", null, "All rows as tables (sort, filter, page)"),
      payload.tables.map((t) => tableView(t, ctx))));
  showDetail();
  requestAnimationFrame(() => { if (!ctx.signal.aborted) scrollToFirst(); });
  return section;
}

/**
 * @param {Payload} payload
 * @param {import("../shared/panel.js").PanelContext} ctx
 */
function view(payload, ctx) {
  const host = h("div", { class: "tln-cmp-host" });
  /** @type {AbortController | null} */
  let local = null;
  const refill = () => {
    local?.abort();
    local = new AbortController();  // listeners of the replaced section go with it
    const signal = AbortSignal.any([ctx.signal, local.signal]);
    host.replaceChildren(comparison(payload, { ...ctx, signal }, refill));
  };
  refill();
  return reportCard(payload, ctx, [host]);
}

function render(/** @type {any} */ props) {
  return mountPanel(props, view, { name: "compare", render });
}
export default { render };
