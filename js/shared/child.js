// Follow-up panels: a reply's report rendered below the control that asked for it.

/** @type {Map<string, Promise<{ render: Function }>>} */
const loadedPanels = new Map();

/**
 * A stand-in model for a follow-up report: its own payload, the parent's comm.
 * `msg:custom` listeners go to the parent model (so the parent's cleanup accounting sees them);
 * `report_id` tells the follow-up's requests which report they address in Python.
 * @param {import("@anywidget/types").AnyModel<any>} parent
 * @param {Record<string, unknown>} state
 */
export function childModel(parent, state) {
  /** @type {Map<string, Set<Function>>} */
  const local = new Map();
  return {
    /** @param {string} key */
    get: (key) => state[key],
    /** @param {string} key @param {unknown} value */
    set(key, value) {
      state[key] = value;
      for (const fn of [...(local.get(`change:${key}`) ?? [])]) fn();
    },
    save_changes() {},
    /** @param {any} content @param {any} [callbacks] @param {any[]} [buffers] */
    send: (content, callbacks, buffers) => parent.send(content, callbacks, buffers),
    /** @param {string} name @param {any} fn */
    on(name, fn) {
      if (name === "msg:custom") parent.on(name, fn);
      else local.set(name, (local.get(name) ?? new Set()).add(fn));
    },
    /** @param {string} name @param {any} fn */
    off(name, fn) {
      if (name === "msg:custom") parent.off(name, fn);
      else local.get(name)?.delete(fn);
    },
  };
}

/**
 * Render the report carried by an action reply into `el`; returns the child's cleanup.
 * The reply names its panel; when that panel differs from the asking one, Python ships its
 * module text in `esm`, loaded the way anywidget loads `_esm` (Blob URL, cached per name).
 * @param {{ model: any, selfRender: Function }} parent
 * @param {{ msg: Record<string, any>, buffers: DataView[] }} reply
 * @param {HTMLElement} el
 * @returns {Promise<() => void>}
 */
export async function renderReply(parent, reply, el) {
  const { msg, buffers } = reply;
  let render = parent.selfRender;
  if (typeof msg.esm === "string" && msg.panel) {
    if (!loadedPanels.has(msg.panel)) loadedPanels.set(msg.panel, importText(msg.esm));
    render = /** @type {any} */ (await loadedPanels.get(msg.panel)).render;
  }
  /** @type {Record<string, any>} */
  const arrays = {};
  for (const [name, spec] of Object.entries(msg.arrays ?? {})) arrays[name] = { ...spec, data: buffers[spec.buffer] };
  const model = childModel(parent.model, {
    payload: msg.payload, arrays, report_id: msg.child, panel: msg.panel, offline: false,
  });
  return (await render({ model, el })) ?? (() => {});
}

/** @param {string} text */
async function importText(text) {
  const url = URL.createObjectURL(new Blob([text], { type: "text/javascript" }));
  try {
    const mod = await import(/* @vite-ignore */ url);
    return mod.default;
  } finally {
    URL.revokeObjectURL(url);
  }
}
