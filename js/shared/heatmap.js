// Canvas heatmaps of numbers Python computed: one canvas pixel per cell, scaled by CSS
// (`image-rendering: pixelated`), so a 96 x 256 map is one putImageData of 98 KB and no
// per-cell DOM. Colour is a log10 ramp (viridis, readable on light and dark backgrounds);
// NaN ("not measured") cells stay transparent so the element's own CSS background shows
// through, and +inf ("measured, not finite") cells get one colour outside the ramp.

/** The viridis colour map (van der Walt and Smith, matplotlib) at 9 evenly spaced stops. */
const RAMP = [
  [68, 1, 84], [71, 44, 122], [59, 81, 139], [44, 113, 142], [33, 144, 141],
  [39, 173, 129], [92, 200, 99], [170, 220, 50], [253, 231, 37],
];
/** The colour of a measured non-finite cell (outside the ramp on purpose). */
export const NONFINITE_RGB = [230, 0, 120];

/**
 * The log10 range of the finite positive values (null when there are none).
 * @param {ArrayLike<number>} values
 * @returns {{ lo: number, hi: number } | null}
 */
export function logRange(values) {
  let lo = Infinity;
  let hi = -Infinity;
  for (let i = 0; i < values.length; i++) {
    const v = values[i];
    if (v > 0 && Number.isFinite(v)) {
      const l = Math.log10(v);
      if (l < lo) lo = l;
      if (l > hi) hi = l;
    }
  }
  return lo <= hi ? { lo, hi } : null;
}

/**
 * The ramp colour of `t` in [0, 1].
 * @param {number} t
 * @returns {number[]}
 */
export function rampColour(t) {
  const x = Math.min(1, Math.max(0, t)) * (RAMP.length - 1);
  const i = Math.min(RAMP.length - 2, Math.floor(x));
  const f = x - i;
  return RAMP[i].map((c, k) => Math.round(c + (RAMP[i + 1][k] - c) * f));
}

/**
 * A canvas of `rows` x `columns` cells from row-major `values` on a log10 colour scale.
 * Zero and negative values take the ramp's low end (they are measured, so never blank).
 * @param {ArrayLike<number>} values
 * @param {number} rows
 * @param {number} columns
 * @param {{ lo: number, hi: number } | null} range from {@link logRange}
 */
export function heatmapCanvas(values, rows, columns, range) {
  const canvas = document.createElement("canvas");
  canvas.width = Math.max(1, columns);
  canvas.height = Math.max(1, rows);
  const context = canvas.getContext("2d");
  if (!context) return canvas;
  const image = context.createImageData(canvas.width, canvas.height);
  const span = range && range.hi > range.lo ? range.hi - range.lo : 1;
  for (let i = 0; i < rows * columns; i++) {
    const v = values[i];
    if (Number.isNaN(v)) continue;  // alpha stays 0: not measured
    const rgb = v === Infinity || v === -Infinity ? NONFINITE_RGB
      : rampColour(v > 0 && range ? (Math.log10(v) - range.lo) / span : 0);
    image.data.set([rgb[0], rgb[1], rgb[2], 255], 4 * i);
  }
  context.putImageData(image, 0, 0);
  return canvas;
}

/**
 * The cell under a pointer event on a heatmap canvas drawn at any CSS size.
 * @param {HTMLCanvasElement} canvas
 * @param {{ clientX: number, clientY: number }} event
 * @returns {{ row: number, column: number } | null}
 */
export function cellAt(canvas, event) {
  const box = canvas.getBoundingClientRect();
  if (!box.width || !box.height) return null;
  const column = Math.floor(((event.clientX - box.left) / box.width) * canvas.width);
  const row = Math.floor(((event.clientY - box.top) / box.height) * canvas.height);
  if (column < 0 || row < 0 || column >= canvas.width || row >= canvas.height) return null;
  return { row, column };
}

/**
 * A CSS gradient of the ramp (the legend bar).
 */
export function rampGradient() {
  const stops = RAMP.map((c, i) => `rgb(${c.join(",")}) ${(100 * i) / (RAMP.length - 1)}%`);
  return `linear-gradient(to right, ${stops.join(", ")})`;
}
