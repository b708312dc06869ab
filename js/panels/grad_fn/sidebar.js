// The grad_fn side parts: the module-group tree (fold/unfold buttons with aria-expanded) and
// the details of the selected node (type, parameter name and shape, saved shapes, neighbours).
import { h, listen } from "../../shared/dom.js";
import { formatShape } from "../../shared/format.js";

/** Neighbour buttons listed per direction in the details pane (the rest are counted). */
const MAX_NEIGHBOURS = 12;

/**
 * The group tree: one row per group whose parent is unfolded; the button toggles the fold.
 * @param {import("./model.js").Graph} graph
 * @param {Set<string>} expanded
 * @param {{ signal: AbortSignal, onToggle: (address: string) => void }} options
 */
export function groupTree(graph, expanded, { signal, onToggle }) {
  /** @param {string[]} addresses @returns {HTMLUListElement} */
  const list = (addresses) => h("ul", { role: "list" }, addresses.map((address) => {
    const group = /** @type {import("./model.js").GGroup} */ (graph.groups.get(address));
    const open = expanded.has(address);
    const button = h("button", { type: "button", class: "tln-gg-toggle", "aria-expanded": String(open),
      "data-address": address, title: address },
    h("span", { "aria-hidden": "true" }, open ? "▾ " : "▸ "),
    h("span", { class: "tln-gg-leafname" }, address.split(".").at(-1)),
    h("span", { class: "tln-gg-count" }, ` ${group.typeName ?? ""} · ${group.count}`));
    button.setAttribute("aria-label", `${open ? "Fold" : "Unfold"} ${address} (${group.count} nodes)`);
    listen(button, "click", () => onToggle(address), signal);
    return h("li", null, button, open && group.children.length ? list(group.children) : null);
  }));
  return h("nav", { class: "tln-gg-tree", "aria-label": "Module groups" },
    graph.top.length ? list(graph.top) : h("p", { class: "tln-gg-muted" },
      "No module groups: pass model= (or dotted params= names) to walk_grad_fn to group nodes."));
}

/**
 * Details of `node`: everything the sketch knows about it, and buttons to move around.
 * @param {import("./model.js").Graph} graph
 * @param {import("./model.js").GNode} node
 * @param {{ signal: AbortSignal, onSelect: (id: number) => void, onFold: (address: string) => void }} options
 */
export function nodeDetails(graph, node, { signal, onSelect, onFold }) {
  /** @type {[string, any][]} */
  const rows = [
    ["Type", node.kind === "leaf" ? `${node.name} (leaf tensor)` : node.name],
    ["Node", `#${node.id}`],
  ];
  if (node.kind === "leaf") rows.push(["Parameter", node.param ?? "unnamed leaf"]);
  if (node.aliases.length) rows.push(["Also named", node.aliases.join(", ")]);
  rows.push([node.kind === "leaf" ? "Shape" : "Output shape",
    `${node.shapes.map((s) => formatShape(s)).join(", ") || "unknown"}${node.dtype ? ` ${node.dtype}` : ""}`]);
  if (node.kind === "op") {
    rows.push(["Saved for backward", node.saved.length ? h("ul", { class: "tln-gg-saved" },
      node.saved.map(([name, shape, status]) => h("li", null, h("code", null, name), " ",
        status === "ok" ? formatShape(/** @type {number[]} */ (shape)) : `(${status})`))) : "nothing"]);
  }
  if (node.outputs.length) rows.push(["Walked output", node.outputs.map((i) => `output ${i}`).join(", ")]);
  if (node.group) {
    const fold = h("button", { type: "button", class: "tln-gg-small" }, "Fold this group");
    listen(fold, "click", () => onFold(node.group), signal);
    const typeName = graph.groups.get(node.group)?.typeName;
    rows.push(["Module group", h("span", null, h("code", null, node.group), typeName ? ` (${typeName}) ` : " ", fold)]);
  }
  if (node.isCut) rows.push(["Cut", "some inputs were not walked: max_nodes was reached"]);
  rows.push(["Inputs", neighbours(graph, graph.inputs[node.id], signal, onSelect)]);
  rows.push(["Consumers", neighbours(graph, graph.consumers[node.id], signal, onSelect)]);
  return h("section", { class: "tln-gg-details", "aria-label": `Details of node ${node.id}` },
    h("h3", null, node.label),
    h("dl", null, rows.map(([term, value]) => [h("dt", null, term), h("dd", null, value)])));
}

/**
 * @param {import("./model.js").Graph} graph
 * @param {number[]} ids
 * @param {AbortSignal} signal
 * @param {(id: number) => void} onSelect
 */
function neighbours(graph, ids, signal, onSelect) {
  if (!ids.length) return "none";
  const unique = [...new Set(ids)];
  const buttons = unique.slice(0, MAX_NEIGHBOURS).map((id) => {
    const button = h("button", { type: "button", class: "tln-gg-small" }, `${graph.nodes[id].label} #${id}`);
    listen(button, "click", () => onSelect(id), signal);
    return button;
  });
  const rest = unique.length - buttons.length;
  return h("span", { class: "tln-gg-neighbours" }, buttons, rest > 0 ? ` and ${rest} more` : null);
}
