// The spike forensics panel (session.spike_forensics()): the kept step's facts, a chart of each
// layer's jump against the previous step (activations, gradients, update; log axis, the jump
// line Python set), the per-sample losses with the samples Python says carry the loss, then
// the tables. Python ranked the rows and decided what jumped; this module lays them out.
import { reportCard } from "../shared/card.js";
import { chart } from "../shared/chart.js";
import { h, svg as s } from "../shared/dom.js";
import { definitionList } from "../shared/findings.js";
import { MISSING, formatBytes, formatNumber } from "../shared/format.js";
import { mountPanel } from "../shared/panel.js";
import { rowDicts, tableView } from "../shared/table.js";

/** @typedef {import("../shared/payload_types.js").PayloadByType["spike"]} Payload */

/** Layers drawn in the jump chart (the first rows: Python ranked them, largest jump first). */
const CHART_LAYERS = 12;
const MEASURES = /** @type {const} */ ([
  ["activation_jump", "activations (RMS)"],
  ["grad_jump", "gradient norm"],
  ["update_jump", "update ratio"],
]);

/** A jump as text: `2.76x`, `inf`, or a dash when not measured. */
function jumpText(/** @type {number | null} */ value) {
  if (value === null || value === undefined) return MISSING;
  return Number.isFinite(value) ? `${formatNumber(value)}x` : "inf";
}

/**
 * Horizontal grouped bars: one group per layer, one bar per measure, on a log axis centred at
 * 1x (no change); the dashed line is the jump Python judged by. A measure not taken is a dash.
 * @param {Record<string, any>[]} rows
 * @param {number} jump
 */
function jumpChart(rows, jump) {
  const shown = rows.slice(0, CHART_LAYERS);
  const left = 150, right = 60, top = 24, barH = 6, groupH = 3 * barH + 8, width = 600;
  const height = top + groupH * shown.length + 24;
  const values = shown.flatMap((r) => MEASURES.map(([c]) => r[c])).filter((v) => typeof v === "number" && v > 0 && Number.isFinite(v));
  const span = Math.max(1, ...values.map((v) => Math.abs(Math.log10(v))), Math.log10(jump) * 1.5);
  const x = (/** @type {number} */ v) => left + ((width - left - right) * (Math.log10(v) + span)) / (2 * span);
  const title = `Jump against the previous step per layer (log axis; ${formatNumber(jump)}x counts as a jump)`;
  const svg = s("svg", { class: "tln-chart tln-spike-chart", viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": title });
  svg.append(s("title", {}, title));
  for (const tick of [10 ** -span, 1, jump, 10 ** span]) {
    svg.append(s("line", { class: tick === jump ? "tln-spike-jump" : "tln-chart-grid", x1: x(tick), x2: x(tick), y1: top - 6, y2: height - 20 }));
    svg.append(s("text", { x: x(tick), y: height - 6, "text-anchor": "middle" }, tick === jump ? `${formatNumber(jump)}x` : `${formatNumber(tick)}x`));
  }
  MEASURES.forEach(([, name], k) => {
    svg.append(s("rect", { class: `tln-spike-key tln-series-${k}`, x: left + k * 140, y: 4, width: 10, height: 10 }));
    svg.append(s("text", { x: left + k * 140 + 14, y: 13 }, name));
  });
  shown.forEach((row, i) => {
    const y0 = top + i * groupH;
    const g = s("g", { class: "tln-spike-layer", "data-layer": row.layer, "data-jumped": row.is_jumped ? "true" : "false" });
    g.append(s("text", { x: left - 8, y: y0 + groupH / 2 + 2, "text-anchor": "end" }, `${row.is_jumped ? "▲ " : ""}${row.layer.length > 22 ? `…${row.layer.slice(-21)}` : row.layer}`));
    MEASURES.forEach(([column, name], k) => {
      const v = row[column];
      const y = y0 + k * barH;
      if (typeof v !== "number" || !(v > 0)) {
        g.append(s("text", { class: "tln-spike-missing", x: x(1) + 4, y: y + barH }, MISSING));
        return;
      }
      const end = Number.isFinite(v) ? x(Math.min(Math.max(v, 10 ** -span), 10 ** span)) : width - right;
      const rect = s("rect", { class: `tln-series-${k}`, x: Math.min(x(1), end), y, width: Math.max(Math.abs(end - x(1)), 1), height: barH - 1 });
      rect.append(s("title", {}, `${row.layer} ${name}: ${jumpText(v)}`));
      g.append(rect);
    });
    const best = Math.max(...MEASURES.map(([c]) => (typeof row[c] === "number" ? row[c] : 0)));
    g.append(s("text", { class: "tln-spike-value", x: width - right + 4, y: y0 + groupH / 2 + 2 }, best > 0 ? jumpText(best) : MISSING));
    svg.append(g);
  });
  return svg;
}

/**
 * The per-sample losses as bars (highest first, as Python ranked them) and the samples that
 * carry the loss by name.
 * @param {Record<string, any>[]} rows
 * @param {number} carry
 */
function samplesView(rows, carry) {
  const carrying = rows.filter((r) => r.carries);
  return h("section", { class: "tln-spike-samples", "aria-label": "Loss per sample" },
    h("h3", null, "Loss per sample"),
    chart({ title: "Loss per sample of the step's batch, highest first", kind: "bar", yLabel: "loss",
      series: [{ name: "loss", values: rows.map((r) => r.loss) }], labels: rows.map((r) => String(r.sample)), height: 180 }),
    carrying.length
      ? h("ul", { class: "tln-list tln-spike-carriers" }, carrying.map((r) => h("li", { "data-sample": String(r.sample) },
        h("strong", null, `▲ sample ${r.sample}`), ` loss ${formatNumber(r.loss)} · ${formatNumber(r.loss_to_median)}x the batch median · ${formatNumber(100 * r.share)}% of the batch's loss`)))
      : h("p", { class: "tln-muted" }, `No sample reaches ${formatNumber(carry)}x the batch median.`));
}

/**
 * @param {Payload} payload
 * @param {import("../shared/panel.js").PanelContext} ctx
 */
function view(payload, ctx) {
  const d = payload.data;
  if (payload.status === "not_kept") return reportCard(payload, ctx);
  const layers = payload.tables.find((t) => t.name === "layers");
  const samples = payload.tables.find((t) => t.name === "samples");
  const layerRows = rowDicts(layers);
  const sampleRows = rowDicts(samples);
  const median = d.loss !== null && d.loss_median ? ` (${formatNumber(d.loss / d.loss_median)}x its running median)` : "";
  /** @type {[string, string | Node][]} */
  const facts = [
    ["attempt", `${d.attempt ?? MISSING} · kept ${d.trigger === "spike" ? "at a loss spike" : "on every step"}`],
    ["loss", d.loss === null ? MISSING : `${formatNumber(d.loss)}${median}`],
    ["re-run loss", d.rerun_loss === null ? MISSING : `${formatNumber(d.rerun_loss)} (${d.loss_kind}, ${formatNumber(d.num_samples)} samples)`],
    ["kept on the host", formatBytes(d.kept_bytes)],
  ];
  return reportCard(payload, ctx, [
    h("section", { class: "tln-spike-facts", "aria-label": "The kept step" }, definitionList(facts)),
    h("section", { class: "tln-spike-layers", "aria-label": "Jump per layer" },
      h("h3", null, "What jumped against the previous step"),
      layerRows.length ? jumpChart(layerRows, d.jump) : h("p", { class: "tln-muted" }, "No layer was measured."),
      layers && layers.total_rows > CHART_LAYERS ? h("p", { class: "tln-muted" }, `The chart shows the first ${CHART_LAYERS} of ${formatNumber(layers.total_rows)} layers; all are in the table below.`) : null),
    sampleRows.length ? samplesView(sampleRows, d.carry)
      : h("p", { class: "tln-muted" }, "No per-sample loss: see what could not be checked below."),
    h("details", { class: "tln-spike-all" }, h("summary", null, "All rows as tables (sort, filter, page)"),
      payload.tables.map((t) => tableView(t, ctx))),
  ]);
}

function render(/** @type {any} */ props) {
  return mountPanel(props, view, { name: "spike", render });
}
export default { render };
