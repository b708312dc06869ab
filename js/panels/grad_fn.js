// The grad_fn panel: the autograd graph of a GradFnSketch, explorable. Module groups start
// folded to the deepest level that fits `data.layout.initial_units` and unfold on demand (click
// a box, or the group tree); search reveals a node inside folded groups; a click shows a node's
// details. The STRUCTURE-ONLY legend and the truncation note stay above the graph. Python
// decided the graph, the groups and the budgets; this module lays out and draws.
import { reportCard } from "../shared/card.js";
import { h, listen } from "../shared/dom.js";
import { mountPanel } from "../shared/panel.js";
import { setStatus, statusLine } from "../shared/status.js";
import { createCanvas } from "./grad_fn/canvas.js";
import { layoutVisible } from "./grad_fn/layout.js";
import { countUnits, deepestLevel, framesOf, lineage, readGraph, search, unfoldedTo, unitKey, visibleGraph } from "./grad_fn/model.js";
import { groupTree, nodeDetails } from "./grad_fn/sidebar.js";

/** How the cut sides of the graph are named in the cue beside it. */
const SIDE_WORDS = { left: "to the left", right: "to the right", top: "above", bottom: "below" };
/** Search results listed at once (the count of the rest is shown). */
const MAX_RESULTS = 20;
/** Above this many units the layout runs after the "Laying out…" status has painted (dagre
 * needs about 0.1 s for 160 units on a slow CPU; below that nobody sees the status anyway). */
const SYNC_LAYOUT_UNITS = 300;

/**
 * @param {import("../shared/payload_types.js").GradFnReportPayload} payload
 * @param {import("../shared/panel.js").PanelContext} ctx
 */
function view(payload, ctx) {
  const data = payload.data;
  const graph = readGraph(data);
  const { signal, state } = ctx;
  const identity = `${payload.subject}|${data.num_nodes}|${data.num_edges}|${data.groups.length}`;
  if (state.get("graph") !== identity) {  // a new sketch: forget the view state of the last one
    for (const key of ["expanded", "layouts", "selected"]) state.delete(key);
    state.set("graph", identity);
  }
  /** @type {Set<string>} */
  let expanded = state.get("expanded") ?? unfoldedTo(graph,
    deepestLevel(graph, Math.min(data.layout.initial_units, data.layout.max_units)));
  /** @type {Map<string, import("./grad_fn/layout.js").Layout>} */
  const layouts = state.get("layouts") ?? new Map();
  state.set("layouts", layouts);

  const status = statusLine();
  const cue = h("p", { class: "tln-gg-cue", hidden: true, "aria-live": "polite" });
  const canvas = createCanvas({ signal, onActivate: (key) => activate(key), onView: (over) => {
    const sides = /** @type {const} */ (["left", "right", "top", "bottom"]).filter((side) => over[side]);
    cue.hidden = sides.length === 0;
    cue.dataset.sides = sides.join(" ");
    // Fit is promised only where it can deliver: an unfolded large graph stays larger than the
    // view even at the smallest zoom, and then folding is what shows all of it
    cue.textContent = !sides.length ? "" : `More of the graph lies ${sides.map((s) => SIDE_WORDS[s]).join(" and ")}: ` +
      (over.fits ? "drag or use the arrow keys to pan, or Fit to see all of it."
        : "drag or use the arrow keys to pan; it is too large to fit at the smallest zoom, fold groups to see all of it.");
  } });
  const treeSlot = h("div", { class: "tln-gg-tree-slot" });
  const detailsSlot = h("div", { class: "tln-gg-details-slot" },
    h("p", { class: "tln-gg-muted" }, "Click a node for its details; click a folded box to unfold it."));
  const query = h("input", { type: "search", class: "tln-gg-search", placeholder: "Search nodes, parameters, modules",
    "aria-label": "Search nodes by name" });
  const results = h("div", { class: "tln-gg-results", role: "region", "aria-label": "Search results" });

  /** @param {string} text */
  const warn = (text) => { status.dataset.tone = "warning"; status.replaceChildren(h("span", { "aria-hidden": "true" }, "▲ "), text); };

  const redraw = () => {
    const key = [...expanded].sort().join("\n");
    const visible = visibleGraph(graph, expanded);
    if (visible.units.length > data.layout.max_units) {  // even folded, too many to lay out
      treeSlot.replaceChildren(groupTree(graph, expanded, { signal, onToggle: toggle }));
      warn(`${visible.units.length} boxes and nodes even with every module group folded; the ` +
        `panel lays out at most ${data.layout.max_units}. Search and inspect nodes here, pass ` +
        "model= so nodes fold into module groups, or render everything with " +
        "tl.debug.sketch_grad_fn(...).");
      panel.dataset.units = "0";
      return;
    }
    const frames = framesOf(graph, expanded, visible);
    let layout = layouts.get(key);
    if (!layout) {
      layout = layoutVisible(visible, frames);
      layouts.set(key, layout);
    }
    canvas.draw(layout, visible.units, frames);
    canvas.select(state.has("selected") ? unitKey(graph.nodes[state.get("selected")], expanded) : null);
    markMatches();
    const focused = /** @type {HTMLElement | null} */ (treeSlot.querySelector("button:focus"))?.dataset.address;
    treeSlot.replaceChildren(groupTree(graph, expanded, { signal, onToggle: toggle }));
    if (focused) /** @type {HTMLElement | null} */ (treeSlot.querySelector(`[data-address="${CSS.escape(focused)}"]`))?.focus();
    setStatus(status, "ok", `${visible.units.length} boxes and nodes of ${graph.nodes.length}; ` +
      `layout ${Math.round(layout.ms)} ms`);
    panel.dataset.units = String(visible.units.length);
  };

  /**
   * Apply a fold state unless it exceeds the layout budget; `then` runs once it is drawn.
   * @param {Set<string>} next @param {() => void} [then] @returns {boolean}
   */
  const setExpanded = (next, then) => {
    const units = countUnits(graph, next);
    if (units > data.layout.max_units) {
      warn(`That would show ${units} boxes and nodes; the panel lays out at most ${data.layout.max_units} ` +
        "at once. Fold another group first, or render everything with tl.debug.sketch_grad_fn(...).");
      return false;
    }
    expanded = next;
    state.set("expanded", next);
    const run = () => { if (!signal.aborted) { redraw(); then?.(); } };
    if (units <= SYNC_LAYOUT_UNITS) run();
    else {
      setStatus(status, "busy", `Laying out ${units} boxes and nodes…`);
      requestAnimationFrame(() => setTimeout(run, 0));
    }
    return true;
  };

  /** Fold or unfold `address`, keeping it in view (its box, or its first unit once open). */
  const toggle = (/** @type {string} */ address) => {
    const next = new Set(expanded);
    const opening = !next.has(address);
    if (opening) lineage(address).forEach((a) => next.add(a));
    else next.delete(address);
    setExpanded(next, () => {
      const inside = graph.nodes.find((n) => lineage(n.group).includes(address));
      canvas.center(opening && inside ? unitKey(inside, expanded) : `g:${address}`);
    });
  };

  /** @param {number} id @param {boolean} [recenter] */
  const select = (id, recenter = true) => {
    const node = graph.nodes[id];
    setExpanded(new Set([...expanded, ...lineage(node.group)]), () => {
      state.set("selected", id);
      canvas.select(`n:${id}`);
      if (recenter) canvas.center(`n:${id}`);
      detailsSlot.replaceChildren(nodeDetails(graph, node, { signal, onSelect: select, onFold: toggle }));
    });
  };

  /** @param {string} key */
  const activate = (key) => (key.startsWith("g:") ? toggle(key.slice(2)) : select(Number(key.slice(2))));

  const markMatches = () => {
    const found = search(graph, query.value, Infinity).items;
    canvas.mark(new Set(found.map((item) => ("node" in item ? unitKey(item.node, expanded) : `g:${item.group.address}`))));
  };

  const showResults = () => {
    const { items, total } = search(graph, query.value, MAX_RESULTS);
    markMatches();
    if (!query.value.trim()) { results.replaceChildren(); return; }
    const buttons = items.map((item) => {
      const label = "node" in item ? `${item.node.label} · ${item.node.group || "top level"} · #${item.node.id}`
        : `group ${item.group.address}${item.group.typeName ? ` (${item.group.typeName})` : ""}`;
      const button = h("button", { type: "button", class: "tln-gg-result" }, label);
      listen(button, "click", () => ("node" in item ? select(item.node.id) : revealGroup(item.group.address)), signal);
      return h("li", null, button);
    });
    results.replaceChildren(h("p", { class: "tln-gg-muted" }, `${total} match${total === 1 ? "" : "es"}` +
      (total > items.length ? `; first ${items.length} listed` : "")), h("ul", { role: "list" }, buttons));
  };

  /** @param {string} address */
  const revealGroup = (address) => {
    const next = new Set(expanded);
    lineage(address).slice(0, -1).forEach((a) => next.add(a));
    next.delete(address);
    setExpanded(next, () => canvas.center(`g:${address}`));
  };

  listen(query, "input", showResults, signal);
  listen(query, "keydown", (/** @type {KeyboardEvent} */ e) => {
    if (e.key !== "Enter") return;
    const first = search(graph, query.value, 1).items[0];
    if (first) ("node" in first ? select(first.node.id) : revealGroup(first.group.address));
  }, signal);

  /** @param {string} text @param {string} label @param {() => void} fn */
  const tool = (text, label, fn) => {
    const button = h("button", { type: "button", class: "tln-gg-tool", "aria-label": label, title: label }, text);
    listen(button, "click", fn, signal);
    return button;
  };
  const level = () => Math.max(0, ...[...expanded].map((a) => graph.groups.get(a)?.depth ?? 0));
  const toolbar = h("div", { class: "tln-gg-toolbar", role: "toolbar", "aria-label": "Graph controls" },
    query,
    tool("Fold all", "Fold all groups", () => setExpanded(new Set(), canvas.open)),
    tool("Unfold level", "Unfold one more level of groups", () => setExpanded(unfoldedTo(graph, level() + 1), canvas.open)),
    tool("Unfold all", "Unfold every group", () => setExpanded(unfoldedTo(graph, graph.maxDepth), canvas.open)),
    tool("+", "Zoom in", () => canvas.zoomBy(1.25)),
    tool("−", "Zoom out", () => canvas.zoomBy(0.8)),
    tool("Fit", "Fit the graph to the view", () => canvas.fit()));

  const banners = h("div", { class: "tln-gg-banners" },
    h("p", { class: "tln-gg-legend", role: "note" }, h("strong", null, "STRUCTURE-ONLY "), data.legend.replace(/^STRUCTURE-ONLY:\s*/, "")),
    data.truncated ? h("p", { class: "tln-gg-truncated", role: "note", "data-tone": "warning" },
      h("span", { "aria-hidden": "true" }, "▲ "), h("strong", null, "TRUNCATED: "),
      `the walk stopped at max_nodes=${data.max_nodes}; dashed nodes have inputs that are not shown.`) : null);

  const panel = h("section", { class: "tln-gg", "aria-label": "Autograd graph" },
    banners, toolbar, results,
    h("div", { class: "tln-gg-body" }, h("div", { class: "tln-gg-stage-box" },
      h("div", { class: "tln-gg-stage" }, canvas.el), cue),
    h("div", { class: "tln-gg-side" }, detailsSlot, treeSlot)),
    status);
  redraw();
  if (state.has("selected")) select(state.get("selected"), false);
  requestAnimationFrame(() => {  // sizes are known once the panel is in the page
    if (signal.aborted) return;
    canvas.open();
    if (state.has("selected")) canvas.center(`n:${state.get("selected")}`);
  });
  return reportCard(payload, ctx, [panel]);
}

function render(/** @type {any} */ props) {
  return mountPanel(props, view, { name: "grad_fn", render });
}

export default { render };
