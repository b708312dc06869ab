// The lineage view: ops in rings around a centre op (inputs to the left, outputs to the right).
// Python decided every finiteness word and computed every statistic; this module lays the nodes
// out, merges the next ring Python sends when a node is expanded, and shows a node's details.
import { h, listen } from "./dom.js";
import { definitionList } from "./findings.js";
import { MISSING, formatLocation, formatNumber, formatShape } from "./format.js";
import { decodeFloats } from "./payload.js";
import { failureText } from "./rpc.js";
import { offlineNote, setStatus, statusLine } from "./status.js";

/** Presentation only: the marker and tone of each finiteness word Python chose. */
const MARK = { finite: "✔", nonfinite: "✖", unknown: "?" };
const WORD = { finite: "finite", nonfinite: "non-finite", unknown: "unknown" };

/**
 * @typedef {import("./payload_types.js").LineageNode} LineageNode
 * @typedef {{ nodes: Map<string, { node: LineageNode, pos: number }>, selected: string, expanded: number }} LineageState
 */

/** Column position of a node relative to the node its ring was walked from. */
const offset = (/** @type {LineageNode} */ n) => (n.relation === "ancestor" ? -n.depth : n.relation === "descendant" ? n.depth : 0);

/**
 * A lineage block. `nodes` come from a LineageReport (or a NaN report's first ring); expand
 * controls ask Python for the next ring through the report action `action`.
 * @param {LineageNode[]} nodes
 * @param {import("./panel.js").PanelContext} ctx
 * `onShown(summary, expanded)` hears what the view shows after each draw (a panel whose lead
 * line describes the lineage keeps it true after rings are added).
 * @param {{ centre: string, highlight: string | null, tones: Record<string, string>, role?: string | null,
 *   action?: string, note?: string | null, onShown?: (summary: string, expanded: number) => void }} options
 *   `role` names the highlighted node ("origin"), as Python said; `tones` is the payload's
 *   `row_tones` (a tone per finiteness word, decided in Python)
 */
export function lineageView(nodes, ctx, { centre, highlight, tones, role = null, action = "expand", note = null, onShown }) {
  const key = `lineage:${centre}`;
  /** @type {LineageState} */
  const st = ctx.state.get(key) ?? { nodes: new Map(nodes.map((n) => [n.label, { node: n, pos: offset(n) }])),
    selected: highlight ?? centre, expanded: 0 };
  ctx.state.set(key, st);
  const status = statusLine();
  const graph = h("div", { class: "tln-lin-graph", role: "group", "aria-label": `Lineage around ${centre}` });
  const details = h("div", { class: "tln-lin-details", "aria-live": "polite" });

  const expand = async (/** @type {string} */ label, /** @type {"ancestors" | "descendants"} */ direction,
    /** @type {HTMLButtonElement} */ button) => {
    button.disabled = true;
    setStatus(status, "busy", `Asking Python for the ${direction === "ancestors" ? "inputs" : "outputs"} of ${label}…`);
    try {
      const { msg } = await ctx.rpc.request({ type: "action", name: action, args: { label, direction } });
      if (ctx.signal.aborted) return;
      const base = st.nodes.get(label)?.pos ?? 0;
      const ring = /** @type {LineageNode[]} */ (decodeFloats(msg.payload).data.nodes);
      let added = 0;
      for (const n of ring) {
        if (st.nodes.has(n.label)) continue;
        st.nodes.set(n.label, { node: n, pos: base + offset(n) });
        added += 1;
      }
      st.expanded += 1;
      setStatus(status, "ok", `Added ${added} node${added === 1 ? "" : "s"} around ${label}.`);
      draw();
    } catch (err) {
      if (!ctx.signal.aborted) setStatus(status, "critical", failureText(err, `Could not expand ${label}`));
      button.disabled = false;
    }
  };

  const select = (/** @type {string} */ label) => {
    st.selected = label;
    draw();
    /** @type {HTMLElement | null} */ (graph.querySelector(`[data-label="${CSS.escape(label)}"] .tln-lin-node`))?.focus();
  };

  const expander = (/** @type {LineageNode} */ n, /** @type {"ancestors" | "descendants"} */ direction) => {
    const hidden = (direction === "ancestors" ? n.parents : n.children).filter((l) => !st.nodes.has(l)).length;
    if (hidden === 0) return null;
    const word = `${direction === "ancestors" ? "input" : "output"}${hidden === 1 ? "" : "s"}`;
    const button = h("button", { type: "button", class: "tln-button tln-quiet tln-lin-expand", disabled: ctx.offline,
      "data-direction": direction, "aria-label": `Show ${hidden} more ${word} of ${n.label}` },
    direction === "ancestors" ? `◀ ${hidden} ${word}` : `${hidden} ${word} ▶`);
    listen(button, "click", () => void expand(n.label, direction, button), ctx.signal);
    return button;
  };

  const nodeEl = (/** @type {LineageNode} */ n) => {
    const chosen = st.nodes.get(st.selected)?.node;
    const link = chosen && chosen.parents.includes(n.label) ? "input" : chosen && chosen.children.includes(n.label) ? "output" : null;
    const button = h("button", { type: "button", class: "tln-lin-node", "aria-pressed": String(n.label === st.selected),
      "data-finiteness": n.finiteness, "data-tone": tones[n.finiteness] ?? "info", "data-link": link },
    h("span", { class: "tln-lin-label" }, n.label, n.label === highlight ? h("span", { class: "tln-lin-origin" }, ` ◆ ${role ?? "marked"}`) : null),
    h("span", { class: "tln-lin-meta" }, `${n.func} · ${n.module === "" ? "(root)" : n.module}`),
    h("span", { class: "tln-lin-meta" }, `${formatShape(n.shape)} ${n.dtype ?? MISSING}`),
    h("span", { class: "tln-lin-state" }, h("span", { "aria-hidden": "true" }, `${MARK[n.finiteness]} `), WORD[n.finiteness]));
    listen(button, "click", () => select(n.label), ctx.signal);
    return h("li", { class: "tln-lin-item", "data-label": n.label, "data-origin": n.label === highlight ? "true" : null },
      expander(n, "ancestors"), button, expander(n, "descendants"));
  };

  function draw() {
    /** @type {Map<number, LineageNode[]>} */
    const columns = new Map();
    for (const { node, pos } of st.nodes.values()) columns.set(pos, [...(columns.get(pos) ?? []), node]);
    const order = [...columns.keys()].sort((a, b) => a - b);
    graph.replaceChildren(...order.map((pos) => {
      const members = /** @type {LineageNode[]} */ (columns.get(pos));
      return h("section", { class: "tln-lin-column", "data-pos": pos },
        h("h4", null, columnTitle(pos, centre, members.length)),
        h("ul", { class: "tln-list" }, members.sort((a, b) => a.index - b.index).map(nodeEl)));
    }));
    const chosen = st.nodes.get(st.selected)?.node;
    details.replaceChildren(chosen ? nodeDetails(chosen, st, select, ctx) : h("p", { class: "tln-muted" }, "Select a node."));
    onShown?.(shownSummary(st, centre), st.expanded);
    requestAnimationFrame(cue.update);
  }
  const scroller = h("div", { class: "tln-lin-scroll" }, graph);
  const cue = scrollCue(scroller, ctx.signal);
  draw();
  return h("section", { class: "tln-lineage", "aria-label": "Lineage" },
    h("h3", null, "Lineage"),
    h("p", { class: "tln-muted" }, "Select a node for its values and source; ◀ / ▶ ask Python for the next ring of inputs / outputs."),
    note ? h("p", { class: "tln-note" }, note) : null,
    ctx.offline ? offlineNote("expanding needs a live kernel; the nodes shown are those in this copy.") : null,
    cue.el, scroller, status, details);
}

/**
 * A column's heading: its signed distance in steps from the centre, whichever node was expanded
 * to reach it (a node reached through an input and then an output sits beside the centre).
 * @param {number} pos @param {string} centre @param {number} count
 */
function columnTitle(pos, centre, count) {
  if (pos === 0) return count > 1 ? `${centre} and ${count - 1} beside it` : centre;
  const steps = `${Math.abs(pos)} step${Math.abs(pos) === 1 ? "" : "s"}`;
  return pos < 0 ? `${steps} before` : `${steps} after`;
}

/**
 * What the view shows now, in one sentence (counts of what is drawn; Python's lead said what
 * its report held before any ring was added).
 * @param {LineageState} st @param {string} centre
 */
function shownSummary(st, centre) {
  let before = 0, after = 0, beside = 0;
  for (const { node, pos } of st.nodes.values()) {
    if (node.label === centre) continue;
    if (pos < 0) before += 1;
    else if (pos > 0) after += 1;
    else beside += 1;
  }
  const rings = st.expanded ? ` after ${st.expanded} expansion${st.expanded === 1 ? "" : "s"}` : "";
  return `Showing ${st.nodes.size} node${st.nodes.size === 1 ? "" : "s"} around ${centre}${rings}: ` +
    `${before} before, ${after} after${beside ? `, ${beside} beside it` : ""}.`;
}

/**
 * A visible cue when the columns overflow sideways: which way more columns are, kept current
 * on scroll and resize (listeners end with `signal`).
 * @param {HTMLElement} scroller @param {AbortSignal} signal
 */
function scrollCue(scroller, signal) {
  const el = h("p", { class: "tln-lin-cue", hidden: true, "aria-live": "polite" });
  const update = () => {
    if (signal.aborted) return;
    const left = scroller.scrollLeft > 1;
    const right = scroller.scrollLeft + scroller.clientWidth < scroller.scrollWidth - 1;
    el.hidden = !left && !right;
    scroller.dataset.overflow = left && right ? "both" : left ? "left" : right ? "right" : "none";
    el.textContent = left && right ? "◀ more columns on both sides: scroll sideways ▶"
      : right ? "More columns to the right: scroll sideways ▶" : left ? "◀ more columns to the left: scroll sideways" : "";
  };
  listen(scroller, "scroll", update, signal);
  const observer = new ResizeObserver(update);
  observer.observe(scroller);
  signal.addEventListener("abort", () => observer.disconnect());
  return { el, update };
}

/**
 * The selected node: where it is, what it holds (statistics Python computed), its neighbours.
 * @param {LineageNode} n @param {LineageState} st @param {(label: string) => void} select
 * @param {import("./panel.js").PanelContext} ctx
 */
function nodeDetails(n, st, select, ctx) {
  /** @type {[string, string | Node][]} */
  const rows = [["op", h("code", null, n.label)], ["function", n.func], ["module", n.module === "" ? "(root)" : n.module],
    ["source", n.file ? h("code", { title: `${n.file}:${n.line ?? "?"}` }, formatLocation(n.file, n.line, ctx.locations)) : MISSING],
    ["shape", formatShape(n.shape)], ["dtype", n.dtype ?? MISSING],
    ["finiteness", `${WORD[n.finiteness]}${n.checked_by ? ` (${n.checked_by === "dtype" ? "by dtype" : `${n.checked_by} value`})` : " (value not saved)"}`]];
  const s = n.stats;
  if (s) {
    rows.push(["elements", formatNumber(s.numel)], ["NaN", formatNumber(s.nan_count)], ["+Inf", formatNumber(s.posinf_count)],
      ["-Inf", formatNumber(s.neginf_count)], ["finite min / mean / max",
        s.finite_min === null ? "no finite element" : `${formatNumber(s.finite_min)} / ${formatNumber(s.finite_mean)} / ${formatNumber(s.finite_max)}`]);
  }
  const links = (/** @type {string} */ title, /** @type {string[]} */ labels) => labels.length === 0 ? null : h("p", { class: "tln-lin-links" },
    `${title}: `, labels.map((label) => {
      if (!st.nodes.has(label)) return h("code", { class: "tln-muted", title: "not shown yet: expand to add it" }, `${label} `);
      const b = h("button", { type: "button", class: "tln-row-button" }, label);
      listen(b, "click", () => select(label), ctx.signal);
      return [b, " "];
    }));
  return h("div", { class: "tln-lin-detail", "data-label": n.label },
    h("h4", null, `Details of ${n.label}`), definitionList(rows),
    n.code ? h("pre", { class: "tln-source" }, h("code", null, n.code)) : null,
    links("inputs", n.parents), links("outputs", n.children));
}
