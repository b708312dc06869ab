// The DOM helpers every panel builds with: h(tag, attrs, ...children), svg(tag, attrs, text)
// and clear(el).

/**
 * @typedef {string | number | Node | null | undefined | false} Leaf
 * @typedef {Leaf | Leaf[] | Leaf[][] | (Leaf | Leaf[])[]} Child
 */

/**
 * Create an element. `attrs` keys: `class`, `dataset` (object), `style` (object), `on<Event>`
 * is NOT supported on purpose: add listeners with `listen()` so cleanup can remove them.
 * Boolean attributes are set when true and omitted when false; `null`/`undefined` are skipped.
 * @template {keyof HTMLElementTagNameMap} K
 * @param {K} tag
 * @param {Record<string, any> | null} [attrs]
 * @param {...Child} children
 * @returns {HTMLElementTagNameMap[K]}
 */
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs ?? {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") el.className = Array.isArray(value) ? value.filter(Boolean).join(" ") : value;
    else if (key === "dataset") Object.assign(el.dataset, value);
    else if (key === "style") Object.assign(el.style, value);
    else if (key === "text") el.textContent = String(value);
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  append(el, children);
  return el;
}

/**
 * Create an SVG element with its attributes (set as strings) and optional text.
 * @param {string} tag
 * @param {Record<string, string | number>} [attrs]
 * @param {string} [text]
 * @returns {SVGElement}
 */
export function svg(tag, attrs = {}, text) {
  const el = /** @type {SVGElement} */ (document.createElementNS("http://www.w3.org/2000/svg", tag));
  for (const [key, value] of Object.entries(attrs)) el.setAttribute(key, String(value));
  if (text !== undefined && text !== "") el.textContent = text;
  return el;
}

/**
 * Append children, flattening arrays and skipping empty values.
 * @param {Element} el
 * @param {Child[]} children
 */
function append(el, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) append(el, child);
    else el.append(child instanceof Node ? child : String(child));
  }
}

/**
 * Remove every child of `el` and return it (for `clear(el).append(...)`).
 * @template {Element} E
 * @param {E} el
 * @returns {E}
 */
export function clear(el) {
  el.replaceChildren();
  return el;
}

/**
 * Add a DOM listener that is removed when `signal` aborts (every panel owns one signal).
 * @param {EventTarget} target
 * @param {string} type
 * @param {(event: any) => void} fn
 * @param {AbortSignal} signal
 */
export function listen(target, type, fn, signal) {
  target.addEventListener(type, fn, { signal });
}
