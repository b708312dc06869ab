// Request/response over the widget comm: `model.send` out, `msg:custom` back, matched by id.

/** Default wait for an action (a follow-up diagnostic may run a model). */
export const ACTION_TIMEOUT_MS = 60_000;
/** Default wait for a table page (pandas sorts 100k rows in well under a second). */
export const PAGE_TIMEOUT_MS = 20_000;

// Module-level: every view of one widget shares this module, so ids never repeat per model.
let nextRequestId = 1;

export class RpcError extends Error {}

/** The model could not send: the kernel that made the panel is gone (restarted, shut down). */
export class KernelGoneError extends RpcError {
  constructor() {
    super("the kernel that made this panel is gone (restarted or shut down); re-run the cell for a live panel");
  }
}

/**
 * @typedef {{ msg: Record<string, any>, buffers: DataView[] }} Reply
 * @typedef {{ request: (content: Record<string, unknown>, options?: { timeoutMs?: number }) => Promise<Reply>,
 *   dispose: () => void }} Rpc
 */

/**
 * Open a request channel on `model`. Requests carry `request_id` and `report` (which report of
 * the widget they address: 0 is the displayed one, follow-ups get their own id from Python).
 * A reply `{type: "reply"}` resolves, `{type: "error", message}` rejects with that message, a
 * send that throws (the kernel is gone) rejects with {@link KernelGoneError}, and silence
 * rejects after the timeout with a message saying so: never a silent hang.
 * @param {import("@anywidget/types").AnyModel<any>} model
 * @returns {Rpc}
 */
export function createRpc(model) {
  const reportId = model.get("report_id") ?? 0;
  /** @type {Map<number, { resolve: (r: Reply) => void, reject: (e: Error) => void, timer: any }>} */
  const pending = new Map();
  /** @param {any} msg @param {DataView[]} [buffers] */
  const onMessage = (msg, buffers) => {
    if (!msg || (msg.report ?? 0) !== reportId) return;
    const entry = pending.get(msg.request_id);
    if (!entry) return;
    pending.delete(msg.request_id);
    clearTimeout(entry.timer);
    if (msg.type === "error") entry.reject(new RpcError(String(msg.message)));
    else entry.resolve({ msg, buffers: buffers ?? [] });
  };
  model.on("msg:custom", onMessage);
  return {
    request(content, { timeoutMs = ACTION_TIMEOUT_MS } = {}) {
      if (model.get("offline") === true) {
        return Promise.reject(new RpcError("this is an offline copy: there is no kernel to ask"));
      }
      const requestId = nextRequestId++;
      return new Promise((resolve, reject) => {
        const timer = setTimeout(() => {
          pending.delete(requestId);
          reject(new RpcError(`no reply from the kernel after ${timeoutMs / 1000} s; ` +
            "if a cell is still running, the request is answered when it ends"));
        }, timeoutMs);
        pending.set(requestId, { resolve, reject, timer });
        try {
          model.send({ ...content, request_id: requestId, report: reportId });
        } catch {  // ipywidgets throws ("Cannot send") once the comm's kernel is gone
          pending.delete(requestId);
          clearTimeout(timer);
          reject(new KernelGoneError());
        }
      });
    },
    dispose() {
      model.off("msg:custom", onMessage);
      for (const entry of pending.values()) clearTimeout(entry.timer);
      pending.clear();
    },
  };
}

/**
 * What a failed request says: a gone kernel as its own sentence (what to do), anything else
 * as "<prefix>: <message>".
 * @param {unknown} err
 * @param {string} [prefix]
 */
export function failureText(err, prefix = "Failed") {
  if (err instanceof KernelGoneError) return `${err.message[0].toUpperCase()}${err.message.slice(1)}.`;
  return `${prefix}: ${err instanceof Error ? err.message : String(err)}`;
}
