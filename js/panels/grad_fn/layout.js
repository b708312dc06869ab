// Layered layout of the visible units with dagre (bundled from npm, MIT; 48 KB of the bundle).
//
// Chosen by measurement (benchmarks/bench_grad_fn.py and the same visible graphs fed to each
// engine; GPT-2 loss graphs, 2-core shared CPU, ranges over runs at different machine loads):
//
//   visible units (fold level)        dagre (JS)      elkjs (JS)   graphviz dot -Tplain (+spawn)
//   66   (GPT-2 small opening view)   41-162 ms       149 ms       15-42 ms
//   162  (blocks open)                127-500 ms      245 ms       23 ms
//   822  (GPT-2 small, all unfolded)  0.6-2.4 s       1.0-1.5 s    0.2-0.8 s
//   2,850-3,234 (48 layers unfolded)  stack overflow  3.7-8.9 s    3.8-7.4 s
//
// In chromium the opening view paints 80-110 ms after `render`; "Unfold all" on GPT-2 small
// redraws in 0.8-1.6 s. Graphviz is 3-5x faster per layout, but in Python it would cost a kernel
// round trip per unfold, and that is not there in a `report.to_html()` copy and waits while a
// cell runs (messages from the page reach the kernel only when the cell ends), and the panel
// would need a `dot` binary; a layout in the page always answers. dagre's recursion overflows
// the call stack near 2,850 units, so Python caps the units per layout
// (`data.layout.max_units`) and the panel refuses an unfold beyond it, pointing at
// `tl.debug.sketch_grad_fn`, which renders any size through graphviz.
import dagre from "@dagrejs/dagre";

/** Pixel sizes of a drawn unit: monospace labels, so width follows the character count. */
export const CHAR_PX = 7.2;
export const NODE_H = 26;
export const GROUP_H = 40;
export const MAX_LABEL_CHARS = 34;

/**
 * @typedef {{ key: string, x: number, y: number, w: number, h: number }} Box  centre x, y
 * @typedef {{ from: string, to: string, points: { x: number, y: number }[] }} Route
 * @typedef {{ boxes: Map<string, Box>, frames: Map<string, Box>, routes: Route[], width: number,
 *   height: number, ms: number }} Layout  `frames`: each unfolded group's box (key = address)
 */

/**
 * The text a unit shows on its first line (clipped to MAX_LABEL_CHARS; the full text is in
 * the details pane and the tooltip).
 * @param {import("./model.js").Unit} unit
 */
export function unitLabel(unit) {
  const text = unit.node ? unit.node.label : `▸ ${unit.group?.address}`;
  return text.length > MAX_LABEL_CHARS ? `${text.slice(0, MAX_LABEL_CHARS - 1)}…` : text;
}

/**
 * Up to this many units, unfolded groups are laid out as dagre clusters (see layoutVisible);
 * above it the layout is flat. Measured in chromium on the 2-core machine under load (GPT-2
 * small's sketch): 137 units (its opening view) 2.0-3.7 s as clusters against 1.0 s flat; all
 * 785 units unfolded (about 100 groups) 52 s as clusters against 6.2 s flat. The tour's graph
 * (17 units) and models of that size get clusters.
 */
export const CLUSTER_MAX_UNITS = 100;

/**
 * Lay out `visible` top to bottom (forward direction: inputs above consumers). Up to
 * CLUSTER_MAX_UNITS units each unfolded group of `frames` is a dagre cluster: its members, and
 * only they, lie inside its box, nested groups inside their parent's, so a frame never crosses
 * another group's node and nested frames start on different rows (their labels never print on
 * top of each other). Above it `frames` of the layout is empty and the canvas frames each
 * group around its members where that misleads no one.
 * @param {import("./model.js").Visible} visible
 * @param {import("./canvas.js").Frame[]} frames unfolded groups with visible members (framesOf)
 * @returns {Layout}
 */
export function layoutVisible(visible, frames) {
  const started = performance.now();
  if (visible.units.length > CLUSTER_MAX_UNITS) frames = [];
  const g = new dagre.graphlib.Graph({ compound: frames.length > 0 });
  g.setGraph({ rankdir: "TB", nodesep: 14, ranksep: 26, marginx: 12, marginy: 12 });
  g.setDefaultEdgeLabel(() => ({}));
  for (const unit of visible.units) {
    const chars = Math.max(unitLabel(unit).length, unit.group ? 12 : 4);
    g.setNode(unit.key, { width: Math.round(chars * CHAR_PX + 20), height: unit.group ? GROUP_H : NODE_H });
  }
  /** @type {Map<string, string>} unit key -> its innermost frame's address */
  const innermost = new Map();
  for (const frame of frames) {  // sorted outer first: a deeper frame overwrites its parent
    g.setNode(FRAME_PREFIX + frame.address, {});
    for (const key of frame.keys) innermost.set(key, frame.address);
  }
  for (const frame of frames) {
    const parent = frames.filter((f) => frame.address.startsWith(`${f.address}.`)).at(-1);
    if (parent) g.setParent(FRAME_PREFIX + frame.address, FRAME_PREFIX + parent.address);
  }
  for (const [key, address] of innermost) g.setParent(key, FRAME_PREFIX + address);
  for (const [a, b] of visible.edges) g.setEdge(a, b);
  dagre.layout(g);
  /** @type {Map<string, Box>} */
  const boxes = new Map();
  /** @type {Map<string, Box>} */
  const frameBoxes = new Map();
  for (const key of g.nodes()) {
    const n = g.node(key);
    if (key.startsWith(FRAME_PREFIX)) {
      const address = key.slice(FRAME_PREFIX.length);
      frameBoxes.set(address, { key: address, x: n.x, y: n.y, w: n.width, h: n.height });
    } else if (n.width !== undefined) {
      boxes.set(key, { key, x: n.x, y: n.y, w: n.width, h: n.height });
    }
  }
  const routes = g.edges().map((e) => ({ from: e.v, to: e.w, points: g.edge(e).points ?? [] }));
  const graph = g.graph();
  return { boxes, frames: frameBoxes, routes, width: graph.width ?? 0, height: graph.height ?? 0,
    ms: performance.now() - started };
}

/** Cluster nodes are named apart from units ("n:<id>", "g:<address>"). */
const FRAME_PREFIX = "c:";
