// Boots one panel in a standalone HTML page written by `report.to_html()`: no kernel, no network.
// The page carries `<script type="application/json" id="tln-offline">` with the panel module
// text, the payload and the arrays (base64); this script stands in for the anywidget model.

/** @param {string} b64 */
function toDataView(b64) {
  const bin = atob(b64);
  const bytes = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
  return new DataView(bytes.buffer);
}

/** @param {Record<string, unknown>} state */
function offlineModel(state) {
  /** @type {Map<string, Set<Function>>} */
  const listeners = new Map();
  return {
    /** @param {string} key */
    get: (key) => state[key],
    /** @param {string} key @param {unknown} value */
    set(key, value) {
      state[key] = value;
      for (const fn of [...(listeners.get(`change:${key}`) ?? [])]) fn();
    },
    save_changes() {},
    send() {
      console.warn("[torchlens_nb] offline copy: a request was not sent (no kernel)");
    },
    /** @param {string} name @param {Function} fn */
    on(name, fn) {
      listeners.set(name, (listeners.get(name) ?? new Set()).add(fn));
    },
    /** @param {string} name @param {Function} fn */
    off(name, fn) {
      listeners.get(name)?.delete(fn);
    },
  };
}

async function boot() {
  const holder = document.getElementById("tln-offline");
  const root = document.getElementById("tln-root");
  if (!holder || !root) return;
  const data = JSON.parse(holder.textContent ?? "{}");
  /** @type {Record<string, any>} */
  const arrays = {};
  for (const [name, spec] of Object.entries(data.arrays ?? {})) {
    arrays[name] = { ...spec, data: toDataView(spec.base64) };
    delete arrays[name].base64;
  }
  const url = URL.createObjectURL(new Blob([data.esm], { type: "text/javascript" }));
  try {
    const mod = await import(/* @vite-ignore */ url);
    const model = offlineModel({ payload: data.payload, arrays, offline: true, panel: data.panel });
    await mod.default.render({ model, el: root });
    root.dataset.rendered = "1";
  } catch (err) {
    console.error("[torchlens_nb] the offline panel failed to render", err);
    root.dataset.rendered = "failed";
    document.getElementById("tln-fallback")?.removeAttribute("hidden");
  } finally {
    URL.revokeObjectURL(url);
  }
}

void boot();
