// The shell every panel module runs in: payload reading, redraw, requests, cleanup.
import { clear, h } from "./dom.js";
import { readArrays, readPayload, unreadable } from "./payload.js";
import { createRpc } from "./rpc.js";
import { renderReply } from "./child.js";
import { followHostTheme } from "./theme.js";

/**
 * @typedef {object} PanelContext
 * @property {import("@anywidget/types").AnyModel<any>} model
 * @property {import("./rpc.js").Rpc} rpc kernel requests (actions, table pages)
 * @property {AbortSignal} signal aborts on redraw and cleanup: pass it to `listen()`
 * @property {boolean} offline true in a `report.to_html()` copy: no kernel, controls disabled
 * @property {Record<string, import("./payload.js").ArrayValue>} arrays decoded binary arrays
 * @property {Map<string, any>} state view-only state that survives redraws (sort order, page)
 * @property {Record<string, string>} locations source files Python named (notebook cells:
 *   "Cell In[3]"), for `formatLocation`
 * @property {Record<string, string>} unavailable follow-ups that cannot run now -> why
 * @property {(reply: import("./rpc.js").Reply, slot: HTMLElement, title: string) => Promise<void>} showReply
 *   render a reply's report into `slot` (replacing what the slot held)
 */

/**
 * Mount a panel: add the `.tln-panel` scope, follow the host's theme (theme.js), draw
 * `view(payload, ctx)`, redraw on
 * `change:payload` / `change:arrays`, and return a cleanup that removes every model listener,
 * every DOM listener (through `ctx.signal`) and every follow-up panel.
 * A payload that cannot be read, or a view that throws, shows the text card instead.
 * The view names its report's generated payload type (`payload_types.d.ts`); the envelope was
 * checked here, the data fields by tsc against the Python dataclasses.
 * @template {import("./payload.js").Payload} P
 * @param {{ model: import("@anywidget/types").AnyModel<any>, el: HTMLElement }} props
 * @param {(payload: P, ctx: PanelContext) => Node} view
 * @param {{ name: string, render: Function }} panel this panel's name and its own `render`
 * @returns {() => void}
 */
export function mountPanel({ model, el }, view, panel) {
  el.classList.add("tln-panel");
  el.dataset.panel = panel.name;
  const rpc = createRpc(model);
  /** @type {Map<string, any>} */
  const state = new Map();
  /** @type {Map<HTMLElement, () => void>} */
  const followups = new Map();
  /** @type {AbortController | null} */
  let controller = null;
  const mounted = new AbortController();  // lives as long as the panel: the theme follower
  followHostTheme(el, mounted.signal);

  const dropFollowups = () => {
    for (const cleanup of followups.values()) cleanup();
    followups.clear();
  };
  const draw = () => {
    controller?.abort();
    dropFollowups();
    controller = new AbortController();
    const signal = controller.signal;
    const result = readPayload(model.get("payload"));
    if (!result.ok) {
      clear(el).append(unreadable(result));
      return;
    }
    /** @type {PanelContext} */
    const ctx = {
      model, rpc, signal, state,
      locations: result.data.locations,
      unavailable: result.data.unavailable_actions,
      offline: model.get("offline") === true,
      arrays: {},
      async showReply(reply, slot, title) {
        followups.get(slot)?.();
        followups.delete(slot);
        const body = h("div");
        slot.replaceChildren(h("p", { class: "tln-followup-title" }, h("span", { "aria-hidden": "true" }, "↳ "), title), body);
        const cleanup = await renderReply({ model, selfRender: panel.render }, reply, body);
        if (signal.aborted) cleanup();
        else followups.set(slot, cleanup);
      },
    };
    try {
      ctx.arrays = readArrays(model.get("arrays"));
      clear(el).append(view(/** @type {P} */ (result.data), ctx));
    } catch (err) {
      clear(el).append(unreadable({ reason: `the ${panel.name} panel failed: ${String(err)}`, card: result.data.card }));
    }
  };
  model.on("change:payload", draw);
  model.on("change:arrays", draw);
  draw();
  return () => {
    controller?.abort();
    mounted.abort();
    dropFollowups();
    rpc.dispose();
    model.off("change:payload", draw);
    model.off("change:arrays", draw);
  };
}
