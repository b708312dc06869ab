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

/** Items of a list value shown in a table cell or a fact before "… (n more)". */
const MAX_LIST_ITEMS = 12;

/**
 * Any payload value as short text: numbers via formatNumber, Python spellings for booleans,
 * tagged summaries (`$array`, `$bytes`) in words, lists and mappings item by item with the
 * same number formatting (never raw JSON).
 * @param {unknown} value
 * @returns {string}
 */
export function formatValue(value) {
  if (value === null || value === undefined) return MISSING;
  if (typeof value === "number") return formatNumber(value);
  if (typeof value === "boolean") return value ? "True" : "False";
  if (typeof value === "string") return value;
  if (Array.isArray(value)) {
    const shown = value.slice(0, MAX_LIST_ITEMS).map(formatValue);
    const rest = value.length - shown.length;
    return `[${shown.join(", ")}${rest > 0 ? `, … (${formatNumber(rest)} more)` : ""}]`;
  }
  if (typeof value === "object") {
    const obj = /** @type {Record<string, any>} */ (value);
    if (obj.$array === "summary") return `array ${formatShape(obj.shape)} ${formatDtype(obj.dtype)}`;
    if (typeof obj.$bytes === "number") return `${formatBytes(obj.$bytes)} of bytes`;
    return `{${Object.entries(obj).map(([k, v]) => `${k}: ${formatValue(v)}`).join(", ")}}`;
  }
  return String(value);
}

/**
 * The last two segments of a path (callers keep the full path in a title attribute).
 * @param {string} path
 */
export function shortPath(path) {
  const parts = path.replace(/\\/g, "/").split("/");
  return parts.length > 2 ? parts.slice(-2).join("/") : path;
}

/**
 * A source location as a person reads it: `Cell In[3], line 9` for a notebook cell (Python put
 * the cell's name in `payload.locations`, as IPython's tracebacks name it), else
 * `dir/file.py:9`.
 * @param {string | null | undefined} file
 * @param {number | null | undefined} line
 * @param {Record<string, string>} locations
 */
export function formatLocation(file, line, locations) {
  if (!file) return MISSING;
  const cell = locations[file];
  if (cell) return line === null || line === undefined ? cell : `${cell}, line ${line}`;
  return `${shortPath(file)}:${line ?? "?"}`;
}

/**
 * A location spelled `file:line` (as table columns and `source_line` fields hold it) in the
 * form of {@link formatLocation}.
 * @param {string} text
 * @param {Record<string, string>} locations
 */
export function formatSourceLine(text, locations) {
  const match = /^(.*):(\d+)$/.exec(text);
  return match ? formatLocation(match[1], Number(match[2]), locations) : shortPath(text);
}

/**
 * Whether `text` is a `file:line` location of a file Python named (a notebook cell).
 * @param {unknown} text
 * @param {Record<string, string>} locations
 * @returns {text is string}
 */
export function isNamedLocation(text, locations) {
  if (typeof text !== "string") return false;
  const match = /^(.*):(\d+)$/.exec(text);
  return match !== null && match[1] in locations;
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
