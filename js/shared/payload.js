// Reading the report envelope: schema check, float decoding, binary arrays, unreadable fallback.
import { h } from "./dom.js";

/** The envelope version this bundle reads (report/_base.py SCHEMA). */
export const SCHEMA = "torchlens_nb.report/1";

/** A card longer than this is cut in the unreadable fallback: the fallback stays bounded. */
const MAX_FALLBACK_CARD_CHARS = 4000;

/**
 * The payload types are generated from the Python report dataclasses (payload_types.d.ts, by
 * `python -m torchlens_nb.widgets._payload_types --write`): a panel names its report's
 * `<Class>Payload`, so tsc rejects a read of a field Python does not send.
 * @typedef {import("./payload_types.js").AnyPayload} Payload
 * @typedef {import("./payload_types.js").Finding} Finding
 * @typedef {import("./payload_types.js").TablePayload} TablePayload
 * @typedef {import("./payload_types.js").ExitPayload} ExitPayload
 * @typedef {{ ok: true, data: Payload } | { ok: false, reason: string, card: string }} ReadResult
 */

const FLOATS = /** @type {Record<string, number>} */ ({ nan: NaN, inf: Infinity, "-inf": -Infinity });

/**
 * Replace every `{"$float": "nan" | "inf" | "-inf"}` (the `_jsonsafe` encoding) by the number.
 * Binary values (DataView, typed arrays) pass through untouched.
 * @param {unknown} value
 * @returns {any}
 */
export function decodeFloats(value) {
  if (Array.isArray(value)) return value.map(decodeFloats);
  if (value === null || typeof value !== "object" || ArrayBuffer.isView(value)) return value;
  const obj = /** @type {Record<string, unknown>} */ (value);
  const keys = Object.keys(obj);
  if (keys.length === 1 && keys[0] === "$float" && typeof obj.$float === "string" && obj.$float in FLOATS) {
    return FLOATS[obj.$float];
  }
  /** @type {Record<string, unknown>} */
  const out = {};
  for (const key of keys) out[key] = decodeFloats(obj[key]);
  return out;
}

/**
 * Check and decode a payload. Never throws: a payload that cannot be read comes back as
 * `{ ok: false, reason, card }` so the panel can show the text card instead of a blank cell.
 * @param {unknown} raw
 * @returns {ReadResult}
 */
export function readPayload(raw) {
  if (raw === null || typeof raw !== "object" || Array.isArray(raw)) {
    return { ok: false, reason: "the payload is empty or not an object", card: "" };
  }
  const obj = /** @type {Record<string, any>} */ (raw);
  const card = typeof obj.card === "string" ? obj.card : "";
  if (obj.schema !== SCHEMA) {
    return { ok: false, reason: `schema ${JSON.stringify(obj.schema)} is not ${SCHEMA}`, card };
  }
  for (const key of ["report_type", "subject", "status", "lead"]) {
    if (typeof obj[key] !== "string") return { ok: false, reason: `"${key}" is not text`, card };
  }
  for (const key of ["findings", "tables", "disclosures", "unavailable", "exits", "actions"]) {
    if (obj[key] !== undefined && !Array.isArray(obj[key])) {
      return { ok: false, reason: `"${key}" is not a list`, card };
    }
  }
  for (const table of obj.tables ?? []) {
    if (!Array.isArray(table?.columns) || !Array.isArray(table?.rows)) {
      return { ok: false, reason: `table ${JSON.stringify(table?.name)} has no columns/rows lists`, card };
    }
  }
  const data = decodeFloats(obj);
  for (const key of ["findings", "tables", "disclosures", "unavailable", "exits", "actions"]) data[key] ??= [];
  for (const key of ["data", "unavailable_actions", "row_tones", "locations"]) data[key] ??= {};
  return { ok: true, data };
}

/**
 * The bounded fallback for a payload that cannot be read: the reason plus the text card.
 * @param {{ reason: string, card: string }} result
 */
export function unreadable(result) {
  console.warn(`[torchlens_nb] cannot read the report payload: ${result.reason}`);
  const card = result.card.length > MAX_FALLBACK_CARD_CHARS
    ? `${result.card.slice(0, MAX_FALLBACK_CARD_CHARS - 1)}…`
    : result.card;
  return h("div", { class: "tln-unreadable", role: "alert" },
    h("p", null, h("span", { "aria-hidden": "true" }, "⚠ "),
      `This panel could not read its report (${result.reason}).`,
      card ? " The text card follows." : " No text card came with it."),
    card ? h("pre", { class: "tln-card-text" }, card) : null);
}

/**
 * @typedef {{ dtype: "float32" | "float16" | "uint8", shape: number[],
 *   values: Float32Array | Uint8Array, downsampledFrom: number[] | null }} ArrayValue
 */

/**
 * Decode the binary arrays of a panel (`arrays` trait or a reply's `arrays`).
 * Each entry is `{dtype, shape, data: DataView}` or `{dtype, shape, buffer: i}` with `buffers[i]`.
 * float16 is widened to Float32Array so panels deal with two kinds only.
 * @param {Record<string, any> | null | undefined} raw
 * @param {DataView[]} [buffers]
 * @returns {Record<string, ArrayValue>}
 */
export function readArrays(raw, buffers = []) {
  /** @type {Record<string, ArrayValue>} */
  const out = {};
  for (const [name, spec] of Object.entries(raw ?? {})) {
    const view = spec.data ?? buffers[spec.buffer];
    if (!view) continue;
    const bytes = new Uint8Array(view.buffer, view.byteOffset, view.byteLength);
    out[name] = {
      dtype: spec.dtype,
      shape: spec.shape,
      values: decodeArray(spec.dtype, bytes),
      downsampledFrom: spec.downsampled_from ?? null,
    };
  }
  return out;
}

/**
 * @param {string} dtype
 * @param {Uint8Array} bytes
 */
function decodeArray(dtype, bytes) {
  if (dtype === "uint8") return bytes;
  // Copy: a DataView from the wire need not be 4-byte aligned.
  const aligned = bytes.slice().buffer;
  if (dtype === "float32") return new Float32Array(aligned);
  if (dtype === "float16") return widenHalf(new Uint16Array(aligned));
  throw new Error(`unsupported array dtype ${dtype}`);
}

/** @param {Uint16Array} half */
function widenHalf(half) {
  const out = new Float32Array(half.length);
  for (let i = 0; i < half.length; i++) {
    const bits = half[i];
    const sign = bits & 0x8000 ? -1 : 1;
    const exp = (bits >> 10) & 0x1f;
    const frac = bits & 0x3ff;
    if (exp === 0) out[i] = sign * 2 ** -14 * (frac / 1024);
    else if (exp === 31) out[i] = frac ? NaN : sign * Infinity;
    else out[i] = sign * 2 ** (exp - 15) * (1 + frac / 1024);
  }
  return out;
}
