// The grad_fn panel's view model: nodes and groups read from the payload, the fold state
// (a set of unfolded group addresses) turned into the boxes and nodes to lay out, and search.
// Pure functions of the payload: no DOM, no thresholds (the budgets come from Python).

/**
 * @typedef {[string, number[] | null, string]} Saved  name, shape, status ("ok"/"freed"/"hooked")
 * @typedef {{ id: number, name: string, kind: string, group: string, param: string | null,
 *   aliases: string[], shapes: number[][], dtype: string | null, saved: Saved[], isCut: boolean,
 *   label: string, outputs: number[] }} GNode
 * @typedef {{ address: string, parent: string, typeName: string | null, count: number,
 *   depth: number, children: string[] }} GGroup
 * @typedef {{ nodes: GNode[], edges: [number, number][], groups: Map<string, GGroup>,
 *   top: string[], inputs: number[][], consumers: number[][], maxDepth: number }} Graph
 * @typedef {{ key: string, node?: GNode, group?: GGroup }} Unit  key "n:<id>" or "g:<address>"
 * @typedef {{ units: Unit[], edges: [string, string][] }} Visible
 */

/**
 * Read the graph out of `payload.data` (a GradFnReport's payload data).
 * @param {import("../../shared/payload_types.js").GradFnReportData} data
 * @returns {Graph}
 */
export function readGraph(data) {
  const col = Object.fromEntries(data.node_columns.map((/** @type {string} */ c, /** @type {number} */ i) => [c, i]));
  /** @type {Map<number, number[]>} */
  const outputsByNode = new Map();
  for (const out of data.outputs) outputsByNode.set(out.node, [...(outputsByNode.get(out.node) ?? []), out.index]);
  /** @type {GNode[]} */
  const nodes = data.node_rows.map((/** @type {any[]} */ r) => ({
    id: r[col.id], name: r[col.name], kind: r[col.kind], group: r[col.group], param: r[col.param_name],
    aliases: r[col.aliases], shapes: r[col.shapes], dtype: r[col.dtype], saved: r[col.saved],
    isCut: r[col.is_cut], label: r[col.param_name] ?? r[col.name], outputs: outputsByNode.get(r[col.id]) ?? [],
  }));
  /** @type {Map<string, GGroup>} */
  const groups = new Map();
  /** @type {string[]} */
  const top = [];
  for (const g of data.groups) {
    groups.set(g.address, { address: g.address, parent: g.parent, typeName: g.type_name, count: g.num_nodes,
      depth: g.address.split(".").length, children: [] });
    if (g.parent) groups.get(g.parent)?.children.push(g.address);
    else top.push(g.address);
  }
  const inputs = nodes.map(() => /** @type {number[]} */ ([]));
  const consumers = nodes.map(() => /** @type {number[]} */ ([]));
  for (const [src, dst] of data.edges) {
    inputs[dst].push(src);
    consumers[src].push(dst);
  }
  const maxDepth = Math.max(0, ...[...groups.values()].map((g) => g.depth));
  return { nodes, edges: data.edges, groups, top, inputs, consumers, maxDepth };
}

/**
 * Addresses from the outermost group down to `address` itself ("a.b.c" -> a, a.b, a.b.c).
 * @param {string} address
 */
export function lineage(address) {
  if (!address) return [];
  const parts = address.split(".");
  return parts.map((_, i) => parts.slice(0, i + 1).join("."));
}

/**
 * The key of the unit that shows `node`: its outermost folded group, or the node itself.
 * @param {GNode} node
 * @param {Set<string>} expanded
 */
export function unitKey(node, expanded) {
  for (const address of lineage(node.group)) if (!expanded.has(address)) return `g:${address}`;
  return `n:${node.id}`;
}

/**
 * The boxes and nodes to draw for a fold state, and the edges between them (deduplicated,
 * without self loops: edges inside a folded group are not drawn).
 * @param {Graph} graph
 * @param {Set<string>} expanded
 * @returns {Visible}
 */
export function visibleGraph(graph, expanded) {
  const keys = graph.nodes.map((n) => unitKey(n, expanded));
  /** @type {Map<string, Unit>} */
  const units = new Map();
  graph.nodes.forEach((node, i) => {
    const key = keys[i];
    if (units.has(key)) return;
    units.set(key, key.startsWith("n:") ? { key, node } : { key, group: graph.groups.get(key.slice(2)) });
  });
  /** @type {Set<string>} */
  const seen = new Set();
  /** @type {[string, string][]} */
  const edges = [];
  for (const [src, dst] of graph.edges) {
    const a = keys[src], b = keys[dst];
    if (a === b || seen.has(`${a}|${b}`)) continue;
    seen.add(`${a}|${b}`);
    edges.push([a, b]);
  }
  return { units: [...units.values()], edges };
}

/**
 * Frames for unfolded groups: each lists the visible units inside it, outer groups first.
 * @param {Graph} graph
 * @param {Set<string>} expanded
 * @param {Visible} visible
 * @returns {import("./canvas.js").Frame[]}
 */
export function framesOf(graph, expanded, visible) {
  /** @type {Map<string, string[]>} */
  const members = new Map();
  for (const unit of visible.units) {
    const address = unit.node ? unit.node.group : unit.group?.parent ?? "";
    for (const a of lineage(address)) {
      if (!expanded.has(a)) continue;
      const keys = members.get(a);
      if (keys) keys.push(unit.key);
      else members.set(a, [unit.key]);
    }
  }
  return [...members].map(([address, keys]) => ({ address, keys, depth: address.split(".").length }))
    .sort((a, b) => a.depth - b.depth);
}

/**
 * How many units a fold state shows (cheaper than `visibleGraph`).
 * @param {Graph} graph
 * @param {Set<string>} expanded
 */
export function countUnits(graph, expanded) {
  return new Set(graph.nodes.map((n) => unitKey(n, expanded))).size;
}

/**
 * Every group at depth <= `depth` unfolded.
 * @param {Graph} graph
 * @param {number} depth
 */
export function unfoldedTo(graph, depth) {
  return new Set([...graph.groups.values()].filter((g) => g.depth <= depth).map((g) => g.address));
}

/**
 * The deepest uniform fold level showing at most `budget` units (depth 0 = all folded).
 * @param {Graph} graph
 * @param {number} budget
 */
export function deepestLevel(graph, budget) {
  let level = 0;
  for (let depth = 1; depth <= graph.maxDepth; depth++) {
    if (countUnits(graph, unfoldedTo(graph, depth)) > budget) break;
    level = depth;
  }
  return level;
}

/**
 * Nodes and groups whose label, type, parameter names or address contain `query`
 * (case-insensitive): an exact label or address first, then nodes, then groups; at most `limit`.
 * @param {Graph} graph
 * @param {string} query
 * @param {number} limit
 * @returns {{ items: ({ node: GNode } | { group: GGroup })[], total: number }}
 */
export function search(graph, query, limit) {
  const q = query.trim().toLowerCase();
  if (!q) return { items: [], total: 0 };
  const nodes = graph.nodes.filter((n) => [n.name, n.param, ...n.aliases, `#${n.id}`]
    .some((text) => text !== null && text.toLowerCase().includes(q)));
  const groups = [...graph.groups.values()].filter((g) => g.address.toLowerCase().includes(q)
    || (g.typeName ?? "").toLowerCase().includes(q));
  /** @type {({ node: GNode } | { group: GGroup })[]} */
  const all = [...nodes.map((node) => ({ node })), ...groups.map((group) => ({ group }))];
  const exact = (/** @type {{ node: GNode } | { group: GGroup }} */ item) =>
    ("node" in item ? item.node.label : item.group.address).toLowerCase() === q;
  all.sort((a, b) => Number(exact(b)) - Number(exact(a)));  // stable: otherwise nodes, then groups
  return { items: all.slice(0, limit), total: all.length };
}
