// Number, byte, shape and dtype formatting: one home for how values read in every panel.

const SIG = new Intl.NumberFormat("en-US", { maximumSignificantDigits: 4 });
const INT = new Intl.NumberFormat("en-US", { maximumFractionDigits: 0 });

/** Text shown for a missing value. */
export const MISSING = "—";

/**
 * A number for a person: integers exact with separators, floats to 4 significant digits,
 * scientific notation below 1e-3 and from 1e6 up, `nan` / `inf` / `-inf` spelled as Python does.
 * @param {number | null | undefined} value
 * @returns {string}
 */
export function formatNumber(value) {
  if (value === null || value === undefined) return MISSING;
  if (Number.isNaN(value)) return "nan";
  if (value === Infinity) return "inf";
  if (value === -Infinity) return "-inf";
  if (Object.is(value, -0)) return "-0";
  if (Number.isInteger(value) && Math.abs(value) < 1e15) return INT.format(value);
  const abs = Math.abs(value);
  if (abs >= 1e6 || abs < 1e-3) return value.toExponential(2).replace("e+", "e");
  return SIG.format(value);
}

/**
 * Bytes in binary units: `512 B`, `1.5 KiB`, `3.2 MiB`.
 * @param {number | null | undefined} bytes
 */
export function formatBytes(bytes) {
  if (bytes === null || bytes === undefined || !Number.isFinite(bytes)) return formatNumber(bytes);
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = bytes;
  let unit = 0;
  while (Math.abs(value) >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return unit === 0 ? `${value} B` : `${value.toFixed(1)} ${units[unit]}`;
}

/**
 * A shape as Python prints a tuple: `()`, `(5,)`, `(2, 3)`.
 * @param {ArrayLike<number> | null | undefined} shape
 */
export function formatShape(shape) {
  if (!shape) return MISSING;
  const dims = Array.from(shape, (d) => String(d));
  return dims.length === 1 ? `(${dims[0]},)` : `(${dims.join(", ")})`;
}

/**
 * A dtype without its library prefix: `torch.float32` -> `float32`.
 * @param {string | null | undefined} dtype
 */
export function formatDtype(dtype) {
  if (!dtype) return MISSING;
  return String(dtype).replace(/^(torch|numpy|np)\./, "");
}

/** @typedef {"int" | "float" | "bool" | "str" | "mixed" | "empty"} ColumnKind */

/**
 * The kind of a column from its values (nulls ignored): decides alignment and formatting only.
 * @param {unknown[]} values
 * @returns {ColumnKind}
 */
export function columnKind(values) {
  /** @type {Set<string>} */
  const kinds = new Set();
  for (const v of values) {
    if (v === null || v === undefined) continue;
    if (typeof v === "number") kinds.add(Number.isInteger(v) ? "int" : "float");
    else if (typeof v === "boolean") kinds.add("bool");
    else if (typeof v === "string") kinds.add("str");
    else kinds.add("mixed");
  }
  if (kinds.size === 0) return "empty";
  if (kinds.size === 1) return /** @type {ColumnKind} */ ([...kinds][0]);
  if (kinds.size === 2 && kinds.has("int") && kinds.has("float")) return "float";
  return "mixed";
}

/**
 * Any payload value as short text: numbers via formatNumber, Python spellings for booleans,
 * tagged summaries (`$array`, `$bytes`) in words, other objects as compact JSON.
 * @param {unknown} value
 * @returns {string}
 */
export function formatValue(value) {
  if (value === null || value === undefined) return MISSING;
  if (typeof value === "number") return formatNumber(value);
  if (typeof value === "boolean") return value ? "True" : "False";
  if (typeof value === "string") return value;
  if (Array.isArray(value)) return `[${value.map(formatValue).join(", ")}]`;
  if (typeof value === "object") {
    const obj = /** @type {Record<string, any>} */ (value);
    if (obj.$array === "summary") return `array ${formatShape(obj.shape)} ${formatDtype(obj.dtype)}`;
    if (typeof obj.$bytes === "number") return `${formatBytes(obj.$bytes)} of bytes`;
    return JSON.stringify(obj, (_k, v) => (typeof v === "number" && !Number.isFinite(v) ? formatNumber(v) : v));
  }
  return String(value);
}

/**
 * Exact text of a value for tooltips and filtering (full precision, no separators).
 * @param {unknown} value
 */
export function exactText(value) {
  if (value === null || value === undefined) return "";
  if (typeof value === "number") return Number.isFinite(value) ? String(value) : formatNumber(value);
  if (typeof value === "boolean") return value ? "True" : "False";
  return typeof value === "string" ? value : formatValue(value);
}
