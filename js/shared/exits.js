// Next steps: each runnable exit is a button that asks Python to run it and shows the reply below.
import { h, listen } from "./dom.js";
import { failureText } from "./rpc.js";
import { offlineNote, setStatus, statusLine, unavailableNote } from "./status.js";

/** @typedef {import("./panel.js").PanelContext} PanelContext */

/**
 * The exits section: runnable exits as buttons (disabled offline, with a note), the others as
 * the code to type. Follow-up panels appear in a region below the list, one slot per exit.
 * @param {import("./payload.js").ExitPayload[]} exits
 * @param {PanelContext} ctx
 * @param {string} [title] the section's heading and accessible name
 */
export function exitsSection(exits, ctx, title = "Next steps") {
  if (exits.length === 0) return null;
  const followups = h("div", { class: "tln-followups" });
  const hasButtons = exits.some((e) => e.runnable);
  return h("section", { class: "tln-exits", "aria-label": title },
    h("h3", null, title),
    ctx.offline && hasButtons ? offlineNote("the buttons need a live kernel; run the code shown in a notebook.") : null,
    h("ul", { class: "tln-list tln-exit-list" }, exits.map((exit) => h("li", null, exitControl(exit, ctx, followups)))),
    followups);
}

/**
 * @param {import("./payload.js").ExitPayload} exit
 * @param {PanelContext} ctx
 * @param {HTMLElement} followups
 */
function exitControl(exit, ctx, followups) {
  const code = h("code", { class: "tln-code" }, exit.code);
  if (!exit.runnable || !exit.action) return [h("span", { class: "tln-exit-label" }, exit.label), " ", code];
  const reason = exit.disabled_reason;
  const button = h("button", { type: "button", class: "tln-button", disabled: ctx.offline || reason !== null,
    "data-action": exit.action, title: reason }, exit.label);
  const status = statusLine();
  if (reason !== null) {  // said before anything is clicked: Python knows the follow-up cannot run
    return [button, " ", code, " ", unavailableNote(reason)];
  }
  const slot = h("div", { class: "tln-followup", hidden: true });
  followups.append(slot);
  const name = exit.action;
  listen(button, "click", () => runAction(ctx, { name, args: exit.args, title: exit.label, button, status, slot }), ctx.signal);
  return [button, " ", code, " ", status];
}

/**
 * Send `{type: "action", name, args}` and show the reply's report in `slot`. While waiting the
 * button (if any) is disabled and the status says so; an error reply or a timeout is shown as text.
 * @param {PanelContext} ctx
 * @param {{ name: string, args: Record<string, unknown>, title: string, button: HTMLButtonElement | null,
 *   status: HTMLElement, slot: HTMLElement }} request
 */
export async function runAction(ctx, { name, args, title, button, status, slot }) {
  if (button) {
    button.disabled = true;
    button.setAttribute("aria-busy", "true");
  }
  setStatus(status, "busy", "Running…");
  try {
    const reply = await ctx.rpc.request({ type: "action", name, args });
    if (ctx.signal.aborted) return;
    slot.hidden = false;
    await ctx.showReply(reply, slot, title);
    setStatus(status, "ok", "Shown below.");
  } catch (err) {
    if (!ctx.signal.aborted) setStatus(status, "critical", failureText(err));
  } finally {
    button?.removeAttribute("aria-busy");
    if (button) button.disabled = false;
  }
}

