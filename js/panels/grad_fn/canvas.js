// The grad_fn drawing surface: an SVG of laid-out units with pan (drag, arrow keys) and zoom
// (wheel, +/-), focusable units activated by click or Enter, and selection/match highlights.
import { listen, svg } from "../../shared/dom.js";
import { unitLabel } from "./layout.js";

const MIN_SCALE = 0.05;
const MAX_SCALE = 4;
/** A press that moves less than this many pixels is a click, not a pan. */
const CLICK_SLOP_PX = 4;
/** The opening view never shrinks 12 px labels below about 7 px: a deep graph (GPT-2 has over
 * a hundred ranks) opens at its top, readable, instead of fitted into an unreadable strip. */
const MIN_OPEN_SCALE = 0.6;

/**
 * @typedef {{ el: SVGElement, draw: (layout: import("./layout.js").Layout,
 *   units: import("./model.js").Unit[], frames: Frame[]) => void, select: (key: string | null) => void,
 *   mark: (keys: Set<string>) => void, fit: () => void, open: () => void, center: (key: string) => void,
 *   zoomBy: (factor: number) => void }} Canvas
 * @typedef {{ left: boolean, right: boolean, top: boolean, bottom: boolean, fits: boolean }} Overflow
 *   which sides of the graph lie outside the view, and whether Fit (the smallest zoom at most)
 *   can show all of it
 */

/**
 * An unfolded group, drawn as the frame its layout cluster got (layout.js), labelled inside its
 * top edge.
 * @typedef {{ address: string, keys: string[], depth: number }} Frame
 */

/**
 * `onView` hears, after every pan, zoom or redraw, which sides of the graph are outside the
 * view (the panel says so beside the graph: a cut graph is never silent).
 * @param {{ signal: AbortSignal, onActivate: (key: string) => void, onView: (overflow: Overflow) => void }} options
 * @returns {Canvas}
 */
export function createCanvas({ signal, onActivate, onView }) {
  const root = svg("svg", { class: "tln-gg-svg", tabindex: 0, role: "group",
    "aria-label": "Autograd graph: drag or arrow keys to pan, wheel or + and - to zoom, 0 to fit" });
  const defs = svg("defs");
  const marker = svg("marker", { id: "tln-gg-arrow", viewBox: "0 0 8 8", refX: 8, refY: 4,
    markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" });
  marker.append(svg("path", { d: "M0,0 L8,4 L0,8 z", class: "tln-gg-arrowhead" }));
  defs.append(marker);
  const stage = svg("g");
  root.append(defs, stage);
  const view = { x: 0, y: 0, k: 1 };
  let size = { width: 0, height: 0 };
  /** @type {Map<string, SVGElement>} */
  let items = new Map();
  /** @type {Map<string, import("./layout.js").Box>} */
  let boxes = new Map();

  const viewport = () => ({ w: root.clientWidth || 800, h: root.clientHeight || 480 });
  const apply = () => {
    stage.setAttribute("transform", `translate(${view.x},${view.y}) scale(${view.k})`);
    const { w, h } = viewport();
    const edge = 1;  // px of tolerance
    // whether Fit can show all of it: not when even the smallest zoom leaves it larger than the view
    const fits = size.width * MIN_SCALE <= w + edge && size.height * MIN_SCALE <= h + edge;
    onView({ left: view.x < -edge, top: view.y < -edge, right: view.x + size.width * view.k > w + edge,
      bottom: view.y + size.height * view.k > h + edge, fits });
  };
  /** @param {number} factor @param {number} [cx] @param {number} [cy] */
  const zoomBy = (factor, cx = viewport().w / 2, cy = viewport().h / 2) => {
    const k = Math.min(MAX_SCALE, Math.max(MIN_SCALE, view.k * factor));
    view.x = cx - ((cx - view.x) * k) / view.k;
    view.y = cy - ((cy - view.y) * k) / view.k;
    view.k = k;
    apply();
  };
  /** Fit the graph, never below `floor`; a graph still wider than the view starts at its left
   * edge (the cue beside the graph says more lies to the right). @param {number} floor */
  const fitAbove = (floor) => {
    const { w, h } = viewport();
    const k = Math.min(1.2, Math.max(floor, Math.min(w / (size.width || 1), h / (size.height || 1))));
    const x = size.width * k <= w ? (w - size.width * k) / 2 : 0;
    Object.assign(view, { k, x, y: Math.max(0, (h - size.height * k) / 2) });
    apply();
  };
  const fit = () => fitAbove(MIN_SCALE);

  /** @type {{ x: number, y: number, vx: number, vy: number, moved: boolean } | null} */
  let press = null;
  let dragged = false;
  listen(root, "pointerdown", (/** @type {PointerEvent} */ e) => {
    press = { x: e.clientX, y: e.clientY, vx: view.x, vy: view.y, moved: false };
    dragged = false;
  }, signal);
  listen(root, "pointermove", (/** @type {PointerEvent} */ e) => {
    if (!press) return;
    const dx = e.clientX - press.x, dy = e.clientY - press.y;
    if (!press.moved && Math.hypot(dx, dy) < CLICK_SLOP_PX) return;
    if (!press.moved) root.setPointerCapture?.(e.pointerId);
    press.moved = true;
    Object.assign(view, { x: press.vx + dx, y: press.vy + dy });
    apply();
  }, signal);
  const release = () => { dragged = press?.moved ?? false; press = null; };
  listen(root, "pointerup", release, signal);
  listen(root, "pointercancel", release, signal);
  listen(root, "wheel", (/** @type {WheelEvent} */ e) => {
    e.preventDefault();
    const rect = root.getBoundingClientRect();
    zoomBy(Math.exp(-e.deltaY * 0.0015), e.clientX - rect.left, e.clientY - rect.top);
  }, signal);
  listen(root, "click", (/** @type {MouseEvent} */ e) => {
    const target = /** @type {Element} */ (e.target).closest?.("[data-key]");
    if (target && !dragged) onActivate(/** @type {string} */ (target.getAttribute("data-key")));
    dragged = false;
  }, signal);
  listen(root, "keydown", (/** @type {KeyboardEvent} */ e) => {
    const target = /** @type {Element} */ (e.target).closest?.("[data-key]");
    const pan = { ArrowLeft: [60, 0], ArrowRight: [-60, 0], ArrowUp: [0, 60], ArrowDown: [0, -60] }[e.key];
    if (target && (e.key === "Enter" || e.key === " ")) onActivate(/** @type {string} */ (target.getAttribute("data-key")));
    else if (pan) { view.x += pan[0]; view.y += pan[1]; apply(); }
    else if (e.key === "+" || e.key === "=") zoomBy(1.25);
    else if (e.key === "-") zoomBy(0.8);
    else if (e.key === "0") fit();
    else return;
    e.preventDefault();
  }, signal);

  return {
    el: root,
    draw(layout, units, frames) {
      size = { width: layout.width, height: layout.height };
      boxes = layout.boxes;
      const frameLayer = svg("g", { class: "tln-gg-frames", "aria-hidden": "true" });
      for (const frame of frames) {
        const box = layout.frames.get(frame.address) ?? memberFrame(frame, frames, boxes);
        if (box) frameLayer.append(...frameItem(frame, box));
      }
      const edgeLayer = svg("g", { class: "tln-gg-edges" });
      for (const route of layout.routes) {
        const d = route.points.map((p, i) => `${i ? "L" : "M"}${p.x.toFixed(1)},${p.y.toFixed(1)}`).join("");
        edgeLayer.append(svg("path", { d, class: "tln-gg-edge", "marker-end": "url(#tln-gg-arrow)" }));
      }
      const unitLayer = svg("g", { class: "tln-gg-units" });
      items = new Map();
      for (const unit of units) {
        const box = boxes.get(unit.key);
        if (!box) continue;
        const item = unitItem(unit, box);
        items.set(unit.key, item);
        unitLayer.append(item);
      }
      stage.replaceChildren(frameLayer, edgeLayer, unitLayer);
      apply();
    },
    select(key) {
      for (const el of stage.querySelectorAll(".is-selected")) el.classList.remove("is-selected");
      if (key) items.get(key)?.classList.add("is-selected");
    },
    mark(keys) {
      for (const [key, el] of items) el.classList.toggle("is-match", keys.has(key));
    },
    fit,
    open: () => fitAbove(MIN_OPEN_SCALE),
    center(key) {
      const box = boxes.get(key);
      if (!box) return;
      const { w, h } = viewport();
      view.k = Math.max(view.k, 0.8);
      Object.assign(view, { x: w / 2 - box.x * view.k, y: h / 2 - box.y * view.k });
      apply();
    },
    zoomBy,
  };
}

/** Padding of a member frame, and the band each level of frames nested inside it adds at its
 * top (room for one label row, so nested labels never print on top of each other). */
const FRAME_PAD = 4;
const FRAME_LABEL_H = 13;

/**
 * The box of `frame` from its members in a flat layout, or null when a unit that is not a
 * member lies inside it (a frame that would mislead is not drawn; the group tree and the
 * details still name the group).
 * @param {Frame} frame
 * @param {Frame[]} frames every frame drawn (to count the levels nested inside this one)
 * @param {Map<string, import("./layout.js").Box>} boxes
 * @returns {import("./layout.js").Box | null}
 */
function memberFrame(frame, frames, boxes) {
  let x0 = Infinity, y0 = Infinity, x1 = -Infinity, y1 = -Infinity;
  for (const key of frame.keys) {
    const b = boxes.get(key);
    if (!b) continue;
    x0 = Math.min(x0, b.x - b.w / 2); y0 = Math.min(y0, b.y - b.h / 2);
    x1 = Math.max(x1, b.x + b.w / 2); y1 = Math.max(y1, b.y + b.h / 2);
  }
  if (!Number.isFinite(x0)) return null;
  const members = new Set(frame.keys);
  for (const [key, b] of boxes) {
    if (!members.has(key) && b.x > x0 && b.x < x1 && b.y > y0 && b.y < y1) return null;
  }
  const inner = Math.max(0, ...frames.filter((f) => f.address.startsWith(`${frame.address}.`)).map((f) => f.depth - frame.depth));
  const side = FRAME_PAD * (inner + 1);
  const top = side + FRAME_LABEL_H * (inner + 1);
  return { key: frame.address, x: (x0 + x1) / 2, y: (y0 - top + y1 + side) / 2, w: x1 - x0 + 2 * side, h: y1 - y0 + top + side };
}

/**
 * A frame and its label inside the top edge: the full address when it fits the frame, else
 * its last part (the tooltip keeps the address).
 * @param {Frame} frame
 * @param {import("./layout.js").Box} box
 * @returns {SVGElement[]}
 */
function frameItem(frame, box) {
  const x0 = box.x - box.w / 2, y0 = box.y - box.h / 2;
  const rect = svg("rect", { x: x0, y: y0, width: box.w, height: box.h, rx: 6, class: "tln-gg-frame",
    "data-address": frame.address });
  const fits = (/** @type {string} */ text) => text.length * FRAME_CHAR_PX + 8 <= box.w;
  const last = frame.address.split(".").at(-1) ?? frame.address;
  const label = svg("text", { x: x0 + 4, y: y0 + 11, class: "tln-gg-frame-label", "data-address": frame.address });
  label.textContent = fits(frame.address) ? frame.address : last;
  const title = svg("title");
  title.textContent = frame.address;
  label.append(title);
  return [rect, label];
}

/** Width of one character of a frame label (10 px monospace). */
const FRAME_CHAR_PX = 6;

/**
 * One unit: a rounded box, its label, a second line for folded groups, a tooltip.
 * @param {import("./model.js").Unit} unit
 * @param {import("./layout.js").Box} box
 */
function unitItem(unit, box) {
  const node = unit.node;
  const group = unit.group;
  const kind = group ? "group" : node?.kind ?? "op";
  const name = group ? `group ${group.address}, ${group.count} nodes, folded: activate to unfold`
    : `${node?.label}${node?.param ? ` (${node.name})` : ""}`;
  const item = svg("g", { class: `tln-gg-unit is-${kind}${node?.isCut ? " is-cut" : ""}${node?.outputs.length ? " is-output" : ""}`,
    "data-key": unit.key, tabindex: 0, role: "button", "aria-label": name,
    transform: `translate(${(box.x - box.w / 2).toFixed(1)},${(box.y - box.h / 2).toFixed(1)})` });
  const title = svg("title");
  title.textContent = group ? `${group.address}${group.typeName ? ` (${group.typeName})` : ""}: ${group.count} nodes` : name;
  item.append(title, svg("rect", { width: box.w, height: box.h, rx: group ? 8 : 4 }));
  const label = svg("text", { x: 10, y: group ? 16 : 17 });
  label.textContent = unitLabel(unit);
  item.append(label);
  if (group) {
    const sub = svg("text", { x: 10, y: 32, class: "tln-gg-sub" });
    sub.textContent = `${group.typeName ?? "module"} · ${group.count} nodes`;
    item.append(sub);
  }
  return item;
}
