// A stand-in for the anywidget model (AFM: get / set / on / off / save_changes / send) plus
// test hooks prefixed with `_`, so a panel module runs in a bare page with no Jupyter.
// Adapted from /work/shared/browser_recipe/harness/fake_model.js.

export function createModel(initialState = {}) {
  const state = { ...initialState };
  const listeners = new Map(); // event name -> Set<fn>
  let dirty = {};
  const emit = (name, ...args) => {
    for (const fn of [...(listeners.get(name) ?? [])]) fn(...args);
  };
  const model = {
    get: (key) => state[key],
    set(key, value) {
      state[key] = value;
      dirty[key] = value;
      emit(`change:${key}`, value);
      emit("change", { [key]: value });
    },
    save_changes() {
      model._saved.push({ ...dirty });
      dirty = {};
    },
    send(content, callbacks, buffers) {
      model._sent.push({ content, buffers: (buffers ?? []).map((b) => b.byteLength) });
    },
    on(name, fn) {
      if (!listeners.has(name)) listeners.set(name, new Set());
      listeners.get(name).add(fn);
    },
    off(name, fn) {
      if (!name) return listeners.clear();
      if (!fn) return listeners.delete(name);
      listeners.get(name)?.delete(fn);
    },
    // ---- test hooks ----
    _saved: [],
    _sent: [],
    /** Simulate Python setting a trait (fires change events, nothing saved). */
    _kernelSet(key, value) {
      state[key] = value;
      emit(`change:${key}`, value);
      emit("change", { [key]: value });
    },
    /** Simulate `widget.send(msg, buffers)` from Python: buffers arrive as DataView. */
    _kernelSend(msg, buffers = []) {
      emit("msg:custom", msg, buffers.map((b) => (b instanceof DataView ? b : new DataView(b.buffer ?? b))));
    },
    _listenerCount: () => [...listeners.values()].reduce((n, s) => n + s.size, 0),
  };
  return model;
}

/** Load an ES module the way anywidget loads `_esm`: text -> Blob URL -> dynamic import. */
export async function loadEsmLikeAnywidget(esmText) {
  const url = URL.createObjectURL(new Blob([esmText], { type: "text/javascript" }));
  try {
    return await import(url);
  } finally {
    URL.revokeObjectURL(url);
  }
}

/** Mount a widget module into a fresh element: returns { model, el, cleanup }. */
export async function mount(esmText, { state = {}, css = "", container = document.body } = {}) {
  if (css && !document.querySelector("style[data-tln-theme]")) {
    const style = document.createElement("style");
    style.dataset.tlnTheme = "";
    style.textContent = css;
    document.head.append(style);
  }
  const mod = await loadEsmLikeAnywidget(esmText);
  const widget = typeof mod.default === "function" ? await mod.default() : mod.default;
  const model = createModel(state);
  const initCleanup = await widget.initialize?.({ model });
  const el = document.createElement("div");
  el.className = "harness-el";
  container.append(el);
  const viewCleanup = await widget.render?.({ model, el });
  return {
    model,
    el,
    async cleanup() {
      await viewCleanup?.();
      el.remove();
      await initCleanup?.();
    },
  };
}
