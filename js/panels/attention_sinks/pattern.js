// One head's attention pattern: a canvas heat map (queries down, keys across) with the token
// strings on both axes as DOM lists, a hover readout, and the sink column marked.
// The bytes come from Python as one zlib stream of round(levels * sqrt(p)) (report/sinks.py).
import { h, listen } from "../../shared/dom.js";
import { formatNumber } from "../../shared/format.js";

/** Largest cell side in CSS px; small patterns stay readable without filling the screen. */
const MAX_CELL_PX = 22;
/** The heat map's target width in CSS px; big patterns shrink their cells toward 2 px. */
const TARGET_PX = 560;
/** Below this cell size not every token label fits: every k-th one is shown. */
const LABEL_PX = 11;

/** @type {WeakMap<Uint8Array, Promise<Uint8Array>>} */
const inflated = new WeakMap();

/**
 * Inflate the zlib pattern block once per array (the browser's DecompressionStream: no
 * dependency, works offline).
 * @param {Uint8Array} bytes
 * @returns {Promise<Uint8Array>}
 */
export function inflate(bytes) {
  let done = inflated.get(bytes);
  if (!done) {
    const part = /** @type {BlobPart} */ (/** @type {unknown} */ (bytes));  // wire bytes, never shared
    const stream = new Blob([part]).stream().pipeThrough(new DecompressionStream("deflate"));
    done = new Response(stream).arrayBuffer().then((buffer) => new Uint8Array(buffer));
    inflated.set(bytes, done);
  }
  return done;
}

/**
 * @typedef {{ raw: Uint8Array, layer: number, head: number, heads: number, positions: number[],
 *   levels: number, tokens: string[], sink: number | null, title: string,
 *   signal: AbortSignal }} PatternSpec
 */

/**
 * The heat map of `spec.head` in attention layer `spec.layer`.
 * @param {PatternSpec} spec
 */
export function patternView(spec) {
  const { raw, layer, head, heads, positions, levels, tokens, sink, signal } = spec;
  const n = positions.length;
  const start = (layer * heads + head) * n * n;
  const cell = Math.max(2, Math.min(MAX_CELL_PX, Math.floor(TARGET_PX / Math.max(n, 1))));
  const every = Math.ceil(LABEL_PX / cell);
  const word = (/** @type {number} */ i) => tokens[positions[i]] ?? `#${positions[i]}`;
  const sinkIndex = sink === null ? -1 : positions.indexOf(sink);
  const prob = (/** @type {number} */ q, /** @type {number} */ k) => (raw[start + q * n + k] / levels) ** 2;

  const axis = (/** @type {string} */ name, /** @type {boolean} */ keys) => h("ol", {
    class: `tln-as-axis tln-as-${name}`, "aria-label": name,
    style: { [keys ? "gridTemplateColumns" : "gridTemplateRows"]: `repeat(${n}, ${cell}px)` },
  }, positions.map((_, i) => h("li", {
    class: i % every === 0 ? null : "tln-as-hidden-label", title: `${word(i)} (position ${positions[i]})`,
    "data-sink": keys && i === sinkIndex ? "true" : null,
    style: { fontSize: `${Math.min(LABEL_PX, Math.max(every * cell - 1, 7))}px` },
  }, word(i))));

  const canvas = h("canvas", { class: "tln-as-canvas", width: n * cell * devicePixelRatio,
    height: n * cell * devicePixelRatio, role: "img",
    "aria-label": `${spec.title}: ${n} queries by ${n} keys${sinkIndex >= 0 ? `, sink column ${word(sinkIndex)}` : ""}`,
    style: { width: `${n * cell}px`, height: `${n * cell}px` } });
  const readout = h("output", { class: "tln-as-readout", "aria-live": "polite" },
    "Hover a cell for its attention probability.");
  const matrix = h("div", { class: "tln-as-matrix",
    style: { gridTemplateColumns: `auto ${n * cell}px`, gridTemplateRows: `auto ${n * cell}px` } },
  h("span", { class: "tln-as-corner" }, "query ↓ key →"), axis("keys", true), axis("queries", false), canvas);

  const draw = () => {
    const ctx = canvas.getContext("2d");
    if (!ctx) return;
    const style = getComputedStyle(canvas);
    const ink = style.getPropertyValue("--tln-accent").trim() || style.color;
    const mark = style.getPropertyValue("--tln-warning").trim() || style.color;
    ctx.setTransform(devicePixelRatio, 0, 0, devicePixelRatio, 0, 0);
    ctx.clearRect(0, 0, n * cell, n * cell);
    ctx.fillStyle = ink;
    for (let q = 0; q < n; q++) {
      for (let k = 0; k < n; k++) {
        const v = raw[start + q * n + k];
        if (v === 0) continue;
        ctx.globalAlpha = v / levels;  // shade follows sqrt(p), as stored
        ctx.fillRect(k * cell, q * cell, cell, cell);
      }
    }
    ctx.globalAlpha = 1;
    if (sinkIndex >= 0) {
      ctx.strokeStyle = mark;
      ctx.lineWidth = 2;
      ctx.setLineDash([4, 3]);
      ctx.strokeRect(sinkIndex * cell + 1, 1, cell - 2, n * cell - 2);
    }
  };
  listen(canvas, "mousemove", (/** @type {MouseEvent} */ event) => {
    const q = Math.floor(event.offsetY / cell), k = Math.floor(event.offsetX / cell);
    if (q < 0 || k < 0 || q >= n || k >= n) return;
    readout.textContent = `query ${word(q)} (${positions[q]}) → key ${word(k)} (${positions[k]}): ` +
      `${formatNumber(prob(q, k))}${k === sinkIndex ? " · sink column" : ""}`;
  }, signal);
  requestAnimationFrame(draw);  // after the panel is in the DOM, so the theme tokens resolve
  return h("figure", { class: "tln-as-pattern", "data-layer": layer, "data-head": head },
    h("figcaption", null, spec.title, h("span", { class: "tln-as-legend" },
      " · shade ∝ √p", sinkIndex >= 0 ? " · dashed column: sink position" : "")),
    matrix, readout);
}
